"""Score every response of bench files (CheemsBench or RewardBench) with an RM: the rewards file `cheems eval` reads.

    cheems rewards data/sample/open.jsonl data/sample/human.jsonl --model out/train-tiny/model --out r.jsonl
    cheems rewards ... --model out/train-tiny/model --device cuda --dtype bfloat16   # on a GPU
    cheems rewards ... --model-url localhost:50051        # through a running scorer

In-process scoring is `offline.score_jobs`: the scorer's own tokenization (left truncation at max_length), many
prompts a forward, on the device and in the dtype asked. Through a scorer, prompts go many to a ScoreBatch call
(`max_items`), several calls in flight (`in_flight`); the rewards come back in the file's order either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tqdm import tqdm

from cheems.formats.benchfile import read_bench_file
from cheems.formats.cheemsbench import BenchItem
from cheems.formats.rewards_file import write_rewards
from services.scorer.offline.jobs import OfflineScoring, score_jobs
from services.scorer.tokenization import ScoreJob, make_job

MAX_ITEMS = 64  # prompts per ScoreBatch call (the scorer takes up to its --max-batch-items, 128 by default)
IN_FLIGHT = 4  # ScoreBatch calls at once


def _system(item: BenchItem) -> str:
    value = item.extra.get("sys_prompt")
    return value if isinstance(value, str) else ""


def job_of(item: BenchItem) -> ScoreJob:
    return make_job(item.input, [r.content for r in item.responses], _system(item), max_responses=10**6)


def score_items_in_process(
    items: Sequence[BenchItem], model_dir: str, scoring: OfflineScoring | None = None
) -> list[list[float]]:
    """Rewards per item, scored in this process (`offline.score_jobs`; default: the device and dtype `auto`)."""
    return score_jobs([job_of(i) for i in items], model_dir, scoring or OfflineScoring())


def score_items_remote(
    items: Sequence[BenchItem],
    url: str,
    token: str = "",
    model: str = "",
    max_items: int = MAX_ITEMS,
    in_flight: int = IN_FLIGHT,
) -> list[list[float]]:
    """Scores through a running scorer; `model`: the model id (or alias) every call names ("" = its default).

    An item with more responses than the scorer takes in one (its GetModelInfo's max_responses) goes as several
    ScoreBatch items; `max_items` of them a call, `in_flight` calls at once, the replies put back in order."""
    from services.scorer.client import RewardClient, chunks, score_request

    with RewardClient(url, token=token, timeout=300, model=model) as client:
        limit = client.model_info().max_responses or 64
        parts = [
            (index, score_request(item.input, part, _system(item), (), model))
            for index, item in enumerate(items)
            for part in chunks([r.content for r in item.responses], limit)
        ]
        calls = chunks(parts, max_items)
        out: list[list[float]] = [[] for _ in items]
        with (
            ThreadPoolExecutor(in_flight, thread_name_prefix="score-batch") as pool,
            tqdm(total=sum(len(i.responses) for i in items), desc="score", unit="response") as bar,
        ):
            replies = pool.map(lambda call: client.score_batch([request for _, request in call]), calls)
            for call, results in zip(calls, replies, strict=True):  # in order: each item's parts in turn
                for (index, _), result in zip(call, results, strict=True):
                    out[index] += result.scores
                bar.update(sum(len(request.responses) for _, request in call))
        return out


def write_bench_rewards(
    bench: Sequence[str | Path],
    out: str | Path,
    model_dir: str = "",
    url: str = "",
    token: str = "",
    scoring: OfflineScoring | None = None,
    in_flight: int = IN_FLIGHT,
) -> int:
    """Write the rewards file of `bench`'s responses, scored by `model_dir` in this process (as `scoring` says)
    or through the scorer at `url`; the number of rewards written."""
    items = [item for path in bench for item in read_bench_file(path)]  # CheemsBench or RewardBench, detected
    if url:
        scores = score_items_remote(items, url, token, in_flight=in_flight)
    else:
        scores = score_items_in_process(items, model_dir, scoring)
    rows = [
        (i.input, r.id, s)
        for i, values in zip(items, scores, strict=True)
        for r, s in zip(i.responses, values, strict=True)
    ]
    return write_rewards(out, rows)
