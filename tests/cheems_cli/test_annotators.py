"""`cheems annotators add|list|reset|disable` on a real SQLite store: tokens printed once, errors as one line."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from cheems_cli.main import app
from services.store import annotators
from services.store.db import StoreConfig, create_engine_for, session_scope


def test_accounts_from_the_command_line(tmp_path: Path) -> None:
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
            assert annotators.annotator_by_token(session, token) is None
            assert annotators.annotator_by_token(session, reset) is None  # disabled
    finally:
        engine.dispose()
    missing = runner.invoke(app, ["annotators", "reset", "nobody", "--db", db])
    assert missing.exit_code != 0 and "no annotator 'nobody'" in missing.output
