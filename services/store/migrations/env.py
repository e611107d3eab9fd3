"""Alembic environment of the store: run by `services.store.migrate`, never imported directly.

Online, it migrates the connection `migrate.py` puts in `config.attributes["connection"]` (or opens
one from `sqlalchemy.url`); offline (`--sql`), it prints the SQL for `sqlalchemy.url`'s dialect.
"""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import Connection

from services.store.db import StoreConfig, create_engine_for
from services.store.models import Base

config = context.config
OPTIONS: dict[str, Any] = {
    "target_metadata": Base.metadata,
    "compare_type": True,
    "render_as_batch": True,  # SQLite cannot ALTER most things: batch mode copies the table instead
}


def run_offline() -> None:
    context.configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True, **OPTIONS)
    with context.begin_transaction():
        context.run_migrations()


def run_on(connection: Connection) -> None:
    context.configure(connection=connection, **OPTIONS)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_on(connection)
        return
    engine = create_engine_for(StoreConfig(config.get_main_option("sqlalchemy.url") or ""))
    try:
        with engine.begin() as connection:
            run_on(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
