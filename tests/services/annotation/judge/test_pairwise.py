"""AI judging through the real OpenAI-compatible client path, against a local chat-completions server."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from services.annotation.algorithm.resolve import Relation
from services.annotation.judge.pairwise import (
    JudgeConfig,
    JudgeError,
    OpenAICompatibleBackend,
    PairJudgment,
    Verdict,
    bias_stats,
    judge_responses,
    parse_verdict,
)
from services.annotation.judge.prompt import judge_prompt

ANSWERS = re.compile(r"「answerA」: (.*) 「answerB」: (.*) 请确保", re.S)


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("A", Verdict.A),
        (" B\n", Verdict.B),
        ("C", Verdict.TIE),
        ("**A**", Verdict.A),
        ("「conclusion」: B", Verdict.B),
        ("conclusion: A", Verdict.A),
        ("结论：B", Verdict.B),
        ("A和B差不多", None),
        ("", None),
        ("Both are good", None),
    ],
)
def test_parse_verdict(text: str, verdict: Verdict | None) -> None:
    assert parse_verdict(text) == verdict


def test_prompt_carries_query_answers_and_the_category_criterion() -> None:
    prompt = judge_prompt("1+1=?", "2", "3", category="数学")
    assert "「query」: 1+1=?" in prompt and "「answerA」: 2" in prompt and "「answerB」: 3" in prompt
    assert "Criterion: 推理/数学" in prompt and "推理准确性" in prompt and "「reference」" in prompt  # template text
    assert "Criterion: 代码" in judge_prompt("q", "a", "b", category="代码")


class FakeLLM(BaseHTTPRequestHandler):
    """Speaks /v1/chat/completions; prefers the longer answer. `script` can inject failures."""

    script: ClassVar[list[Callable[[str], tuple[int, str]]]] = []
    seen: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).seen.append({"body": body, "auth": self.headers.get("authorization")})
        prompt = body["messages"][0]["content"]
        status, content = (type(self).script.pop(0) if type(self).script else prefer_longer)(prompt)
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


def prefer_longer(prompt: str) -> tuple[int, str]:
    match = ANSWERS.search(prompt)
    assert match, "the judge prompt lost its answers"
    a, b = match.groups()
    return 200, "A" if len(a) > len(b) else "B" if len(b) > len(a) else "C"


@pytest.fixture
def llm() -> Iterator[str]:
    FakeLLM.script, FakeLLM.seen = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeLLM)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


RESPONSES = [("r1", "好"), ("r2", "很好很好"), ("r3", "非常好非常好非常好"), ("r4", "一般般")]


def test_all_pairs_judged_in_random_order_with_key_and_model(llm: str) -> None:
    backend = OpenAICompatibleBackend(llm, model="judge-model", api_key="k-1", backoff=0.01)
    judgments = judge_responses("哪个回答更好？", RESPONSES, backend, JudgeConfig(seed=3))
    assert len(judgments) == 6 and all(j.verdict is not None for j in judgments)
    relations = {j.relation() for j in judgments}
    assert Relation("r3", "r1") in relations and Relation("r2", "r1") in relations
    swapped = [j.first > j.second for j in judgments]  # A/B order is shuffled, not always index order
    assert any(swapped) and not all(swapped)
    assert FakeLLM.seen[0]["body"]["model"] == "judge-model" and FakeLLM.seen[0]["auth"] == "Bearer k-1"
    assert FakeLLM.seen[0]["body"]["temperature"] == 0


def test_unparseable_answers_are_retried_then_recorded_as_errors(llm: str) -> None:
    FakeLLM.script = [lambda p: (200, "我觉得都不错")] * 3
    backend = OpenAICompatibleBackend(llm, model="m", backoff=0.01)
    [judgment] = judge_responses("问题", RESPONSES[:2], backend, JudgeConfig(retries=2, concurrency=1))
    assert judgment.verdict is None and "unparseable" in judgment.error and judgment.relation() is None
    FakeLLM.script = [lambda p: (200, "嗯"), prefer_longer]
    [judgment] = judge_responses("问题", RESPONSES[:2], backend, JudgeConfig(retries=2, concurrency=1))
    assert judgment.verdict is not None


def test_server_errors_are_retried_with_backoff_and_then_reported(llm: str) -> None:
    FakeLLM.script = [lambda p: (503, ""), prefer_longer]
    backend = OpenAICompatibleBackend(llm, model="m", backoff=0.01, max_retries=2)
    [ok] = judge_responses("问题", RESPONSES[:2], backend, JudgeConfig(concurrency=1))
    assert ok.verdict is not None
    FakeLLM.script = [lambda p: (500, "")] * 3
    [failed] = judge_responses("问题", RESPONSES[:2], backend, JudgeConfig(concurrency=1))
    assert failed.verdict is None and "HTTP 500" in failed.error
    FakeLLM.script = [lambda p: (400, "")]
    with pytest.raises(JudgeError, match="HTTP 400"):
        backend.complete("x")


def test_unreachable_endpoint_is_an_error_not_a_preference() -> None:
    backend = OpenAICompatibleBackend("http://127.0.0.1:9/v1", model="m", backoff=0.01, max_retries=1, timeout=2)
    [judgment] = judge_responses("问题", RESPONSES[:2], backend)
    assert judgment.verdict is None and judgment.error


def test_both_orders_keeps_only_consistent_verdicts(llm: str) -> None:
    backend = OpenAICompatibleBackend(llm, model="m", backoff=0.01)
    consistent = judge_responses("问题", RESPONSES, backend, JudgeConfig(both_orders=True))
    assert all(j.verdict is not None for j in consistent) and len(FakeLLM.seen) == 12
    FakeLLM.script = [lambda p: (200, "A"), lambda p: (200, "A")]  # always the first shown: position bias
    [biased] = judge_responses("问题", RESPONSES[:2], backend, JudgeConfig(both_orders=True, concurrency=1))
    assert biased.verdict is None and "inconsistent" in biased.error


def test_bias_statistics() -> None:
    lengths = {"a": 10, "b": 5, "c": 5}
    judgments = [
        PairJudgment("a", "b", Verdict.A),
        PairJudgment("b", "a", Verdict.B),
        PairJudgment("b", "c", Verdict.A),
        PairJudgment("a", "c", Verdict.TIE),
        PairJudgment("c", "a", None, "boom"),
    ]
    stats = bias_stats(judgments, lengths)
    assert (stats.judged, stats.errors, stats.ties) == (5, 1, 1)
    assert stats.position_a == pytest.approx(2 / 3)  # A won 2 of 3 decisive verdicts
    assert stats.longer == 1.0  # both decisive verdicts between unequal lengths chose the longer


def test_local_transformers_judge_runs_and_never_guesses(tmp_path: Path) -> None:
    """A tiny random causal LM answers gibberish: every pair must become an error, never a preference."""
    import torch
    from transformers import Qwen2ForCausalLM

    from services.annotation.judge.pairwise import TransformersBackend
    from trainer.tiny import build_tokenizer, tiny_config

    tokenizer = build_tokenizer()
    config = tiny_config(tokenizer, hidden_size=32, layers=1)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(tmp_path / "lm")
    tokenizer.save_pretrained(tmp_path / "lm")
    backend = TransformersBackend(str(tmp_path / "lm"), max_new_tokens=4)
    answer = backend.complete(judge_prompt("问题", "甲", "乙"))
    assert isinstance(answer, str)
    judgments = judge_responses("问题", RESPONSES[:3], backend, JudgeConfig(retries=0, concurrency=2))
    assert len(judgments) == 3
    for j in judgments:  # a verdict only when the gibberish happened to parse; otherwise a recorded error
        assert (j.verdict is None) == bool(j.error)
        assert j.verdict is not None or "unparseable" in j.error
