"""`run`: requests from N threads, timed: responses/s and p50/p99 request latency."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from scorer.workloads import responses_of


def run(
    call: Callable[..., object],
    requests: Sequence[tuple[Any, ...]],
    concurrency: int,
    count: Callable[[tuple[Any, ...]], int] = responses_of,
    sync: Callable[[], object] = lambda: None,
) -> dict:
    """`call(*request)` for each request from `concurrency` threads: responses/s (`count` says how many a request
    holds), p50 and p99 request latency. `sync` runs before each clock read (a CUDA device's synchronize)."""
    latencies: list[float] = []

    def one(item: tuple[Any, ...]) -> None:
        started = time.perf_counter()
        call(*item)
        sync()
        latencies.append(time.perf_counter() - started)

    sync()
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, requests))
    wall = time.perf_counter() - started
    latencies.sort()
    return {
        "rps": sum(count(item) for item in requests) / wall,
        "seconds": wall,
        "p50": statistics.median(latencies),
        "p99": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
    }
