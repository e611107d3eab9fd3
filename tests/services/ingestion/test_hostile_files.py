"""A file mixing good records with every kind of bad line: each good record stored exactly once, on SQLite
and PostgreSQL, each bad one reported with its line; `cheems ingest` exits 1, and 2 when nothing can be read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sqlalchemy import Engine, func, select

from services.ingestion.records import read_samples
from services.ingestion.service import IngestionService
from services.store.db import session_scope
from services.store.models import Prompt, Response


def good(n: int, **extra: object) -> bytes:
    record = {"prompt": f"问题{n}\u2028第二行", "responses": [f"回答{n}甲", f"回答{n}乙"], **extra}
    return json.dumps(record, ensure_ascii=False).encode()


# (bytes of the line, what the report must say about it)
BAD = [
    (b'{"prompt": "\xff\xfe", "responses": ["x"]}', "invalid UTF-8"),
    (b'{"prompt": "\\ud800", "responses": ["x"]}', "prompt: a lone surrogate"),
    (b'{"prompt": "p", "responses": ["x"], "n": ' + b"9" * 5000 + b"}", "a number of 5000 digits"),
    (b'{"prompt": "p", "responses": ["x"], "deep": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested deeper"),
    (b'{"prompt": "NUL\\u0000\xe5\x9c\xa8\xe8\xbf\x99", "responses": ["x"]}', "prompt: contains a NUL"),
    (b'{"prompt": "p", "responses": ["\\u0000"]}', "responses[0].content: contains a NUL"),
    (b'{"prompt": "p", "responses": ["x"], "category": ["\\u0000"]}', "category[0]: contains a NUL"),
    (b'{"prompt": "p", "responses": ["x"], "n": NaN}', "NaN is not a JSON number"),
    (b'{"prompt": "p", "responses": ["x"], "n": 1e400}', "out of a float's range"),
    (b"[1, 2]", "expected a JSON object"),
    (b'{"prompt": "p"', "invalid JSON"),
]


def hostile_file(path: Path) -> tuple[Path, dict[int, str]]:
    """Good records at odd lines, one bad line between each two; {line: expected reason}."""
    lines, expected = [], {}
    for n, (raw, reason) in enumerate(BAD):
        lines.append(good(n))
        lines.append(raw)
        expected[len(lines)] = reason
    lines.append(good(len(BAD), sys_prompt="你是助手。"))
    lines.append(good(0))  # a duplicate of line 1
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path, expected


def test_every_good_record_is_stored_once_and_every_bad_line_reported(tmp_path: Path, engine: Engine) -> None:
    path, expected = hostile_file(tmp_path / "hostile.jsonl")
    parsed = read_samples(path)
    summary = IngestionService(engine).ingest(parsed.samples, parsed.errors)
    assert (summary.stored, summary.duplicates, summary.rejected) == (len(BAD) + 1, 1, len(BAD))
    assert {e.line: e for e in summary.errors}.keys() == expected.keys()
    for error in summary.errors:
        assert expected[error.line] in f"{error.field}: {error.message}".lstrip(": "), error
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(Prompt)) == len(BAD) + 1
        assert session.scalar(select(func.count()).select_from(Response)) == 2 * (len(BAD) + 1)
        texts = set(session.scalars(select(Prompt.text)))
    assert texts == {f"问题{n}\u2028第二行" for n in range(len(BAD) + 1)}  # U+2028 kept inside the string


def test_cli_reports_each_bad_line_and_exits_1(tmp_path: Path, db_url: str) -> None:
    path, expected = hostile_file(tmp_path / "hostile.jsonl")
    run = subprocess.run(
        [sys.executable, "-m", "cheems_cli", "ingest", str(path), "--db", db_url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 1, run.stderr
    assert f"stored {len(BAD) + 1}  duplicates 1  rejected {len(BAD)}" in run.stdout
    assert "Traceback" not in run.stderr
    for line, reason in expected.items():
        assert any(f"{path}:{line}: " in text and reason in text for text in run.stderr.splitlines()), (line, reason)


def test_cli_unusable_input_exits_2(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'c.db'}"
    cases = {
        "unknown format": ["--format", "csv"],
        "unreachable database": ["--db", "postgresql+psycopg://postgres:pw@127.0.0.1:1/none?connect_timeout=2"],
    }
    data = tmp_path / "ok.jsonl"
    data.write_bytes(good(1) + b"\n")
    for name, args in cases.items():
        run = subprocess.run(
            [sys.executable, "-m", "cheems_cli", "ingest", str(data), "--db", db, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert run.returncode == 2, (name, run.stderr)
        assert run.stderr.startswith("error: ") and len(run.stderr.strip().splitlines()) == 1, (name, run.stderr)
        assert "pw@" not in run.stderr
