"""Secrets kept out of sight: URLs with their password masked for logs and messages, tokens read from files.

    log.info("store at %s", hide_password(url))   # postgresql+psycopg://user:***@host/db
    token = read_secret("/run/secrets/scorer-token", "--token-file")
    write_secret(Path("out/up/accounts/operator.token"), token)   # 0600, in a 0700 folder, written atomically
    log = open_private(private_folder(Path("out/up/logs")) / "scorer.log")   # logs and stores alike: 0600 in 0700

Every URL that is printed or logged goes through `hide_password` (database URLs, bootstrap and scorer
addresses alike: they may carry `user:password@`). A token on the command line is visible to anyone
who can list processes (`ps`), so every token option can also be read from a file (`read_secret`). What a system
writes that others should not read (token files, the SQLite store, the logs) is its owner's only: files 0600 in
0700 folders, made so when created (never widened by the umask first) and narrowed when found wider.

Token strength: a token made elsewhere must be one word of printable characters (no spaces, as a bearer token
is sent) and hard to guess, at least 128 bits, estimated from its length and its alphabet. `check_strength` is the
one rule: the accounts the store keeps, the command line's --token-file, the scorer's static token.

    check_strength(Path("/secrets/token").read_text().strip(), "--token-file")   # InvalidInput if weak
    estimated_bits("chm_" + secrets.token_urlsafe(32))                            # about 308.1

The estimate is the one a guesser without the generator would use: each character could be any of the classes
the token draws from (lowercase 26, uppercase 26, digits 10, ASCII punctuation 32, anything else 100), so
bits = length * log2(the sum of those classes' sizes). A token that repeats a shorter run ("ab" * 40) counts
only that run, and one of fewer than 8 different characters (a repeated character, "0101...") is refused
whatever its length. Generated tokens (`secrets.token_urlsafe(32)`, `openssl rand -hex 32` or `-base64 32`)
pass; 16 times "a" (75 bits) does not. Messages name the option and never show the token.
"""

from __future__ import annotations

import math
import os
import re
import string
from pathlib import Path
from typing import IO, Any

from cheems.errors import InvalidInput

MASK = "***"
# user:password@ after a scheme; up to the last "@" before the host's "/", as a raw "@" in a password is
# common (masking too much is harmless, too little is not)
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][\w+.-]*://[^\s:/@]*:)[^\s/]+@")
_SECRET_QUERY = re.compile(
    r"(?P<head>[?&](?:password|passwd|pwd|token|access_token|secret|api_key|apikey)=)[^&#\s]+", re.I
)


def hide_password(url: str) -> str:
    """The URL (or any text holding URLs) with each password and secret query value replaced by ***.

    A SQLAlchemy URL prints as `make_url(url).render_as_string(hide_password=True)` does; the same
    is done by pattern to text SQLAlchemy cannot parse (an error message, `http://u:p@host`).
    """
    try:
        from sqlalchemy.engine import make_url  # a third-party import, only when a URL is shown

        parsed = make_url(url)
    except Exception:  # not a SQLAlchemy URL (host:port, free text): the pattern alone
        return _mask(url)
    return _mask(parsed.render_as_string(hide_password=True)) if parsed.password is not None else _mask(url)


def _mask(text: str) -> str:
    text = _USERINFO.sub(lambda m: f"{m['head']}{MASK}@", text)
    return _SECRET_QUERY.sub(lambda m: f"{m['head']}{MASK}", text)


def read_secret(path: str | Path, option: str = "") -> str:
    """The secret in a file (a Kubernetes Secret mounted as a file, say): its text, surrounding whitespace removed.

    InvalidInput (naming `option`, when given) for a file that cannot be read, is empty or holds several
    lines; the secret itself is never in a message.
    """
    where = f"{option}: " if option else ""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInput(f"{where}cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    secret = text.strip()
    if not secret:
        raise InvalidInput(f"{where}{path} is empty")
    if "\n" in secret:
        raise InvalidInput(f"{where}{path} holds more than one line; put the secret alone in it")
    return secret


def private_folder(path: Path) -> Path:
    """`path` as a folder only its owner may enter (0700): made so (with its missing parents), or narrowed."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


def private_file(path: Path) -> Path:
    """`path` as a file only its owner reads (0600): created empty if missing (never a symlink followed), or
    narrowed; its folder is left as it is."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        if os.fstat(descriptor).st_mode & 0o077:
            os.fchmod(descriptor, 0o600)
    finally:
        os.close(descriptor)
    return path


def open_private(path: Path | str, mode: str = "ab") -> IO[Any]:
    """`open(path, mode)` ("ab", "wb", "a", "w") of a file only its owner reads (0600, made or narrowed first)."""
    return open(private_file(Path(path)), mode)


def write_secret(path: Path, secret: str) -> Path:
    """Write `secret` (one line) to `path`, readable by its owner only (0600; the folder made 0700 if new), replacing
    the file at once (a reader never sees half a secret)."""
    return write_private(path, secret + "\n")


def write_private(path: Path, text: str) -> Path:
    """Write `text` to `path` as write_secret does: 0600 (the folder made 0700 if new), replacing it at once."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)  # a left-over one may have other permissions
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(partial, path)
    return path


MIN_BITS = 128
MIN_DISTINCT = 8  # different characters: below, an alphabet too small to be random
_CLASSES = (
    (set(string.ascii_lowercase), 26),
    (set(string.ascii_uppercase), 26),
    (set(string.digits), 10),
    (set(string.punctuation), 32),
)
_OTHER = 100  # any other character (non-ASCII): one generous class
HOW = "make one with `openssl rand -hex 32`"


def alphabet_size(token: str) -> int:
    """The sum of the sizes of the character classes `token` draws from."""
    chars = set(token)
    size = sum(n for members, n in _CLASSES if chars & members)
    return size + (_OTHER if any(not c.isascii() for c in chars) else 0)


def period(token: str) -> int:
    """The length of the shortest run whose repetition spells `token` ("abab" -> 2, "abc" -> 3)."""
    n = len(token)
    return next((p for p in range(1, n // 2 + 1) if all(token[i] == token[i - p] for i in range(p, n))), n)


def estimated_bits(token: str) -> float:
    """The token's strength in bits: its non-repeating length times log2 of its alphabet's size (0 when empty)."""
    size = alphabet_size(token)
    return period(token) * math.log2(size) if token and size > 1 else 0.0


def check_strength(token: str, option: str = "") -> str:
    """`token` if it is printable with no whitespace and carries at least MIN_BITS (estimated) and MIN_DISTINCT
    different characters; else InvalidInput naming `option` when given (the token itself is never in the message)."""
    where = f"{option}: " if option else ""
    if any(c.isspace() for c in token) or not token.isprintable():
        raise InvalidInput(f"{where}the token needs printable characters and no spaces; {HOW}")
    if len(set(token)) < MIN_DISTINCT:
        raise InvalidInput(
            f"{where}the token has fewer than {MIN_DISTINCT} different characters, too easy to guess; {HOW}"
        )
    bits = estimated_bits(token)
    if bits < MIN_BITS:
        raise InvalidInput(
            f"{where}the token carries about {bits:.0f} bits, at least {MIN_BITS} are needed "
            f"(longer, or from more kinds of characters); {HOW}"
        )
    return token
