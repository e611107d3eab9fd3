"""Secrets stay out of sight: no password in what `cheems -v db upgrade` prints or logs (a real PostgreSQL
URL with a password), and a scorer token read from a file (`--token-file`, CHEEMS_SCORER_TOKEN_FILE), so it
need not sit on a command line that `ps` shows."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from cheems_cli.main import app
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer
from services.store.migrate import current_revision, head_revision
from trainer.tiny import init_tiny_model

PASSWORD = "SECRETPW-9f3e"  # PostgreSQL here trusts local connections: any password connects
TOKEN = "tok-5d1c7a-Hq8Lw2Zp9Xr4Nv6B"


def cheems(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CHEEMS_")}
    base |= {"TERMINAL_WIDTH": "1000", "NO_COLOR": "1"}  # usage errors on one line, whatever the paths' length
    cmd = [sys.executable, "-m", "cheems_cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False, env={**base, **(env or {})})


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_db_upgrade_never_shows_the_password(db_url: str) -> None:
    url = make_url(db_url).set(password=PASSWORD).render_as_string(hide_password=False)
    run = cheems("-v", "db", "upgrade", "--db", url)
    assert run.returncode == 0, run.stderr[-2000:]
    assert PASSWORD not in run.stdout + run.stderr
    assert ":***@" in run.stderr  # the URL is still logged, masked
    run = cheems("-v", "db", "upgrade", env={"CHEEMS_DATABASE_URL": url})  # from the environment: the same
    assert run.returncode == 0 and PASSWORD not in run.stdout + run.stderr
    assert current_revision(db_url) == head_revision()


def test_a_bad_database_url_is_reported_without_its_password() -> None:
    run = cheems("db", "upgrade", "--db", f"postgresql+psycopg://me:{PASSWORD}@[nonsense")
    assert run.returncode != 0 and PASSWORD not in run.stdout + run.stderr


@pytest.fixture(scope="module")
def guarded_scorer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ScorerServer, Path]]:
    """A scorer whose token comes from a file (`cheems serve --token-file`): yields it and the file."""
    root = tmp_path_factory.mktemp("secrets")
    token_file = root / "scorer-token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")  # as `kubectl create secret` or `echo` leave it
    model = init_tiny_model(root / "tiny", hidden_size=32)
    config = ScorerConfig(
        model=str(model), backend="torch", host="127.0.0.1", grpc_port=0, http_port=-1, token_file=str(token_file)
    )
    assert config.token == TOKEN
    with ScorerServer(config) as server:
        yield server, token_file


def test_a_token_read_from_a_file_is_accepted(guarded_scorer: tuple[ScorerServer, Path]) -> None:
    server, token_file = guarded_scorer
    score = ["score", "--model-url", f"127.0.0.1:{server.grpc_port}", "--prompt", "你好", "--response", "你好！"]
    run = cheems(*score, "--token-file", token_file)
    assert run.returncode == 0, run.stderr[-2000:]
    run = cheems(*score, env={"CHEEMS_SCORER_TOKEN_FILE": str(token_file)})
    assert run.returncode == 0, run.stderr[-2000:]
    run = cheems(*score)
    assert run.returncode == 2 and "UNAUTHENTICATED" in run.stderr


def test_an_unreadable_token_file_is_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "bench.jsonl").write_text("")
    commands = [
        ["score", "--prompt", "你好", "--response", "你好！"],
        ["rewards", str(tmp_path / "bench.jsonl"), "--model-url", "h:1", "--out", str(tmp_path / "r.jsonl")],
        ["service", "eval-worker", "--bootstrap", "h:9092", "--scorer-url", "h:1"],
    ]
    for command in commands:
        result = CliRunner().invoke(app, [*command, "--token-file", str(tmp_path / "absent")])
        assert result.exit_code == 2, (command, result.output)
        assert "error: --token-file: cannot read" in result.output
    judge = ["annotate", "judge", str(tmp_path / "bench.jsonl"), "--out", "x", "--base-url", "h", "--model", "m"]
    result = CliRunner().invoke(app, [*judge, "--api-key-file", str(tmp_path / "absent")])
    assert result.exit_code == 2 and "error: --api-key-file: cannot read" in result.output


def test_serve_names_an_unreadable_token_file(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    run = cheems("serve", "--model", tmp_path, "--token-file", tmp_path / "empty")
    assert run.returncode == 2 and "--token-file" in run.stderr and "is empty" in run.stderr
