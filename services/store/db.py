"""Engines and sessions: `StoreConfig` -> `create_engine_for(config)` -> `with session_scope(engine) as s: ...`.

    with session_scope(engine) as s: ...     # a unit of work that writes (on SQLite: the write lock from BEGIN)
    with read_scope(engine) as s: ...        # one that only reads: never waits behind a writer

A SQLite file runs in WAL mode, so readers and the one writer do not wait for each other; a read-only unit
begins a deferred transaction (it takes no write lock) and refuses to write (SQLite `query_only`, PostgreSQL
`READ ONLY`). Tables are made by migrations (`services.store.migrate.upgrade(url)`), never here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, InterfaceError, OperationalError
from sqlalchemy.orm import Session

from cheems.credentials import hide_password
from cheems.settings import Settings
from services.store.errors import DatabaseUnreachable, InvalidRecord

DEFAULT_DATABASE_URL: str = Settings.model_fields["database_url"].default  # the one default (CHEEMS_DATABASE_URL)
READ_ONLY = "cheems_read_only"  # the execution option `read_scope` marks its connections with
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoreConfig:
    """Where the store lives.

    url: a SQLAlchemy URL: `sqlite:///cheems.db` (a file, the default) or
        `postgresql+psycopg://user@host:5432/db`; libpq options such as
        `?options=-csearch_path%3Dmyschema` pass through to the driver.
    echo: log every SQL statement (at INFO, through the `sqlalchemy.engine` logger).
    """

    url: str = DEFAULT_DATABASE_URL
    echo: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.strip():
            raise InvalidRecord(f"StoreConfig.url: expected a database URL, got {hide_password(str(self.url))!r}")
        try:
            make_url(self.url)
        except ArgumentError:
            raise InvalidRecord(f"StoreConfig.url: not a database URL: {hide_password(self.url)!r}") from None
        if not isinstance(self.echo, bool):
            raise ValueError(f"StoreConfig.echo: expected a bool, got {self.echo!r}")

    @property
    def is_sqlite(self) -> bool:
        return make_url(self.url).get_backend_name() == "sqlite"


def _json(value: Any) -> str:
    # Chinese stays readable in the database (and in psql / sqlite3 sessions) instead of \uXXXX escapes.
    return json.dumps(value, ensure_ascii=False)


def create_engine_for(config: StoreConfig) -> Engine:
    """An engine for `config.url`; SQLite connections enforce foreign keys, server connections are pinged."""
    if config.is_sqlite:
        _private_sqlite_file(config.url)
        # timeout: wait up to 30 s for another writer's lock instead of failing at once.
        engine = create_engine(config.url, echo=config.echo, json_serializer=_json, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_connect)
        event.listen(engine, "begin", _sqlite_begin)
    else:
        engine = create_engine(
            config.url,
            echo=config.echo,
            json_serializer=_json,
            pool_size=5,
            max_overflow=10,
            pool_pre_ping=True,  # survive server restarts and idle disconnects
            pool_recycle=1800,
        )
    log.debug("engine for %s", hide_password(config.url))
    return engine


def _private_sqlite_file(url: str) -> None:
    """A SQLite file that does not exist yet is created readable by its owner only (0600; SQLite gives its journal
    and WAL files the same mode), so the accounts' token hashes and the annotations are nobody else's to read."""
    database = make_url(url).database or ""
    if database and database != ":memory:" and not database.startswith("file:") and not os.path.exists(database):
        with contextlib.suppress(OSError):  # a folder that is missing: SQLite says so, in its own words
            os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # Python 3.11's sqlite3 begins transactions only before DML, so DDL (migrations) would autocommit and
    # savepoints misbehave; SQLAlchemy emits BEGIN itself instead (the recipe in its SQLite dialect docs).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")  # SQLite checks foreign keys only when asked, per connection
    # WAL: readers never wait for the writer, nor it for them. The mode is stored in the file, so this
    # switches a file once (its first connection); later connections find it set. A memory database
    # stays in memory mode. synchronous=FULL (SQLite's default, said here because it is chosen): every
    # commit is on disk before it returns, so an acknowledged write survives a process crash and a power
    # cut alike (NORMAL would survive the crash only); in WAL mode that is one fsync a commit.
    if cursor.execute("PRAGMA journal_mode").fetchone()[0] not in ("wal", "memory"):
        cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.close()


def _sqlite_begin(connection: Connection) -> None:
    # IMMEDIATE takes the write lock up front. Our units of work read, then write; two deferred
    # transactions doing that at once deadlock, and SQLite fails one with "database is locked" at once
    # instead of waiting. Taking the lock first makes writers queue (up to the timeout) instead.
    # A read-only unit (`read_scope`) begins deferred: it takes no write lock, so it never queues behind
    # a writer (WAL), and `query_only` makes a write in it fail rather than upgrade the lock.
    read_only = bool(connection.get_execution_options().get(READ_ONLY))
    if connection.info.get(READ_ONLY, False) != read_only:  # the pooled connection remembers its setting
        connection.exec_driver_sql(f"PRAGMA query_only={int(read_only)}")  # before BEGIN IMMEDIATE, which it refuses
        connection.info[READ_ONLY] = read_only
    connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def connect(engine: Engine) -> Connection:
    """A connection, or DatabaseUnreachable naming the URL (password hidden) and the driver's first line."""
    try:
        return engine.connect()
    except (OperationalError, InterfaceError) as e:
        why = str(e.orig or e).strip().splitlines()[0] if str(e.orig or e).strip() else type(e).__name__
        url = engine.url.render_as_string(hide_password=True)
        raise DatabaseUnreachable(f"cannot connect to the database at {url}: {why}") from None


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """One unit of work: commits when the block ends normally, rolls back on any exception (and re-raises)."""
    with _scope(engine) as session:
        yield session


@contextmanager
def read_scope(engine: Engine) -> Iterator[Session]:
    """A unit of work that only reads (a token check, a lookup): it never waits behind a writer, and a write
    in it fails (SQLite `query_only`, PostgreSQL `READ ONLY`) instead of taking the write lock late."""
    options = {READ_ONLY: True} | ({"postgresql_readonly": True} if engine.dialect.name == "postgresql" else {})
    with _scope(engine) as session:
        session.connection(execution_options=options)  # before the first query: the transaction begins marked
        yield session


@contextmanager
def _scope(engine: Engine) -> Iterator[Session]:
    session = Session(engine, expire_on_commit=False)  # rows stay readable after the block
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
