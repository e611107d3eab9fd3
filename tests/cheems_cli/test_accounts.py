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
    secret.write_text("20c5fb134040c16e73b2dabb5e05b736be99656e1d195232d2e9277a744d1b7f\n")
    for _ in range(2):  # a set-up run twice (a Kubernetes Job) changes nothing the second time
        args = ["accounts", "add", "eval-worker", "--role", "scorer-client", "--token-file", str(secret), "--db", db]
        made = runner.invoke(app, args)
        assert made.exit_code == 0 and "20c5fb13" not in made.output, made.output
    wrong = runner.invoke(app, ["accounts", "add", "x", "--role", "root", "--db", db])
    assert wrong.exit_code == 2 and "role must be one of annotator, operator, admin, service, scorer-client" in (
        wrong.output
    )
    no_role = runner.invoke(app, ["accounts", "add", "y", "--db", db])
    assert no_role.exit_code == 2 and "--role" in no_role.output
    listed = runner.invoke(app, ["accounts", "list", "--db", db]).output.splitlines()
    assert listed == ["etl\toperator\tactive", "eval-worker\tscorer-client\tactive"]
    rotated = tmp_path / "rotated"
    rotated.write_text("7ad2df3b5fe0da277d2e342bb1be0c93520a31049d31c2f59817e0d7e0ca964f")
    assert (
        runner.invoke(app, ["accounts", "reset", "eval-worker", "--token-file", str(rotated), "--db", db]).exit_code
        == 0
    )
    book = accounts.AccountBook(create_engine_for(StoreConfig(db)))
    try:
        assert book(rotated.read_text()) == Caller("eval-worker", "scorer-client")
        assert book(secret.read_text().strip()) is None and book(operator.output.strip()) == Caller("etl", "operator")
        assert runner.invoke(app, ["accounts", "disable", "etl", "--db", db]).exit_code == 0
        assert book(operator.output.strip()) is None
    finally:
        book.engine.dispose()


def test_a_weak_token_from_a_file_is_refused_and_a_disabled_account_enabled_again(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cheems.db'}"
    runner = CliRunner()
    weak = tmp_path / "weak"
    weak.write_text("a" * 16 + "\n")  # the token made elsewhere
    for command in (["accounts", "add", "etl", "--role", "operator"], ["accounts", "reset", "etl"]):
        if command[1] == "reset":
            assert runner.invoke(app, ["accounts", "add", "etl", "--role", "operator", "--db", db]).exit_code == 0
        refused = runner.invoke(app, [*command, "--token-file", str(weak), "--db", db])
        assert refused.exit_code == 2, refused.output
        assert refused.output.startswith("error: --token-file: the token has fewer than 8 different characters")
        assert "a" * 16 not in refused.output and "Traceback" not in refused.output
    token = runner.invoke(app, ["accounts", "reset", "etl", "--db", db]).output.strip()
    assert runner.invoke(app, ["accounts", "disable", "etl", "--db", db]).exit_code == 0
    enabled = runner.invoke(app, ["accounts", "enable", "etl", "--db", db])
    assert enabled.exit_code == 0 and enabled.output == "enabled etl\n", enabled.output
    book = accounts.AccountBook(create_engine_for(StoreConfig(db)))
    try:
        assert book(token) == Caller("etl", "operator")  # the same token, by a person's decision
    finally:
        book.engine.dispose()
    role = runner.invoke(app, ["accounts", "role", "etl", "--role", "scorer-client", "--db", db])
    assert role.exit_code == 0 and role.output == "etl is scorer-client\n", role.output
    assert runner.invoke(app, ["accounts", "list", "--db", db]).output == "etl\tscorer-client\tactive\n"
    missing = runner.invoke(app, ["accounts", "enable", "nobody", "--db", db])
    assert missing.exit_code == 2 and "no account 'nobody'" in missing.output


def test_a_token_file_is_held_to_the_stores_rule_naming_the_option(tmp_path: Path) -> None:
    """One rule (`cheems.credentials.check_strength`): the command line's own check used to pass a strong token with
    a space, which the store then refused without naming --token-file."""
    db = f"sqlite:///{tmp_path / 'cheems.db'}"
    spaced = tmp_path / "spaced"
    spaced.write_text("20c5fb134040c16e 73b2dabb5e05b736be99656e1d195232\n")
    args = ["accounts", "add", "etl", "--role", "operator", "--token-file", str(spaced), "--db", db]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2, refused.output
    assert refused.output.startswith("error: --token-file: the token needs printable characters and no spaces")
    assert CliRunner().invoke(app, ["accounts", "list", "--db", db]).output == ""
