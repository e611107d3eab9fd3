"""A database of the benchmark's own, migrated with the project's migrations, gone afterwards.

    with fresh_database("postgresql", PG_URL, "cheems_bench_queue") as url: ...   # CREATE DATABASE, then DROP
    with fresh_database("sqlite", "", "") as url: ...                            # a file in a temporary folder

A PostgreSQL database left by an interrupted run of the same name is dropped first. `keep` leaves it (or the
SQLite file, in the working folder) for a look afterwards.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from services.store.migrate import upgrade


@contextmanager
def fresh_database(kind: str, server_url: str, name: str, keep: bool = False) -> Iterator[str]:
    """The URL of an empty database migrated to the newest revision."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="cheems-bench-queue-") as folder:
            path = Path.cwd() / f"{name or 'cheems_bench_queue'}.db" if keep else Path(folder) / "queue.db"
            path.unlink(missing_ok=True)
            url = f"sqlite:///{path}"
            upgrade(url)
            yield url
        return
    admin = create_engine(server_url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as e:
        where = make_url(server_url).render_as_string(hide_password=True)
        raise SystemExit(f"cannot make a database on {where} (--pg-url; --db sqlite needs none): {e.orig}") from None
    try:
        url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
        upgrade(url)
        yield url
    finally:
        if not keep:
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
