"""Accounts: a name, a role (`cheems.roles`) and a token the store keeps only as its sha256.

with session_scope(engine) as s:
    token = add_account(s, "etl", OPERATOR)           # shown once; the store keeps its sha256
    add_account(s, "eval-worker", SERVICE, token)     # a token made elsewhere (a Kubernetes Secret's)
    token = reset_token(s, "etl")                     # the old one stops working
    disable(s, "etl")                                 # refused at the next call
    enable(s, "etl")                                  # its token signs in again
    account_by_token(s, token)                        # the active account, or None

    callers = AccountBook(engine)                     # what a service checks each call's bearer token with
    callers(token)                                    # Caller("etl", "operator") or None

Tokens are 256 random bits (`new_token`), so a plain sha256 cannot be reversed, and looking one up by its hash
leaks nothing a timing could use: the database compares hashes, never tokens, and a hash's prefix says nothing
of the token. Nothing here logs a token. Every lookup reads the store, so a disabled or reset account is
refused at its next call.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from cheems.credentials import check_strength
from cheems.errors import InvalidInput
from cheems.roles import ADMIN, ANNOTATOR, ROLES, Caller
from services.store import validate as v
from services.store.db import read_scope
from services.store.errors import Conflict, InvalidRecord, UnknownAnnotator
from services.store.models import Annotator

TOKEN_PREFIX = "chm_"


def hash_token(token: str) -> str:
    """The stored form of a token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def check_role(role: str) -> str:
    if role not in ROLES:
        raise InvalidRecord(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    return role


def check_token(token: str) -> str:
    """A token made elsewhere: one word, strong enough never to be guessed (`cheems.credentials.check_strength`,
    the command line's rule too); InvalidRecord, whose message never shows it."""
    try:
        return check_strength(token)
    except InvalidInput as e:
        raise InvalidRecord(str(e)) from None


def holds(account: Annotator, token: str) -> bool:
    """Whether `token` is the account's (its hash compared in constant time)."""
    return hmac.compare_digest(account.token_sha256, hash_token(token))


def add_account(session: Session, name: str, role: str, token: str | None = None) -> str:
    """Create an account; returns its token (a new one unless `token` is given). Conflict if the name is taken,
    unless it already is this very account (same role and token: nothing changes, so a set-up can run again)."""
    v.key("name", name)
    check_role(role)
    token = new_token() if token is None else check_token(token)
    digest = hash_token(token)
    found = session.get(Annotator, name)
    if found is not None:
        if found.role == role and found.active and holds(found, token):
            return token
        raise Conflict(f"account {name!r} already exists (reset its token instead)")
    if session.scalar(select(Annotator.name).where(Annotator.token_sha256 == digest)) is not None:
        raise Conflict("another account has this token: make a new one")
    session.add(Annotator(name=name, token_sha256=digest, role=role, active=True))
    session.flush()
    return token


def add_annotator(session: Session, name: str, admin: bool = False) -> str:
    """A person's account on the annotator's page: role annotator, or admin."""
    return add_account(session, name, ADMIN if admin else ANNOTATOR)


def reset_token(session: Session, name: str, token: str | None = None) -> str:
    """A new token for `name` (`token`, or a new random one); the old one stops working. A disabled account stays
    disabled: enabling it is its own decision (`enable`), never a side effect of a new token."""
    account = get_account(session, name)
    token = new_token() if token is None else check_token(token)
    account.token_sha256 = hash_token(token)
    session.flush()
    return token


def disable(session: Session, name: str) -> None:
    """The account's token no longer signs in; what it did (annotations, claims, promotions) stays."""
    get_account(session, name).active = False
    session.flush()


def set_role(session: Session, name: str, role: str) -> None:
    """The account's role from its next call (a person's decision: nothing here changes a role by itself)."""
    get_account(session, name).role = check_role(role)
    session.flush()


def enable(session: Session, name: str) -> None:
    """A disabled account's token signs in again (the same token: a person's decision, never a restart's)."""
    get_account(session, name).active = True
    session.flush()


def get_account(session: Session, name: str) -> Annotator:
    account = session.get(Annotator, name)
    if account is None:
        raise UnknownAnnotator(f"no account {name!r}")
    return account


def list_accounts(session: Session) -> list[Annotator]:
    return list(session.scalars(select(Annotator).order_by(Annotator.name)))


def account_by_token(session: Session, token: str) -> Annotator | None:
    """The active account whose token this is, or None."""
    found = session.scalar(select(Annotator).where(Annotator.token_sha256 == hash_token(token)))
    return found if found is not None and found.active else None


class AccountBook:
    """Bearer tokens checked against the store's accounts: `book(token)` -> the active account as a Caller, or
    None. One indexed read per call, so a disabled account is refused at once; a read-only transaction, so a
    check never waits behind a writer (an outbox relay, an ingest)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def __call__(self, token: str) -> Caller | None:
        with read_scope(self.engine) as session:
            found = account_by_token(session, token)
            return None if found is None else Caller(found.name, found.role)
