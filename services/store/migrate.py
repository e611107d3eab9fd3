"""Runs the store's Alembic migrations from code (no alembic.ini): the only way its tables are made.

    python -m services.store.migrate upgrade [URL]            # to the newest revision
    python -m services.store.migrate sql [URL]                # print the upgrade SQL instead (offline mode)
    python -m services.store.migrate revision URL -m MESSAGE  # autogenerate the next revision from models.py

URL defaults to CHEEMS_DATABASE_URL (`cheems.settings`). `revision` compares models.py with a
database already at the newest revision and writes
migrations/versions/vNNNN_<message>.py; read it before committing.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text

from cheems.credentials import hide_password
from cheems.settings import Settings
from services.observe.logs import setup_logging
from services.store.db import DEFAULT_DATABASE_URL, StoreConfig, connect, create_engine_for

MIGRATIONS = Path(__file__).resolve().with_name("migrations")
log = logging.getLogger(__name__)


def alembic_config(url: str) -> Config:
    """An Alembic Config for `url`, built in code with script_location pointing into this package."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    # Config values go through ConfigParser interpolation: URL-encoded characters need their % doubled.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.set_main_option("file_template", "v%%(rev)s_%%(slug)s")  # a valid module name for mypy and ruff
    return config


@contextmanager
def _connected(url: str) -> Iterator[Config]:
    """A Config carrying an open transaction on `url`, which env.py migrates; committed at the end."""
    engine = create_engine_for(StoreConfig(url))
    try:
        with connect(engine) as connection, connection.begin():
            config = alembic_config(url)
            config.attributes["connection"] = connection
            yield config
    finally:
        engine.dispose()


# pg_advisory_xact_lock key: replicas starting together (Kubernetes init containers) migrate one at a time
MIGRATION_LOCK = 0x63686565  # "chee"


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at `url` to `revision` (default: the newest); a no-op when it is there already.

    On PostgreSQL concurrent callers are serialised by an advisory lock held until the migration
    commits; the later ones then find the database at `revision` and do nothing.
    """
    with _connected(url) as config:
        connection = config.attributes["connection"]
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        command.upgrade(config, revision)
    log.info("store at %s is at revision %s", hide_password(url), revision)


def upgrade_sql(url: str, revision: str = "head") -> None:
    """Print the SQL that `upgrade` would run, for `url`'s dialect, without connecting."""
    command.upgrade(alembic_config(url), revision, sql=True)


def current_revision(url: str) -> str | None:
    """The revision the database at `url` is at (None before the first upgrade)."""
    engine = create_engine_for(StoreConfig(url))
    try:
        with connect(engine) as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str | None:
    """The newest revision in migrations/versions."""
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def new_revision(url: str, message: str) -> None:
    """Autogenerate migrations/versions/vNNNN_<message>.py: what models.py has that the database at `url` lacks."""
    with _connected(url) as config:
        number = len(list(ScriptDirectory.from_config(config).walk_revisions())) + 1
        command.revision(config, message=message, autogenerate=True, rev_id=f"{number:04d}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m services.store.migrate", description="Run or write the store's migrations."
    )
    parser.add_argument("action", choices=("upgrade", "sql", "revision"))
    parser.add_argument(
        "url",
        nargs="?",
        default=Settings().database_url,
        help=f"default: CHEEMS_DATABASE_URL, else {DEFAULT_DATABASE_URL}",
    )
    parser.add_argument("-m", "--message", help="what the new revision does (revision only)")
    args = parser.parse_args(argv)
    setup_logging("migrate")
    if args.action == "upgrade":
        upgrade(args.url)
    elif args.action == "sql":
        upgrade_sql(args.url)
    elif not args.message:
        parser.error("revision needs -m MESSAGE")
    else:
        new_revision(args.url, args.message)


if __name__ == "__main__":
    main()
