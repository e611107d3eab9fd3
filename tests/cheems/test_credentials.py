"""`cheems.credentials`: passwords masked wherever a URL is shown; secrets read from files."""

from __future__ import annotations

from pathlib import Path

import pytest

from cheems.credentials import hide_password, read_secret
from cheems.errors import InvalidInput


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg://cheems:s3cr%40t@db:5432/cheems", "postgresql+psycopg://cheems:***@db:5432/cheems"),
        ("postgresql+psycopg://postgres@127.0.0.1:5432/test", "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
        ("postgresql://u@h/d?password=s3cret&sslmode=require", "postgresql://u@h/d?password=***&sslmode=require"),
        ("sqlite:///cheems.db", "sqlite:///cheems.db"),
        ("localhost:9092", "localhost:9092"),
        ("https://user:s3cret@judge.example/v1", "https://user:***@judge.example/v1"),
        ("http://scorer:8000/get_reward?token=s3cret", "http://scorer:8000/get_reward?token=***"),
        ("cannot reach postgresql://a:s3cret@db/x: refused", "cannot reach postgresql://a:***@db/x: refused"),
        ("mysql://a:p@ss:word@[db/x", "mysql://a:***@[db/x"),  # not even SQLAlchemy parses it
    ],
)
def test_hide_password(url: str, shown: str) -> None:
    assert hide_password(url) == shown


def test_read_secret(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("  s3cret\n", encoding="utf-8")
    assert read_secret(tmp_path / "token") == "s3cret"
    for name, text, problem in [("empty", "\n", "is empty"), ("two", "a\nb\n", "more than one line")]:
        (tmp_path / name).write_text(text, encoding="utf-8")
        with pytest.raises(InvalidInput, match=rf"^--token-file: .*{problem}"):
            read_secret(tmp_path / name, "--token-file")
    with pytest.raises(InvalidInput, match=r"^--token-file: cannot read .*absent"):
        read_secret(tmp_path / "absent", "--token-file")
