"""The scorer's pure parts: request validation, limits, length grouping, OpenRLHF query text."""

from __future__ import annotations

import pytest

from services.scorer.batching import bucket_length, by_bucket, length_groups
from services.scorer.config import ScorerConfig
from services.scorer.errors import InvalidRequest, LimitExceeded
from services.scorer.scoring import best_index, make_job, query_text


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


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"backend": "onnx"}, "backend"),
        ({"truncation": "middle"}, "truncation"),
        ({"max_responses": 0}, "max_responses"),
        ({"tls_cert": "a.pem"}, "tls_cert"),
    ],
)
def test_config_errors_name_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ScorerConfig(model="m", **changes)  # type: ignore[arg-type]
