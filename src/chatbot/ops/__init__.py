"""Operations across features: erasing a user, the retention sweep, the sweeper that runs it, and their endpoints.

A composition layer: it calls each feature's deletion in order and owns only its own tables.
"""
