"""The accounts `cheems up` makes (SQLite and PostgreSQL): each in the store with its role, its token in a file only
its owner reads (0600, in a 0700 folder), kept when run again, renewed when the file is gone or stale, and an
account of that name with another role refused."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from sqlalchemy import Engine

from cheems.credentials import read_secret
from cheems.errors import Conflict
from cheems.roles import ANNOTATOR, OPERATOR, SERVICE, Caller
from services.store.accounts import AccountBook, add_account, disable
from services.store.db import session_scope
from system.accounts import provision
from system.plan import ACCOUNTS


def test_made_kept_and_renewed(db_url: str, engine: Engine, tmp_path: Path) -> None:
    folder = tmp_path / "accounts"
    files = provision(db_url, folder, ACCOUNTS)
    assert files == {"operator": folder / "operator.token", "eval-worker": folder / "eval-worker.token"}
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert {stat.S_IMODE(f.stat().st_mode) for f in files.values()} == {0o600}
    book = AccountBook(engine)
    tokens = {name: read_secret(path) for name, path in files.items()}
    assert book(tokens["operator"]) == Caller("operator", OPERATOR)
    assert book(tokens["eval-worker"]) == Caller("eval-worker", SERVICE)
    assert provision(db_url, folder, ACCOUNTS) == files  # again: nothing changes
    assert {name: read_secret(path) for name, path in files.items()} == tokens
    files["operator"].unlink()  # a lost file: a new token, the old one refused
    with session_scope(engine) as session:
        disable(session, "eval-worker")  # a disabled account of the system's: active again, same token
    provision(db_url, folder, ACCOUNTS)
    assert book(tokens["operator"]) is None and book(read_secret(files["operator"])) == Caller("operator", OPERATOR)
    assert book(tokens["eval-worker"]) == Caller("eval-worker", SERVICE)
    with session_scope(engine) as session:
        add_account(session, "reviewer", ANNOTATOR)
    with pytest.raises(Conflict, match="exists with the role annotator; this system needs it as operator"):
        provision(db_url, folder, {"reviewer": OPERATOR})
    assert not (folder / "reviewer.token").exists()
