"""The accounts a system on one machine runs with: made in the store, their tokens in files only their owner reads.

    tokens = provision("sqlite:///out/up/cheems.db", Path("out/up/accounts"), {"operator": OPERATOR})
    tokens["operator"]          # Path("out/up/accounts/operator.token"), mode 0600

`cheems up` (and so `make demo`) gives every process the credential it needs this way, so everything works as it
did before accounts existed: `operator` for people's commands beside it (`cheems` commands run from the same
directory find its file), `eval-worker` (role scorer-client) for the score workers calling the scorer, `judge`
(role service) for the AI judge calling the annotation service, when one runs; the demo adds its simulated
annotators. Running it again keeps the accounts and their files; a missing file gets a new
token (the account's is reset to it: nothing old comes back).

A revocation lasts: an account someone disabled, or whose token someone reset (its file no longer holds it),
stops `cheems up` with one line naming the account and the command that undoes it, if it should be undone
(Revoked); `cheems up` never enables an account or restores a token itself. An account of that name with another
role is refused (Conflict): `cheems up` never changes what someone else set up. The one exception narrows, never
widens: an account found with the role this system gave it before (`eval-worker` was `service`, it only scores)
takes the narrower role it has now (NARROWED), and says so in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from sqlalchemy.engine import Engine

from cheems.credentials import hide_password, read_secret, write_secret
from cheems.errors import CheemsError, Conflict
from cheems.roles import SCORER_CLIENT, SERVICE
from services.store import accounts
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from services.store.models import Annotator

log = logging.getLogger(__name__)

# (the role this system gave an account before, the narrower one it needs now): taken in place when found
NARROWED = {(SERVICE, SCORER_CLIENT)}


class Revoked(Conflict):
    """An account of the system was disabled or its token reset by someone: `cheems up` does not undo it."""


def provision(db: str, folder: Path, wanted: Mapping[str, str]) -> dict[str, Path]:
    """Each of `wanted` ({name: role}) an active account of the store at `db` (migrated first) whose token is in
    `folder`/NAME.token; {name: that file}. Revoked for an account disabled or reset by someone, Conflict for one
    with another role."""
    upgrade(db)
    engine = create_engine_for(StoreConfig(db))
    try:
        return {name: _provide(engine, folder / f"{name}.token", name, role, db) for name, role in wanted.items()}
    finally:
        engine.dispose()


def _provide(engine: Engine, path: Path, name: str, role: str, db: str) -> Path:
    token = kept = _kept(path)
    store = f"--db {hide_password(db)}"
    with session_scope(engine) as session:
        found = session.get(Annotator, name)
        if found is None:
            token = accounts.add_account(session, name, role, token)
        elif found.role != role and (found.role, role) not in NARROWED:
            raise Conflict(f"account {name!r} exists with the role {found.role}; this system needs it as {role}")
        elif not found.active:
            raise Revoked(
                f"account {name!r} is disabled, and `cheems up` never enables an account again: if it should work "
                f"again, run `cheems accounts enable {name} {store}`, then start again"
            )
        elif token is None:
            token = accounts.reset_token(session, name)
            log.warning("account %s: token reset (its file %s was missing); the old token no longer works", name, path)
        elif not accounts.holds(found, token):
            raise Revoked(
                f"account {name!r} has another token than its file {path} (it was reset), and `cheems up` never "
                f"restores an old token: run `cheems accounts reset {name} --token-file {path} {store}` if that "
                f"file's token should work again, or delete {path} for a new one, then start again"
            )
        if found is not None and found.role != role:
            log.warning("account %s: role %s narrowed to %s (all it needs)", name, found.role, role)
            found.role = role
    if kept != token:
        write_secret(path, token)
    return path


def _kept(path: Path) -> str | None:
    """The token in the file, if there is a readable one."""
    try:
        return read_secret(path)
    except CheemsError:
        return None
