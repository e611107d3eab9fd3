"""The stand-in LLM judge: gold answers, seeded noise, and the OpenAI chat-completions protocol our client speaks."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from itertools import permutations

import pytest

from cheems.formats.cheemsbench import BenchItem
from cheems.formats.responses import Response
from services.annotation.judge.pairwise import JudgeError, OpenAICompatibleBackend, Verdict, parse_verdict
from services.annotation.judge.prompt import judge_prompt
from services.annotation.simulation.judge import JudgeServer, SimulatedJudge, SimulatedJudgeConfig, UnknownQuestion

POLITE = [("r1", "您好，请问有什么可以帮您？"), ("r2", "你好呀！"), ("r3", "您好！"), ("r4", "滚。")]
ITEM = BenchItem(
    "哪个回答更礼貌？",
    tuple(Response(k, c) for k, c in POLITE),
    {"r1": 1, "r2": 2, "r3": 2, "r4": 3},
    ("语言",),
)
CONTENT = {r.id: r.content for r in ITEM.responses}


def truth(a: str, b: str) -> str:
    return "A" if ITEM.rank[a] < ITEM.rank[b] else "B" if ITEM.rank[b] < ITEM.rank[a] else "C"


def test_without_noise_it_answers_the_gold_order_in_either_position() -> None:
    judge = SimulatedJudge([ITEM], SimulatedJudgeConfig(noise=0.0))
    for a, b in permutations(CONTENT, 2):
        assert judge.answer(judge_prompt(ITEM.input, CONTENT[a], CONTENT[b], "语言")) == truth(a, b)


def test_noise_is_seeded_and_at_the_rate_asked() -> None:
    items = [
        BenchItem(f"第{n}题：哪个好？", (Response("a", f"好{n}"), Response("b", f"差{n}")), {"a": 1, "b": 2}, ("知识",))
        for n in range(400)
    ]
    prompts = [judge_prompt(i.input, f"好{n}", f"差{n}") for n, i in enumerate(items)]
    noisy = SimulatedJudge(items, SimulatedJudgeConfig(noise=0.3, seed=7))
    answers = [noisy.answer(p) for p in prompts]
    assert 0.22 < sum(a != "A" for a in answers) / len(answers) < 0.38
    assert answers == [SimulatedJudge(items, SimulatedJudgeConfig(noise=0.3, seed=7)).answer(p) for p in prompts]
    assert answers != [SimulatedJudge(items, SimulatedJudgeConfig(noise=0.3, seed=8)).answer(p) for p in prompts]
    assert all(SimulatedJudge(items, SimulatedJudgeConfig(noise=1.0)).answer(p) != "A" for p in prompts[:50])
    with pytest.raises(ValueError, match="noise"):
        SimulatedJudgeConfig(noise=1.5)


@pytest.fixture
def server() -> Iterator[JudgeServer]:
    with JudgeServer(SimulatedJudge([ITEM], SimulatedJudgeConfig(noise=0.0))) as running:
        yield running


def test_our_client_gets_verdicts_over_http(server: JudgeServer) -> None:
    backend = OpenAICompatibleBackend(server.base_url, "simulated-judge", api_key="k-1", backoff=0.01)
    answer = backend.complete(judge_prompt(ITEM.input, CONTENT["r4"], CONTENT["r1"], "语言"))
    assert parse_verdict(answer) is Verdict.B
    with pytest.raises(JudgeError, match="HTTP 400"):  # a question the bench cannot answer: not retried
        backend.complete(judge_prompt("别的问题", "甲", "乙"))
    with pytest.raises(UnknownQuestion):
        server.judge.answer(judge_prompt(ITEM.input, CONTENT["r1"], "不在题库里的回答"))
    with urllib.request.urlopen(server.base_url + "/models", timeout=10) as reply:
        assert json.loads(reply.read())["data"][0]["id"] == "simulated-judge"
