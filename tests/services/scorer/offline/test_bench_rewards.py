"""`cheems rewards --model-url`: many prompts a ScoreBatch call, several calls in flight, rewards in file order."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from cheems.formats.cheemsbench import BenchItem
from cheems.formats.responses import Response
from services.scorer.client import RewardClient
from services.scorer.offline.bench_rewards import score_items_remote
from services.scorer.runtime import ScorerServer


def item(n: int, responses: int) -> BenchItem:
    texts = [f"回答{n}-{k}" + "好" * k for k in range(responses)]
    return BenchItem(
        f"问题{n}", tuple(Response(f"r{k}", t) for k, t in enumerate(texts)), {f"r{k}": 1 for k in range(responses)},
        ("知识",), {"sys_prompt": "你是助手"} if n % 2 else {},
    )  # fmt: skip


def test_prompts_go_many_a_call_with_calls_in_flight_and_come_back_in_order(
    strict_server: ScorerServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = [item(n, 5 if n % 3 == 0 else 2) for n in range(9)]  # 5 responses: over the scorer's 3, split in two
    url = f"127.0.0.1:{strict_server.grpc_port}"
    calls: list[int] = []
    threads: set[int] = set()
    original = RewardClient.score_batch

    def counted(self: RewardClient, requests: Any, timeout: float | None = None) -> Any:
        calls.append(len(requests))
        threads.add(threading.get_ident())
        return original(self, requests, timeout)

    monkeypatch.setattr(RewardClient, "score_batch", counted)
    got = score_items_remote(items, url, token="s3cret-Q7vK2mN9xR4tW8yB6pL3", max_items=4, in_flight=3)
    assert sum(calls) == 12 and max(calls) == 4 and len(calls) == 3  # 9 prompts as 12 items, 4 a call
    assert len(threads) > 1  # calls from several threads at once
    with RewardClient(url, token="s3cret-Q7vK2mN9xR4tW8yB6pL3") as client:
        for i, values in zip(items, got, strict=True):  # each prompt alone, its responses 3 at most a call
            contents = [r.content for r in i.responses]
            system = str(i.extra.get("sys_prompt", ""))
            alone = [s for k in range(0, len(contents), 3) for s in client.score(i.input, contents[k : k + 3], system)]
            assert values == pytest.approx(alone, abs=1e-5)
