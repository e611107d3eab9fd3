"""A generative judge evaluated through the real OpenAI-compatible client against local chat-completions servers."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from cheems.formats.cheemsbench import BenchItem, read_bench, write_bench
from cheems.formats.responses import Response
from evaluator.errors import EvaluationError
from evaluator.evaluate import load_subsets
from evaluator.judging.run import JudgeEvalConfig, judge_bench, plan_calls
from evaluator.metrics import Semantics
from services.annotation.judge.pairwise import JudgeError, OpenAICompatibleBackend
from services.annotation.simulation.judge import JudgeServer, SimulatedJudge, SimulatedJudgeConfig
from tests.evaluator.judging.chat_server import ChatServer, answers, prefer_longer

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample"
README = SAMPLE.parents[1] / "docs" / "evaluating.md"  # the manual's page (README.md links to it)


def item(prompt: str, category: str, contents: list[str], ranks: list[int]) -> BenchItem:
    responses = tuple(Response(f"r{i}", c) for i, c in enumerate(contents, start=1))
    return BenchItem(prompt, responses, {r.id: k for r, k in zip(responses, ranks, strict=True)}, (category,))


@pytest.fixture
def small_bench(tmp_path: Path) -> Path:
    """Answers a longer-preferring judge gets right, wrong and tied, with hand-computed metrics."""
    path = tmp_path / "small.jsonl"
    write_bench(
        path,
        [
            item("天空是什么颜色？", "知识", ["天空通常是蓝色", "蓝", "蓝色的"], [1, 2, 3]),  # right, right, wrong
            item("水的化学式？", "知识", ["H2O，两个氢一个氧", "H2O"], [1, 2]),  # right
            item("一加一等于几？", "数学", ["二", "三"], [1, 2]),  # same length: C, C -> tie
            item("谁更好？", "数学", ["好", "好"], [1, 1]),  # a human tie: not asked
        ],
    )
    return path


def backend(url: str, **kwargs: object) -> OpenAICompatibleBackend:
    return OpenAICompatibleBackend(url, "judge-model", backoff=0.01, **kwargs)  # type: ignore[arg-type]


def test_known_answers_give_hand_computed_metrics(small_bench: Path) -> None:
    subsets = load_subsets([small_bench])
    with ChatServer(prefer_longer) as server:
        evaluation = judge_bench(subsets, backend(server.base_url), JudgeEvalConfig(concurrency=3))
        official = judge_bench(subsets, backend(server.base_url), JudgeEvalConfig(semantics=Semantics.OFFICIAL))
    assert len(server.prompts) == 2 * 2 * 5  # five human-ordered pairs, both orders, two evaluations
    small = evaluation.result.subsets["small"]
    assert small.per_category["知识"].accuracy == 0.75 and small.per_category["知识"].exact_match == 0.5
    assert small.per_category["数学"].accuracy == 0.0 and small.per_category["数学"].exact_match == 0.5
    assert (small.accuracy, small.exact_match, small.pairs, small.prompts) == (0.375, 0.5, 5, 4)
    assert evaluation.result.overall == pytest.approx(0.4375)
    assert evaluation.outcomes == {"small": {"right": 3, "wrong": 1, "tie": 1, "inconsistent": 0, "unparseable": 0}}
    assert official.result.subsets["small"].per_category["数学"].exact_match == 1.0  # the tie keeps exact match


def test_each_pair_is_shown_in_both_orders_with_the_category_criterion(small_bench: Path) -> None:
    calls = plan_calls(load_subsets([small_bench]))
    shown = {answers(c.prompt) for c in calls}
    assert ("二", "三") in shown and ("三", "二") in shown and len(shown) == len(calls) == 10
    assert all("Criterion: 推理/数学" in c.prompt for c in calls if "一加一" in c.prompt)


def test_a_judge_following_position_is_inconsistent_and_scores_nothing(small_bench: Path) -> None:
    with ChatServer(lambda prompt: "B") as server:
        evaluation = judge_bench(load_subsets([small_bench]), backend(server.base_url))
    assert evaluation.outcomes["small"]["inconsistent"] == 5
    assert evaluation.result.subsets["small"].accuracy == 0.0 and evaluation.result.subsets["small"].exact_match == 0.25


def test_the_simulated_judge_without_noise_is_always_right() -> None:
    subsets = load_subsets([SAMPLE / "open.jsonl"])
    judge = SimulatedJudge(read_bench(SAMPLE / "open.jsonl"), SimulatedJudgeConfig(noise=0.0))
    with JudgeServer(judge) as server:
        evaluation = judge_bench(subsets, backend(server.base_url), JudgeEvalConfig(concurrency=4))
    assert evaluation.result.overall == 1.0
    assert evaluation.outcomes["open"]["right"] == evaluation.pairs == evaluation.result.subsets["open"].pairs


def test_the_readme_example_is_what_the_simulated_judge_scores() -> None:
    """docs/evaluating.md's `cheems eval ... --judge-url` output: the simulated judge at noise 0.2 on the sample."""
    bench = [SAMPLE / "open.jsonl", SAMPLE / "human.jsonl"]
    judge = SimulatedJudge([i for path in bench for i in read_bench(path)], SimulatedJudgeConfig(noise=0.2))
    with JudgeServer(judge) as server:
        evaluation = judge_bench(load_subsets(bench), backend(server.base_url), JudgeEvalConfig(concurrency=4))
    shown = re.findall(r"^Overall\s+(\d\.\d{4})$", README.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert f"{evaluation.result.overall:.4f}" == shown[1] == "0.3203"
    assert dict(evaluation.outcomes["open"]) == {
        "right": 93,
        "wrong": 0,
        "tie": 1,
        "inconsistent": 58,
        "unparseable": 0,
    }


def test_garbage_answers_are_retried_then_counted_unparseable_and_wrong(small_bench: Path) -> None:
    with ChatServer(lambda prompt: "两个回答都不错，难以取舍。") as server:
        evaluation = judge_bench(load_subsets([small_bench]), backend(server.base_url), JudgeEvalConfig(retries=1))
    assert len(server.prompts) == 10 * 2  # each call asked once more
    assert evaluation.outcomes["small"]["unparseable"] == 5
    assert evaluation.result.overall == 0.125  # exact match only from the human-tied prompt
    assert evaluation.result.subsets["small"].accuracy == 0.0


def test_an_unreachable_judge_is_a_judge_error_naming_the_url(small_bench: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(JudgeError, match=f"127.0.0.1:{port}/v1/chat/completions"):
        judge_bench(load_subsets([small_bench]), backend(f"http://127.0.0.1:{port}/v1", max_retries=1))


def test_the_api_key_is_sent(small_bench: Path) -> None:
    with ChatServer(prefer_longer) as server:
        judge_bench(load_subsets([small_bench]), backend(server.base_url, api_key="k-7"))
    assert set(server.auth) == {"Bearer k-7"}


@pytest.mark.parametrize(("field", "value"), [("concurrency", 0), ("retries", -1), ("concurrency", True)])
def test_config_errors_name_the_field(field: str, value: object) -> None:
    with pytest.raises(EvaluationError, match=field):
        JudgeEvalConfig(**{field: value})  # type: ignore[arg-type]
