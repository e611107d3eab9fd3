"""The command line's edge of the error tree: error kind -> exit code, one line, no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cheems import errors
from cheems_cli.options import DatabaseUrl, clear_errors, configure_logging, exit_code, key_values

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.FormatError("a.jsonl", 2, "bad"), 2),
        (errors.NotFound("no run"), 2),
        (FileNotFoundError("missing.jsonl"), 2),
        (errors.Unavailable("broker down"), 3),
        (errors.PortInUse("taken"), 3),
        (errors.DeadlineExceeded("late"), 3),
        (errors.CheemsError("bug"), 1),
    ],
)
def test_exit_code_by_kind(error: BaseException, code: int) -> None:
    assert exit_code(error) == code


def test_a_command_reports_one_line_and_the_kinds_code() -> None:
    app = typer.Typer()

    @app.command()
    @clear_errors
    def fail() -> None:
        raise errors.Unavailable("the broker at kafka:9092 did not answer")

    result = CliRunner().invoke(app, [])
    assert result.exit_code == 3
    assert result.output.strip() == "error: the broker at kafka:9092 did not answer"


def test_a_settings_option_reads_env_then_default(monkeypatch: pytest.MonkeyPatch) -> None:
    app = typer.Typer()

    @app.command()
    def show(db: DatabaseUrl) -> None:
        typer.echo(db)

    monkeypatch.delenv("CHEEMS_DATABASE_URL", raising=False)
    assert CliRunner().invoke(app, []).output.strip() == "sqlite:///cheems.db"
    monkeypatch.setenv("CHEEMS_DATABASE_URL", "sqlite:///other.db")
    assert CliRunner().invoke(app, []).output.strip() == "sqlite:///other.db"
    assert CliRunner().invoke(app, ["--db", "sqlite:///given.db"]).output.strip() == "sqlite:///given.db"


def test_key_values_of_repeated_set_options() -> None:
    assert key_values(["epochs=2", " lr =1e-5", "eval_files=[a=b]", "epochs=3"]) == {
        "epochs": "3",  # the later one wins
        "lr": "1e-5",
        "eval_files": "[a=b]",  # only the first = splits
    }
    assert key_values(None) == {}
    for bad in ("epochs", "=2", " =2"):
        with pytest.raises(typer.BadParameter, match=rf"expected key=value, got {bad!r}") as info:
            key_values([bad])
        assert info.value.param_hint == "--set"


def test_log_format_goes_to_the_processes_a_command_starts_and_what_it_says_becomes_a_json_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CHEEMS_LOG_FORMAT", raising=False)  # the command line's flag alone
    command = [sys.executable, "-m", "cheems_cli", "--log-format", "json", "db", "upgrade"]
    command += ["--db", f"sqlite:///{tmp_path / 'c.db'}"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 0 and run.stdout == "", run.stderr[-2000:]
    records = [json.loads(line) for line in run.stderr.splitlines()]  # every line, the command's own included
    assert any(r["message"].startswith("database at revision ") and r["service"] == "cheems" for r in records)
    configure_logging(verbose=False, log_format="json")  # in this process: undone by tests/conftest.py
    assert os.environ["CHEEMS_LOG_FORMAT"] == "json"  # what `cheems up`'s children and torchrun's ranks read
    with pytest.raises(ValueError, match="log_format must be one of text, json, got 'xml'"):
        configure_logging(verbose=False, log_format="xml")
