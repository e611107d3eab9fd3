"""Accounts in the store (SQLite and PostgreSQL): a role each, tokens kept only as their sha256, a token made
elsewhere taken (and taken again without a change), a disabled or reset account refused at its next lookup, and
the accounts of before roles (an admin flag) migrated to the roles they had; a token check never waits behind a
writer."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import Engine, text

from cheems.roles import ADMIN, ANNOTATOR, OPERATOR, SERVICE, Caller
from services.store import accounts
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.errors import Conflict, InvalidRecord, UnknownAnnotator
from services.store.migrate import upgrade
from services.store.models import Annotator


def test_accounts_keep_only_the_token_hash_and_their_role(engine: Engine) -> None:
    with session_scope(engine) as s:
        token = accounts.add_annotator(s, "张三")
        admin = accounts.add_annotator(s, "组长", admin=True)
        operator = accounts.add_account(s, "etl", OPERATOR)
    with session_scope(engine) as s:
        stored = s.get(Annotator, "张三")
        assert stored is not None and stored.token_sha256 == accounts.hash_token(token) != token
        found = accounts.account_by_token(s, token)
        assert found is not None and (found.name, found.role, found.admin) == ("张三", ANNOTATOR, False)
        boss = accounts.account_by_token(s, admin)
        assert boss is not None and boss.admin and boss.role == ADMIN
        assert accounts.account_by_token(s, operator).role == OPERATOR  # type: ignore[union-attr]
        assert accounts.account_by_token(s, token + "x") is None
        with pytest.raises(Conflict, match="already exists"):
            accounts.add_annotator(s, "张三")
        with pytest.raises(InvalidRecord, match="name"):
            accounts.add_annotator(s, "")
        with pytest.raises(InvalidRecord, match="role must be one of annotator, operator, admin, service"):
            accounts.add_account(s, "x", "root")
    with session_scope(engine) as s:
        new = accounts.reset_token(s, "张三")
    with session_scope(engine) as s:
        assert accounts.account_by_token(s, token) is None and accounts.account_by_token(s, new) is not None
        accounts.disable(s, "张三")
    with session_scope(engine) as s:
        assert accounts.account_by_token(s, new) is None
        newer = accounts.reset_token(s, "张三")  # a new token does not enable a disabled account
    with session_scope(engine) as s:
        assert accounts.account_by_token(s, newer) is None and accounts.account_by_token(s, new) is None
        accounts.enable(s, "张三")
    with session_scope(engine) as s:
        assert accounts.account_by_token(s, newer) is not None
        assert [p.name for p in accounts.list_accounts(s)] == ["etl", "张三", "组长"]
        with pytest.raises(UnknownAnnotator, match="no account 'nobody'"):
            accounts.reset_token(s, "nobody")


def test_a_token_made_elsewhere_is_taken_and_adding_it_again_changes_nothing(engine: Engine) -> None:
    made = "20c5fb134040c16e73b2dabb5e05b736be99656e1d195232d2e9277a744d1b7f"  # `openssl rand -hex 32`
    with session_scope(engine) as s:
        assert accounts.add_account(s, "eval-worker", SERVICE, made) == made
    with session_scope(engine) as s:
        assert accounts.add_account(s, "eval-worker", SERVICE, made) == made  # a set-up run again
        with pytest.raises(Conflict, match="already exists"):
            accounts.add_account(s, "eval-worker", OPERATOR, made)  # never another role by adding
        with pytest.raises(Conflict, match="another account has this token"):
            accounts.add_account(s, "other", SERVICE, made)
        with pytest.raises(InvalidRecord, match="fewer than 8 different characters"):
            accounts.add_account(s, "short", SERVICE, "abc")
        with pytest.raises(InvalidRecord, match="about 83 bits, at least 128"):  # cheems.credentials
            accounts.add_account(s, "weak", SERVICE, "0123456789abcdef" * 4)
        with pytest.raises(InvalidRecord, match="no spaces"):
            accounts.reset_token(s, "eval-worker", "0123456789 abcdef0123")
    book = accounts.AccountBook(engine)
    assert book(made) == Caller("eval-worker", SERVICE)
    assert book("0" * 64) is None and book("") is None
    with session_scope(engine) as s:
        accounts.disable(s, "eval-worker")
    assert book(made) is None  # at once: nothing is cached
    with session_scope(engine) as s:
        accounts.enable(s, "eval-worker")
    assert book(made) == Caller("eval-worker", SERVICE)  # its own token again


def test_a_token_check_never_waits_behind_a_writer(engine: Engine) -> None:
    """A writer holding its transaction (an outbox relay waiting for a broker, a long ingest) leaves the check
    free: on SQLite a check that began BEGIN IMMEDIATE queued behind it (up to the 30 s busy timeout)."""
    with session_scope(engine) as s:
        token = accounts.add_account(s, "scorer-client", SERVICE)
    book, seen = accounts.AccountBook(engine), []
    with session_scope(engine) as writer:
        accounts.add_account(writer, "someone", OPERATOR)  # on SQLite: the write lock, held to the block's end
        check = threading.Thread(target=lambda: seen.append(book(token)), daemon=True)
        check.start()
        check.join(10)
        assert seen == [Caller("scorer-client", SERVICE)], "the token check waited behind the writer"


def test_admins_and_annotators_of_before_roles_keep_what_they_were(db_url: str) -> None:
    upgrade(db_url, "0009")
    engine = create_engine_for(StoreConfig(db_url))
    try:
        with engine.begin() as connection:
            for name, admin in (("组长", True), ("张三", False)):
                connection.execute(
                    text(
                        "INSERT INTO annotators (name, token_sha256, admin, active, created_at) "
                        "VALUES (:name, :sha, :admin, :active, CURRENT_TIMESTAMP)"
                    ),
                    {"name": name, "sha": accounts.hash_token(f"token-of-{name}-0123456789"), "admin": admin,
                     "active": True},
                )  # fmt: skip
        upgrade(db_url)
        book = accounts.AccountBook(engine)
        assert book("token-of-组长-0123456789") == Caller("组长", ADMIN)
        assert book("token-of-张三-0123456789") == Caller("张三", ANNOTATOR)
    finally:
        engine.dispose()
