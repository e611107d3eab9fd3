"""Ask a generative judge about every human-ordered pair of bench items, in both orders; metrics from its verdicts.

    backend = OpenAICompatibleBackend("http://127.0.0.1:8000/v1", "qwen2.5-72b-instruct", max_retries=3)
    evaluation = judge_bench(load_subsets(["open.jsonl", "human.jsonl"]), backend, JudgeEvalConfig(concurrency=8))
    evaluation.result.overall, evaluation.outcomes["open"]["inconsistent"]

Each call sends the paper's judge prompt (`services.annotation.judge.prompt`, the item's first-level
category picking the criterion) and parses A, B or C (`services.annotation.judge.pairwise.ask`,
which asks again `retries` times when the answer has none). The calls run `concurrency` at a time.
A judge that cannot be reached, or refuses a request, stops the evaluation with `JudgeError`
(Unavailable) naming the endpoint: no metrics from a partial run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from cheems.formats.cheemsbench import BenchItem, ranked_pairs
from evaluator.errors import EvaluationError
from evaluator.judging.outcomes import JudgedPrompt, combine, judged_result, tally
from evaluator.metrics import EvalResult, Semantics
from services.annotation.judge.pairwise import ChatBackend, Verdict, ask
from services.annotation.judge.prompt import judge_prompt

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JudgeEvalConfig:
    """How a generative judge is evaluated.

    concurrency: judge calls in flight at once (>= 1).
    retries: extra asks when an answer holds no A, B or C (>= 0); after them that order is unparseable.
    semantics: "paper" (an inconsistent verdict or a tie is wrong in both metrics) or "official"
        (it does not break exact match); see `evaluator.judging.outcomes`.
    """

    concurrency: int = 8
    retries: int = 2
    semantics: Semantics = Semantics.PAPER

    def __post_init__(self) -> None:
        for name, least in (("concurrency", 1), ("retries", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise EvaluationError(f"{name}: expected an integer >= {least}, got {value!r}")
        object.__setattr__(self, "semantics", Semantics(self.semantics))


@dataclass(frozen=True)
class JudgeEvaluation:
    """The metrics, and per subset how many pairs had each outcome (`Outcome` values)."""

    result: EvalResult
    outcomes: Mapping[str, Mapping[str, int]]

    @property
    def pairs(self) -> int:
        return sum(sum(counts.values()) for counts in self.outcomes.values())


@dataclass(frozen=True)
class Call:
    """One judge call: pair `pair` of item `item` of subset `subset`, the better response shown first or not."""

    subset: str
    item: int
    pair: int
    better_first: bool
    prompt: str


def plan_calls(subsets: Mapping[str, tuple[str, Sequence[BenchItem]]]) -> list[Call]:
    """Two calls per human-ordered pair of every item (pure)."""
    calls = []
    for name, (_, items) in subsets.items():
        for i, item in enumerate(items):
            for p, (better, worse) in enumerate(ranked_pairs(item.ranks())):
                good, bad = item.responses[better].content, item.responses[worse].content
                for better_first, (a, b) in ((True, (good, bad)), (False, (bad, good))):
                    prompt = judge_prompt(item.input, a, b, item.primary_category)
                    calls.append(Call(name, i, p, better_first, prompt))
    return calls


def gather(
    subsets: Mapping[str, tuple[str, Sequence[BenchItem]]],
    verdicts: Mapping[tuple[str, int, int, bool], Verdict | None],
) -> dict[str, list[JudgedPrompt]]:
    """Each item's outcomes from the verdicts keyed (subset, item, pair, better_first) (pure)."""
    judged: dict[str, list[JudgedPrompt]] = {}
    for name, (_, items) in subsets.items():
        judged[name] = [
            JudgedPrompt(
                item.primary_category,
                tuple(
                    combine(verdicts[(name, i, p, True)], verdicts[(name, i, p, False)])
                    for p in range(len(ranked_pairs(item.ranks())))
                ),
            )
            for i, item in enumerate(items)
        ]
    return judged


def judge_bench(
    subsets: Mapping[str, tuple[str, Sequence[BenchItem]]],
    backend: ChatBackend,
    config: JudgeEvalConfig = JudgeEvalConfig(),
    progress: bool = False,
) -> JudgeEvaluation:
    """Ask `backend` every call of `plan_calls`, then compute the metrics; JudgeError if the judge fails."""
    calls = plan_calls(subsets)
    verdicts = ask_all(calls, backend, config, progress)
    judged = gather(subsets, verdicts)
    return JudgeEvaluation(judged_result(judged, config.semantics), {name: tally(p) for name, p in judged.items()})


def ask_all(
    calls: Sequence[Call], backend: ChatBackend, config: JudgeEvalConfig, progress: bool = False
) -> dict[tuple[str, int, int, bool], Verdict | None]:
    """Every call's verdict (None: unparseable), `config.concurrency` at a time; the first JudgeError
    cancels the calls not yet started and is raised."""
    from tqdm import tqdm

    verdicts: dict[tuple[str, int, int, bool], Verdict | None] = {}
    pool = ThreadPoolExecutor(config.concurrency, thread_name_prefix="judge")
    try:
        futures: dict[Future[tuple[Verdict | None, str]], Call] = {
            pool.submit(ask, backend, call.prompt, config.retries): call for call in calls
        }
        for future in tqdm(as_completed(futures), total=len(futures), desc="judge", unit="call", disable=not progress):
            call = futures[future]
            verdict, error = future.result()  # a JudgeError ends the evaluation here
            if error:
                log.info("%s item %d pair %d: %s", call.subset, call.item, call.pair, error)
            verdicts[(call.subset, call.item, call.pair, call.better_first)] = verdict
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return verdicts
