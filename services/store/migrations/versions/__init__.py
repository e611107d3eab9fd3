"""Alembic revisions, oldest first: v0001_initial, ... (Alembic itself ignores this file)."""
