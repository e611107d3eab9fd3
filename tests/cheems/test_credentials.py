"""`cheems.credentials`: passwords masked wherever a URL is shown; secrets read from files; private files and folders
(0600, 0700) made so or narrowed."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

import pytest

from cheems.credentials import (
    alphabet_size,
    check_strength,
    estimated_bits,
    hide_password,
    open_private,
    period,
    private_folder,
    read_secret,
)
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


def test_private_files_and_folders_are_made_or_narrowed_to_their_owner(tmp_path: Path) -> None:
    before = os.umask(0o022)  # the usual umask: made readable by all unless said otherwise
    try:
        folder = private_folder(tmp_path / "a" / "logs")
        with open_private(folder / "x.log") as out:
            out.write(b"line\n")
        wide = tmp_path / "wide.log"
        wide.write_text("old\n")
        wide.chmod(0o644)
        with open_private(wide, "a") as out:
            out.write("more\n")
        (tmp_path / "open").mkdir(mode=0o755)
        private_folder(tmp_path / "open")
    finally:
        os.umask(before)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE((tmp_path / "open").stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "x.log").stat().st_mode) == 0o600
    assert stat.S_IMODE(wide.stat().st_mode) == 0o600 and wide.read_text() == "old\nmore\n"
    target = tmp_path / "elsewhere"
    target.write_text("")
    (tmp_path / "link.log").symlink_to(target)  # a link planted where a log goes (a shared /tmp) is not followed
    with pytest.raises(OSError):
        open_private(tmp_path / "link.log")


# token strength: at least 128 bits for a token made elsewhere


def test_generated_tokens_pass() -> None:
    for _ in range(50):
        for token in (
            "chm_" + secrets.token_urlsafe(32),
            secrets.token_urlsafe(32),
            secrets.token_hex(32),  # `openssl rand -hex 32`
            secrets.token_hex(16),  # 128 random bits, the least that passes
        ):
            assert check_strength(token, "--token-file") == token


def test_the_estimate_is_length_times_log2_of_the_classes_used() -> None:
    assert alphabet_size("abc") == 26 and alphabet_size("aB3") == 62 and alphabet_size("a-") == 58
    assert alphabet_size("令牌abc") == 126
    assert estimated_bits("ab" * 40) == pytest.approx(2 * 4.7004397)  # a repeated run counts once
    assert period("abcabcab") == 3 and period("abcd") == 4 and period("") == 0
    assert estimated_bits("") == 0.0


@pytest.mark.parametrize(
    ("token", "problem"),
    [
        ("a" * 16, "fewer than 8 different characters"),  # the token
        ("a" * 200, "fewer than 8 different characters"),  # length alone is not strength
        ("01" * 100, "fewer than 8 different characters"),  # a tiny alphabet
        ("abcdefgh" * 10, "about 38 bits"),  # a run repeated
        ("0123456789abcdef" * 4, "about 83 bits"),  # the look of `openssl rand -hex 32`, not its randomness
        ("abcdefghijklmnopqrst", "about 94 bits"),  # 20 lowercase letters
        ("s3cret-token", "fewer than 8|about"),
        ("20c5fb134040c16e 73b2dabb5e05b736be99656e1d195232", "no spaces"),  # strong, but not one word
        ("20c5fb134040c16e\t73b2dabb5e05b736be99656e1d195232", "no spaces"),
        ("20c5fb134040c16e\x0073b2dabb5e05b736be99656e1d195232", "printable"),
    ],
)
def test_weak_tokens_are_refused_naming_the_option_never_showing_the_token(token: str, problem: str) -> None:
    with pytest.raises(InvalidInput, match=rf"^--token-file: .*({problem})") as refused:
        check_strength(token, "--token-file")
    assert token not in str(refused.value) and "openssl rand -hex 32" in str(refused.value)
    with pytest.raises(InvalidInput, match=r"^the token "):
        check_strength(token)
