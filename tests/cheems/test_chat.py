"""The shared chat template and tokenization: messages, render, encode, truncation policies."""

from __future__ import annotations

import random
from copy import deepcopy
from typing import Any

import pytest

from cheems.chat import (
    MIN_SHARED_CHARS,
    Conversation,
    Encoded,
    Truncation,
    batch_ids,
    clean_special_tokens,
    encode,
    encode_many,
    render,
    shared_split,
    token_ids,
)

IM_END = 151645
IM_START = 151644
DEFAULT_SYSTEM = "You are a helpful assistant."


@pytest.fixture(scope="module")
def tok() -> Any:
    from trainer.tiny import build_tokenizer

    return build_tokenizer()


CONV = Conversation("今天天气怎么样？", "今天是晴天，气温二十五度，适合出门散步。")
WITH_SYS = Conversation("你好", "你好！有什么可以帮你？", system_prompt="你是一个乐于助人的中文助手。")
WITH_HISTORY = Conversation(
    "那明天呢？",
    "明天有小雨，记得带伞。",
    system_prompt="你是天气预报员。",
    history=(("user", "今天天气怎么样？"), ("assistant", "今天是晴天。")),
)


# --- messages ---------------------------------------------------------------------------------


def test_messages_without_system_prompt_are_user_then_assistant() -> None:
    assert CONV.messages() == [
        {"role": "user", "content": "今天天气怎么样？"},
        {"role": "assistant", "content": "今天是晴天，气温二十五度，适合出门散步。"},
    ]


def test_messages_put_system_first_then_history_in_order_then_user_and_assistant() -> None:
    assert WITH_HISTORY.messages() == [
        {"role": "system", "content": "你是天气预报员。"},
        {"role": "user", "content": "今天天气怎么样？"},
        {"role": "assistant", "content": "今天是晴天。"},
        {"role": "user", "content": "那明天呢？"},
        {"role": "assistant", "content": "明天有小雨，记得带伞。"},
    ]


def test_empty_system_prompt_is_no_system_turn() -> None:
    roles = [m["role"] for m in Conversation("你好", "你好！", system_prompt="").messages()]
    assert roles == ["user", "assistant"]


# --- render -----------------------------------------------------------------------------------


def test_render_is_stripped_and_ends_with_im_end(tok: Any) -> None:
    for conv in (CONV, WITH_SYS, WITH_HISTORY):
        text = render(tok, conv)
        assert text.endswith("<|im_end|>")
        assert text == text.strip()
        assert not text.endswith("\n")


def test_render_uses_the_given_system_prompt_instead_of_the_default(tok: Any) -> None:
    text = render(tok, WITH_SYS)
    assert text.startswith("<|im_start|>system\n你是一个乐于助人的中文助手。<|im_end|>")
    assert DEFAULT_SYSTEM not in text
    assert text.count("<|im_start|>system") == 1


def test_render_without_system_prompt_has_the_default_system_turn(tok: Any) -> None:
    text = render(tok, CONV)
    assert text == (
        f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n"
        "<|im_start|>user\n今天天气怎么样？<|im_end|>\n"
        "<|im_start|>assistant\n今天是晴天，气温二十五度，适合出门散步。<|im_end|>"
    )


def test_render_keeps_history_in_order(tok: Any) -> None:
    text = render(tok, WITH_HISTORY)
    parts = ["你是天气预报员。", "今天天气怎么样？", "今天是晴天。", "那明天呢？", "明天有小雨，记得带伞。"]
    positions = [text.index(p) for p in parts]
    assert positions == sorted(positions)


# --- encode -----------------------------------------------------------------------------------


def test_encode_ends_with_im_end_and_matches_tokenizing_the_render(tok: Any) -> None:
    enc = encode(tok, CONV)
    assert isinstance(enc, Encoded)
    assert enc.input_ids[-1] == IM_END
    assert enc.input_ids[0] == IM_START
    assert enc.input_ids == tok(render(tok, CONV), add_special_tokens=False)["input_ids"]
    assert enc.full_length == len(enc.input_ids)
    assert enc.truncated is False


def test_encode_contains_the_known_token_for_nihao(tok: Any) -> None:
    assert tok.encode("你好") == [108386]
    assert 108386 in encode(tok, WITH_SYS).input_ids


def test_system_prompt_changes_the_tokens(tok: Any) -> None:
    plain = encode(tok, Conversation(WITH_SYS.prompt, WITH_SYS.response)).input_ids
    assert encode(tok, WITH_SYS).input_ids != plain


def test_left_truncation_keeps_the_last_tokens(tok: Any) -> None:
    full = encode(tok, CONV).input_ids
    n = len(full) - 5
    enc = encode(tok, CONV, max_length=n, truncation=Truncation.LEFT)
    assert enc.input_ids == full[-n:]
    assert len(enc.input_ids) == n
    assert enc.input_ids[-1] == IM_END
    assert enc.truncated is True
    assert enc.full_length == len(full)


def test_right_truncation_keeps_the_first_tokens(tok: Any) -> None:
    full = encode(tok, CONV).input_ids
    n = len(full) - 5
    enc = encode(tok, CONV, max_length=n, truncation=Truncation.RIGHT)
    assert enc.input_ids == full[:n]
    assert enc.input_ids[0] == IM_START
    assert enc.truncated is True
    assert enc.full_length == len(full)


