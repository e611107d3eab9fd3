"""Python client of the reward scorer: sync and asyncio, retries with backoff, deadlines, one channel.

from services.scorer.client import RewardClient
with RewardClient("localhost:50051") as rm:
    scores = rm.score("你好", ["你好！", "有什么可以帮你？"])
    best = rm.best_of_n("写一句诗", candidates)
    reward_fn = rm.reward_function()      # TRL-style: (prompts, completions, **kw) -> list[float]
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from cheems.v1 import common_pb2, reward_pb2, reward_pb2_grpc

RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED}


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    initial_backoff: float = 0.1  # seconds; doubles each retry, with jitter
    max_backoff: float = 2.0

    def delay(self, attempt: int) -> float:
        return min(self.max_backoff, self.initial_backoff * 2**attempt) * (0.5 + random.random() / 2)


def _request(prompt: str, responses: Sequence[str], system_prompt: str, history: Sequence[tuple[str, str]]) -> Any:
    turns = [common_pb2.Message(role=r, content=c) for r, c in history]
    return reward_pb2.ScoreRequest(prompt=prompt, responses=list(responses), system_prompt=system_prompt, history=turns)


def _retryable(error: grpc.RpcError) -> bool:
    # RESOURCE_EXHAUSTED from our limits will fail again; only retry it when it is not about the request
    code = error.code()
    return code is grpc.StatusCode.UNAVAILABLE or (code in RETRYABLE and "exceed" not in (error.details() or ""))


class RewardClient:
    """Blocking client; one channel reused for every call. Thread-safe."""

    def __init__(
        self,
        target: str,
        token: str = "",
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.timeout, self.retry = timeout, retry or RetryPolicy()
        self.metadata = [("authorization", f"Bearer {token}")] if token else []
        self.channel = grpc.secure_channel(target, credentials) if credentials else grpc.insecure_channel(target)
        self.stub = reward_pb2_grpc.RewardServiceStub(self.channel)

    def score_full(
        self,
        prompt: str,
        responses: Sequence[str],
        system_prompt: str = "",
        history: Sequence[tuple[str, str]] = (),
        timeout: float | None = None,
    ) -> reward_pb2.ScoreResponse:
        request = _request(prompt, responses, system_prompt, history)
        deadline = time.monotonic() + (timeout or self.timeout)
        for attempt in range(self.retry.attempts):
            try:
                return self.stub.Score(request, timeout=max(0.001, deadline - time.monotonic()), metadata=self.metadata)
            except grpc.RpcError as e:
                pause = self.retry.delay(attempt)
                if not _retryable(e) or attempt + 1 == self.retry.attempts or time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
        raise AssertionError("unreachable")

    def score(
        self,
        prompt: str,
        responses: Sequence[str],
        system_prompt: str = "",
        history: Sequence[tuple[str, str]] = (),
        timeout: float | None = None,
    ) -> list[float]:
        return list(self.score_full(prompt, responses, system_prompt, history, timeout).scores)

    def best_of_n(self, prompt: str, candidates: Sequence[str], system_prompt: str = "") -> tuple[int, str, float]:
        """(index, text, score) of the highest-scoring candidate."""
        reply = self.score_full(prompt, candidates, system_prompt)
        return reply.best_index, candidates[reply.best_index], reply.scores[reply.best_index]

    def reward_function(self) -> Any:
        """A TRL-style reward function: `(prompts, completions, **kwargs) -> list[float]`, one score each."""

        def reward(prompts: Sequence[str], completions: Sequence[str], **kwargs: Any) -> list[float]:
            return [self.score(p, [c])[0] for p, c in zip(prompts, completions, strict=True)]

        reward.__name__ = "cheems_reward"
        return reward

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> RewardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRewardClient:
    """asyncio client with the same retries and deadlines; use inside a running event loop."""

    def __init__(self, target: str, token: str = "", timeout: float = 30.0, retry: RetryPolicy | None = None) -> None:
        self.timeout, self.retry = timeout, retry or RetryPolicy()
        self.metadata = [("authorization", f"Bearer {token}")] if token else []
        self.channel = grpc.aio.insecure_channel(target)
        self.stub = reward_pb2_grpc.RewardServiceStub(self.channel)

    async def score(
        self,
        prompt: str,
        responses: Sequence[str],
        system_prompt: str = "",
        history: Sequence[tuple[str, str]] = (),
        timeout: float | None = None,
    ) -> list[float]:
        request = _request(prompt, responses, system_prompt, history)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout or self.timeout)
        for attempt in range(self.retry.attempts):
            try:
                reply = await self.stub.Score(
                    request, timeout=max(0.001, deadline - loop.time()), metadata=self.metadata
                )
                return list(reply.scores)
            except grpc.aio.AioRpcError as e:
                pause = self.retry.delay(attempt)
                if not _retryable(e) or attempt + 1 == self.retry.attempts or loop.time() + pause > deadline:
                    raise
                await asyncio.sleep(pause)
        raise AssertionError("unreachable")

    async def close(self) -> None:
        await self.channel.close()
