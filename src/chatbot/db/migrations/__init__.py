"""The SQL migrations, applied in order by `chatbot migrate` (db/migrate.py): the only DDL the service has."""