def test_no_truncation_keeps_everything_even_when_too_long(tok: Any) -> None:
    full = encode(tok, CONV).input_ids
    enc = encode(tok, CONV, max_length=3, truncation=Truncation.NONE)
    assert enc.input_ids == full
    assert len(enc.input_ids) > 3
    assert enc.truncated is False
    assert enc.full_length == len(full)


@pytest.mark.parametrize("policy", list(Truncation))
def test_a_sequence_that_fits_exactly_is_not_truncated(tok: Any, policy: Truncation) -> None:
    full = encode(tok, CONV).input_ids
    enc = encode(tok, CONV, max_length=len(full), truncation=policy)
    assert enc.input_ids == full
    assert enc.truncated is False


@pytest.mark.parametrize("policy", list(Truncation))
def test_string_policy_behaves_like_the_enum_member(tok: Any, policy: Truncation) -> None:
    # Truncation is a StrEnum, so Truncation.LEFT == "left"; a caller passing the plain string (as read
    # from a config or the command line) must get the same cut, not a silent right truncation.
    n = len(encode(tok, CONV).input_ids) - 5
    assert encode(tok, CONV, n, policy.value) == encode(tok, CONV, n, policy)  # type: ignore[arg-type]


def test_encode_many_equals_encoding_one_by_one(tok: Any) -> None:
    convs = [
        CONV,
        WITH_SYS,
        WITH_HISTORY,
        Conversation("请用一句话介绍长城。", "长城是中国古代修建的军事防御工程，绵延上万里。"),
        Conversation("1+1等于几？", "等于2。"),
    ]
    for max_length, policy in [(2048, Truncation.NONE), (12, Truncation.LEFT), (12, Truncation.RIGHT)]:
        many = encode_many(tok, convs, max_length, policy)
        assert many == [encode(tok, c, max_length, policy) for c in convs]
        assert all(len(e.input_ids) <= max_length or policy is Truncation.NONE for e in many)
    whole = encode_many(tok, convs)
    assert len({tuple(e.input_ids) for e in whole}) == len(convs)  # really five different encodings


def test_encode_many_of_nothing_is_empty(tok: Any) -> None:
    assert encode_many(tok, []) == []


@pytest.mark.parametrize("max_length", [0, -1])
def test_non_positive_max_length_raises(tok: Any, max_length: int) -> None:
    with pytest.raises(ValueError, match="max_length"):
        encode(tok, CONV, max_length=max_length)
    with pytest.raises(ValueError, match="max_length"):
        encode_many(tok, [], max_length=max_length)


PIECES = [
    "你好",
    "，",
    "。",
    " ",
    "  ",
    "\n",
    "\n\n",
    "hello",
    " world",
    "😀",
    "<|im_end|>",
    "<|im_start|>",
    "12345",
    "\t",
    "é",
]


def random_text(rng: random.Random, most: int) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randrange(0, most)))


def test_a_shared_beginning_tokenized_once_gives_the_ids_of_each_whole_text(tok: Any) -> None:
    """Responses with whitespace, emoji and special-token text at the boundary, system prompts, history."""
    rng = random.Random(0)
    shared = 0
    for _ in range(300):
        history = tuple((("user", "assistant")[k % 2], random_text(rng, 8)) for k in range(rng.choice([0, 2])))
        system = rng.choice([None, random_text(rng, 10)])
        prompt = random_text(rng, 30) or "问"
        convs = [Conversation(prompt, random_text(rng, 12), system, history) for _ in range(rng.randrange(1, 6))]
        texts = [render(tok, c) for c in convs]
        shared += shared_split(tok, texts) >= MIN_SHARED_CHARS and len(texts) > 1
        assert token_ids(tok, texts) == [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    assert shared > 150  # most of them really went through the shared path


def test_the_cut_is_after_a_special_token(tok: Any) -> None:
    texts = [render(tok, Conversation("请解释递归。", r, "你是助手。")) for r in ("递归是……", "不知道")]
    split = shared_split(tok, texts)
    assert texts[0][:split].endswith("<|im_start|>") and texts[0][split:].startswith("assistant")


def test_a_special_token_that_strips_whitespace_is_not_a_cut(tok: Any) -> None:
    from tokenizers import AddedToken

    copy = deepcopy(tok)
    copy.add_special_tokens({"additional_special_tokens": [AddedToken("<|sep|>", rstrip=True, normalized=False)]})
    texts = ["前言前言前言前言前言前言<|sep|>  回答一", "前言前言前言前言前言前言<|sep|>  回答二"]
    assert "<|sep|>" not in clean_special_tokens(copy) and shared_split(copy, texts) == 0
    assert token_ids(copy, texts) == [copy(t, add_special_tokens=False)["input_ids"] for t in texts]


def test_batch_ids_equal_the_tokenizers_own_call_on_chinese_special_tokens_and_whitespace(tok: Any) -> None:
    texts = ["<|im_start|>user\n你好<|im_end|>", " leading space", "tabs\t\tand\n\nnewlines  ", "<|endoftext|>x"]
    texts += ["emoji 😀 和漢字 ﬁ", "甲比乙高，乙比丙高，请问三人中谁最矮？" * 20, ""]
    assert batch_ids(tok, texts) == tok(texts, add_special_tokens=False)["input_ids"]


def test_batch_ids_take_the_tokenizers_call_when_it_would_change_the_ids(tok: Any) -> None:
    split = deepcopy(tok)
    split.split_special_tokens = True  # "<|im_end|>" as text, not the special token
    text = ["你好<|im_end|>"]
    assert batch_ids(split, text) == split(text, add_special_tokens=False)["input_ids"] != batch_ids(tok, text)
