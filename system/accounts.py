"""The accounts a system on one machine runs with: made in the store, their tokens in files only their owner reads.

    tokens = provision("sqlite:///out/up/cheems.db", Path("out/up/accounts"), {"operator": OPERATOR})
    tokens["operator"]          # Path("out/up/accounts/operator.token"), mode 0600

`cheems up` (and so `make demo`) gives every process the credential it needs this way, so everything works as it
did before accounts existed: `operator` for people's commands beside it (`cheems` commands run from the same
directory find its file), `eval-worker` (role service) for the score workers calling the scorer; the demo adds
its simulated annotators. Running it again keeps the accounts and their files; a token file that is missing or
no longer the account's gets a new token (the account's is reset to it). An account of that name with another
role is refused (Conflict): `cheems up` never changes what someone else set up.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from sqlalchemy.engine import Engine

from cheems.credentials import read_secret, write_secret
from cheems.errors import CheemsError, Conflict
from services.store import accounts
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from services.store.models import Annotator

log = logging.getLogger(__name__)


def provision(db: str, folder: Path, wanted: Mapping[str, str]) -> dict[str, Path]:
    """Each of `wanted` ({name: role}) an active account of the store at `db` (migrated first) whose token is in
    `folder`/NAME.token; {name: that file}."""
    upgrade(db)
    engine = create_engine_for(StoreConfig(db))
    try:
        return {name: _provide(engine, folder / f"{name}.token", name, role) for name, role in wanted.items()}
    finally:
        engine.dispose()


def _provide(engine: Engine, path: Path, name: str, role: str) -> Path:
    token = kept = _kept(path)
    with session_scope(engine) as session:
        found = session.get(Annotator, name)
        if found is None:
            token = accounts.add_account(session, name, role, token)
        elif found.role != role:
            raise Conflict(f"account {name!r} exists with the role {found.role}; this system needs it as {role}")
        elif token is None or not found.active or not accounts.holds(found, token):
            token = accounts.reset_token(session, name, token)
            log.info("account %s: token reset (its file %s was missing or stale)", name, path)
    if kept != token:
        write_secret(path, token)
    return path


def _kept(path: Path) -> str | None:
    """The token in the file, if there is a readable one."""
    try:
        return read_secret(path)
    except CheemsError:
        return None
