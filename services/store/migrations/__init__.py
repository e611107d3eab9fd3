"""Alembic migrations of the store; run them with `services.store.migrate.upgrade(url)`."""
