"""How hard a token made elsewhere is to guess: at least 128 bits, estimated from its length and its alphabet.

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
import string

from cheems.errors import InvalidInput

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
    """`token` if it carries at least MIN_BITS (estimated) and MIN_DISTINCT different characters; else InvalidInput
    naming `option` when given (the token itself is never in the message)."""
    where = f"{option}: " if option else ""
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
