"""A token made elsewhere carries at least 128 bits, estimated from its length and alphabet; generated ones pass,
weak ones are refused with a message that names the option and never shows the token."""

from __future__ import annotations

import secrets

import pytest

from cheems.errors import InvalidInput
from cheems.token_strength import alphabet_size, check_strength, estimated_bits, period


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
    ],
)
def test_weak_tokens_are_refused_naming_the_option_never_showing_the_token(token: str, problem: str) -> None:
    with pytest.raises(InvalidInput, match=rf"^--token-file: .*({problem})") as refused:
        check_strength(token, "--token-file")
    assert token not in str(refused.value) and "openssl rand -hex 32" in str(refused.value)
    with pytest.raises(InvalidInput, match=r"^the token "):
        check_strength(token)
