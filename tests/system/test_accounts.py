"""The accounts `cheems up` makes (SQLite and PostgreSQL): each in the store with its role, its token in a file only
its owner reads (0600, in a 0700 folder), kept when run again, renewed when the file is gone; an account someone
disabled or reset stays so (`cheems up` stops, naming it and what undoes it), and an account of that name with
another role is refused, but for the eval worker's former role, narrowed."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from sqlalchemy import Engine

from cheems.credentials import read_secret
from cheems.errors import Conflict
from cheems.roles import ANNOTATOR, OPERATOR, SCORER_CLIENT, SERVICE, Caller
from services.store.accounts import AccountBook, add_account, disable, enable, reset_token
from services.store.db import session_scope
from system.accounts import Revoked, provision
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
    assert book(tokens["eval-worker"]) == Caller("eval-worker", SCORER_CLIENT)  # it only scores
    assert provision(db_url, folder, ACCOUNTS) == files  # again: nothing changes
    assert {name: read_secret(path) for name, path in files.items()} == tokens
    files["operator"].unlink()  # a lost file: a new token, the old one refused
    provision(db_url, folder, ACCOUNTS)
    assert book(tokens["operator"]) is None and book(read_secret(files["operator"])) == Caller("operator", OPERATOR)
    with session_scope(engine) as session:
        add_account(session, "reviewer", ANNOTATOR)
    with pytest.raises(Conflict, match="exists with the role annotator; this system needs it as operator"):
        provision(db_url, folder, {"reviewer": OPERATOR})
    assert not (folder / "reviewer.token").exists()


def test_a_disabled_account_stays_disabled(db_url: str, engine: Engine, tmp_path: Path) -> None:
    folder = tmp_path / "accounts"
    files = provision(db_url, folder, ACCOUNTS)
    operator = read_secret(files["operator"])
    with session_scope(engine) as session:
        disable(session, "operator")
    for _ in range(2):  # every restart alike
        with pytest.raises(
            Revoked, match=r"^account 'operator' is disabled, .* `cheems accounts enable operator --db "
        ):
            provision(db_url, folder, ACCOUNTS)
    book = AccountBook(engine)
    assert book(operator) is None and read_secret(files["operator"]) == operator
    with session_scope(engine) as session:
        enable(session, "operator")  # a person's decision
    provision(db_url, folder, ACCOUNTS)
    assert book(operator) == Caller("operator", OPERATOR)


def test_a_reset_token_is_never_restored(db_url: str, engine: Engine, tmp_path: Path) -> None:
    folder = tmp_path / "accounts"
    files = provision(db_url, folder, ACCOUNTS)
    old = read_secret(files["eval-worker"])
    with session_scope(engine) as session:
        new = reset_token(session, "eval-worker")  # handed to someone else; the file still holds the old one
    expected = (
        rf"^account 'eval-worker' has another token than its file {files['eval-worker']} \(it was reset\), .*"
        rf"`cheems accounts reset eval-worker --token-file {files['eval-worker']} --db .*`.* or delete"
    )
    for _ in range(2):
        with pytest.raises(Revoked, match=expected):
            provision(db_url, folder, ACCOUNTS)
    book = AccountBook(engine)
    assert book(old) is None and book(new) == Caller("eval-worker", SCORER_CLIENT)
    assert read_secret(files["eval-worker"]) == old  # left as found
    files["eval-worker"].unlink()  # what the message offers: a new token for the system
    provision(db_url, folder, ACCOUNTS)
    assert book(new) is None and book(read_secret(files["eval-worker"])) == Caller("eval-worker", SCORER_CLIENT)


def test_the_eval_workers_former_role_is_narrowed_never_widened(db_url: str, engine: Engine, tmp_path: Path) -> None:
    folder = tmp_path / "accounts"
    with session_scope(engine) as session:
        add_account(session, "eval-worker", SERVICE)  # a store of before: the worker as `service`
    provision(db_url, folder, {"operator": OPERATOR, "eval-worker": SERVICE})
    before = read_secret(folder / "eval-worker.token")
    provision(db_url, folder, ACCOUNTS)
    book = AccountBook(engine)
    assert book(before) == Caller("eval-worker", SCORER_CLIENT)  # same token, narrower role
    with pytest.raises(Conflict, match="exists with the role scorer-client; this system needs it as service"):
        provision(db_url, folder, {"eval-worker": SERVICE})  # never widened
