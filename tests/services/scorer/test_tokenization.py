"""The scorer's pure parts: request validation, limits, length grouping, OpenRLHF query text."""

from __future__ import annotations

from typing import Any

import pytest

from cheems.chat import Truncation, render
from cheems.forward import length_groups
from services.scorer.batching import bucket_length, by_bucket
from services.scorer.errors import InvalidRequest, LimitExceeded
from services.scorer.tokenization import (
    ScoreJob,
    best_index,
    bounded,
    longest_token,
    make_job,
    query_text,
    tokenize_job,
    tokenize_texts,
)
from trainer.tiny import build_tokenizer


def test_make_job_validates_and_keeps_context() -> None:
    job = make_job("你好", ["好", "不好"], "你是助手", [("user", "在吗？"), ("assistant", "在。")])
    [first, _] = job.conversations()
    assert first.messages()[0] == {"role": "system", "content": "你是助手"}
    assert [m["role"] for m in first.messages()] == ["system", "user", "assistant", "user", "assistant"]


@pytest.mark.parametrize(
    ("prompt", "responses", "history", "error", "message"),
    [
        ("", ["好"], [], InvalidRequest, "prompt is empty"),
        ("   ", ["好"], [], InvalidRequest, "prompt is empty"),
        ("你好", [], [], InvalidRequest, "responses is empty"),
        ("你好", ["好"] * 5, [], LimitExceeded, "5 responses exceed the limit of 4"),
        ("你好", ["好"], [("robot", "x")], InvalidRequest, "history[0].role"),
    ],
)
def test_bad_requests(
    prompt: str, responses: list[str], history: list[tuple[str, str]], error: type, message: str
) -> None:
    with pytest.raises(error, match=message.replace("[", r"\[").replace("]", r"\]")):
        make_job(prompt, responses, "", history, max_responses=4)


def test_best_index_is_the_first_maximum() -> None:
    assert best_index([0.1, 0.7, 0.7, -1.0]) == 1


def test_query_text_normalises_pads_and_eos() -> None:
    assert query_text("问答<|im_end|><|endoftext|><|endoftext|>", "<|endoftext|>", "<|im_end|>") == "问答<|im_end|>"
    assert query_text("  问答  ", "<|endoftext|>", "<|im_end|>") == "问答<|im_end|>"


def test_length_groups_are_sorted_bounded_and_complete() -> None:
    lengths = [50, 3, 40, 4, 45, 5, 100]
    groups = length_groups(lengths, max_batch=3, max_tokens=120)
    assert sorted(i for g in groups for i in g) == list(range(7))
    for g in groups:
        assert (len(g) <= 3 and len(g) * max(lengths[i] for i in g) <= 120) or len(g) == 1
    assert groups[0] == [1, 3, 5]  # the three shortest together


def test_buckets() -> None:
    assert [bucket_length(n, 64) for n in (1, 64, 65)] == [64, 64, 128]
    assert by_bucket([10, 70, 64, 130], 64) == {64: [0, 2], 128: [1], 192: [3]}
    assert by_bucket([10, 500, 513]) == {512: [0, 1], 1024: [2]}


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tokenizer()


@pytest.mark.parametrize("truncation", [Truncation.LEFT, Truncation.RIGHT])
@pytest.mark.parametrize("field", ["prompt", "response", "system_prompt", "history"])
def test_clipping_fields_before_the_template_keeps_the_kept_window_exact(
    tokenizer: Any, truncation: Truncation, field: str
) -> None:
    huge = "长城" * 1500 + "好的。" * 900  # 5,700 characters, over the budget of 16 tokens x 128
    parts = {"prompt": "介绍长城。", "response": "长城很长。", "system_prompt": "你是助手。", "history": "你好"}
    parts[field] = huge
    job = ScoreJob(
        parts["prompt"], (parts["response"], "不知道。"), parts["system_prompt"], (("user", parts["history"]),)
    )
    budget = 16 * longest_token(tokenizer)
    assert len(huge) > budget
    whole = [render(tokenizer, c) for c in job.conversations()]
    expected = tokenize_texts(tokenizer, whole, 16, truncation, budget=10**9, field="responses")
    got = tokenize_job(tokenizer, job, 16, truncation, budget)
    assert [e.input_ids for e in got] == [e.input_ids for e in expected]
    assert all(e.truncated for e in got)


def test_an_over_budget_field_is_rejected_before_the_template_under_truncation_error(tokenizer: Any) -> None:
    job = ScoreJob("介绍长城。", ("长" * 5000,))
    with pytest.raises(LimitExceeded, match=r"responses\[0\] is 5000 characters"):
        bounded(job, 16 * longest_token(tokenizer), Truncation.NONE, 16)


class CountingVocabulary:
    """A tokenizer's vocabulary that counts how often it is built."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.built = tokens, 0

    def __len__(self) -> int:
        return len(self.tokens)

    def get_vocab(self) -> dict[str, int]:
        self.built += 1
        return {t: i for i, t in enumerate(self.tokens)}


def test_longest_token_is_built_once_per_tokenizer_and_again_when_it_grows(tokenizer: Any) -> None:
    first, second = CountingVocabulary(["你好", "长城很长"]), CountingVocabulary(["好"])
    assert [longest_token(first) for _ in range(3)] == [4, 4, 4] and first.built == 1
    assert longest_token(second) == 1 and second.built == 1  # a tokenizer of its own, not the first's answer
    first.tokens.append("一个很长的新词")  # a token added: its size changed
    assert longest_token(first) == 7 and first.built == 2
    assert longest_token(tokenizer) == max(len(t) for t in tokenizer.get_vocab())  # the real one
