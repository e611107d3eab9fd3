"""`cheems accounts add|list|reset|disable` (and `cheems annotators`, kept) on a real SQLite store: tokens printed
once or taken from a file, roles checked, errors as one line."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from cheems.roles import Caller
from cheems_cli.main import app
from services.store import accounts
from services.store.db import StoreConfig, create_engine_for, session_scope


def test_annotator_accounts_from_the_command_line(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cheems.db'}"
    runner = CliRunner()
    added = runner.invoke(app, ["annotators", "add", "张三", "--db", db])
    assert added.exit_code == 0, added.output
    token = added.output.strip()
    assert token.startswith("chm_") and len(token) > 40
    assert runner.invoke(app, ["annotators", "add", "组长", "--admin", "--db", db]).exit_code == 0
    again = runner.invoke(app, ["annotators", "add", "张三", "--db", db])
    assert again.exit_code != 0 and "already exists" in again.output and "Traceback" not in again.output
    listed = runner.invoke(app, ["annotators", "list", "--db", db])
    assert listed.output.splitlines() == ["张三\tannotator\tactive", "组长\tadmin\tactive"]
    reset = runner.invoke(app, ["annotators", "reset", "张三", "--db", db]).output.strip()
    assert runner.invoke(app, ["annotators", "disable", "张三", "--db", db]).exit_code == 0
    engine = create_engine_for(StoreConfig(db))
    try:
        with session_scope(engine) as session:
            assert reset != token
            assert accounts.account_by_token(session, token) is None
            assert accounts.account_by_token(session, reset) is None  # disabled
    finally:
        engine.dispose()
    missing = runner.invoke(app, ["annotators", "reset", "nobody", "--db", db])
    assert missing.exit_code == 2 and "no account 'nobody'" in missing.output


def test_accounts_with_roles_and_tokens_from_files(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cheems.db'}"
    runner = CliRunner()
    operator = runner.invoke(app, ["accounts", "add", "etl", "--role", "operator", "--db", db])
    assert operator.exit_code == 0, operator.output
    secret = tmp_path / "token"
    secret.write_text("0123456789abcdef" * 4 + "\n")
    for _ in range(2):  # a set-up run twice (a Kubernetes Job) changes nothing the second time
        args = ["accounts", "add", "eval-worker", "--role", "service", "--token-file", str(secret), "--db", db]
        made = runner.invoke(app, args)
        assert made.exit_code == 0 and "0123456789abcdef" not in made.output, made.output
    wrong = runner.invoke(app, ["accounts", "add", "x", "--role", "root", "--db", db])
    assert wrong.exit_code == 2 and "role must be one of annotator, operator, admin, service, scorer-client" in (
        wrong.output
    )
    no_role = runner.invoke(app, ["accounts", "add", "y", "--db", db])
    assert no_role.exit_code == 2 and "--role" in no_role.output
    listed = runner.invoke(app, ["accounts", "list", "--db", db]).output.splitlines()
    assert listed == ["etl\toperator\tactive", "eval-worker\tservice\tactive"]
    rotated = tmp_path / "rotated"
    rotated.write_text("fedcba9876543210" * 4)
    assert (
        runner.invoke(app, ["accounts", "reset", "eval-worker", "--token-file", str(rotated), "--db", db]).exit_code
        == 0
    )
    book = accounts.AccountBook(create_engine_for(StoreConfig(db)))
    try:
        assert book("fedcba9876543210" * 4) == Caller("eval-worker", "service")
        assert book("0123456789abcdef" * 4) is None and book(operator.output.strip()) == Caller("etl", "operator")
        assert runner.invoke(app, ["accounts", "disable", "etl", "--db", db]).exit_code == 0
        assert book(operator.output.strip()) is None
    finally:
        book.engine.dispose()
