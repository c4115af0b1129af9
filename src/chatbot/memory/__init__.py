"""Long-term memory of each user: the profile and facts read at a run's start and written after its answer.

Extraction with a PII guard, the memory jobs that outlive a replica, the endpoints that
show, delete and reset what is remembered.
"""
