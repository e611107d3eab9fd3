"""Python client of the reward scorer: sync and asyncio, retries with backoff, deadlines, one channel.

from services.scorer.client import RewardClient
with RewardClient("localhost:50051") as rm:
    scores = rm.score("你好", ["你好！", "有什么可以帮你？"])
    best = rm.best_of_n("写一句诗", candidates)
    reward_fn = rm.reward_function()      # TRL's GRPOTrainer(reward_funcs=reward_fn): plain or conversational

Retries follow the server's contract, never message text: UNAVAILABLE is retried, RESOURCE_EXHAUSTED
only when the trailing metadata `cheems-error-reason` says `overloaded`, anything else is raised at once.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from cheems.v1 import common_pb2, reward_pb2, reward_pb2_grpc
from services.channels import open_aio_channel, open_channel
from services.grpc_errors import error_reason

DEFAULT_MAX_RESPONSES = 64  # per ScoreBatch item, when the server does not say
MAX_ITEMS = 64  # items per ScoreBatch call sent by the reward function
Reply = TypeVar("Reply")
T = TypeVar("T")
History = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    initial_backoff: float = 0.1  # seconds; doubles each retry, with jitter
    max_backoff: float = 2.0

    def delay(self, attempt: int) -> float:
        return min(self.max_backoff, self.initial_backoff * 2**attempt) * (0.5 + random.random() / 2)


def score_request(
    prompt: str, responses: Sequence[str], system_prompt: str, history: Sequence[tuple[str, str]], model: str = ""
) -> Any:
    """A ScoreRequest: the message of Score, and an item of ScoreBatch."""
    turns = [common_pb2.Message(role=r, content=c) for r, c in history]
    return reward_pb2.ScoreRequest(
        prompt=prompt, responses=list(responses), system_prompt=system_prompt, history=turns, model=model
    )


def _retryable(error: grpc.RpcError) -> bool:
    # a limit (or gRPC's own size check) fails the same way again; only an overloaded server may recover
    code = error.code()
    if code is grpc.StatusCode.UNAVAILABLE:
        return True
    return code is grpc.StatusCode.RESOURCE_EXHAUSTED and error_reason(error) == "overloaded"


@dataclass(frozen=True)
class Sample:
    """One (prompt, completion) pair of a TRL batch, reduced to what a Score request holds."""

    prompt: str
    completion: str
    system_prompt: str = ""
    history: History = ()

    @property
    def key(self) -> tuple[str, str, History]:
        return self.prompt, self.system_prompt, self.history


@dataclass(frozen=True)
class Group:
    """Samples sharing one prompt (with its system prompt and history): one ScoreBatch item."""

    key: tuple[str, str, History]
    indices: tuple[int, ...]  # positions in the reward function's input


def _text(content: Any) -> str:
    """A message's content: a string, or multimodal parts whose text parts are kept."""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or () if isinstance(p, dict) and p.get("type") == "text")


def to_sample(prompt: str | Sequence[dict[str, Any]], completion: str | Sequence[dict[str, Any]]) -> Sample:
    """TRL's plain (strings) or conversational (lists of {"role", "content"}) format as a Sample.

    A conversational prompt gives its system turns as system prompt, its last user turn as the prompt
    and the turns before that as history; a prompt without a user turn gets an empty prompt.
    """
    text = completion if isinstance(completion, str) else _completion_text(completion)
    if isinstance(prompt, str):
        return Sample(prompt, text)
    system = "\n".join(_text(m.get("content")) for m in prompt if m.get("role") == "system")
    turns = [(str(m.get("role")), _text(m.get("content"))) for m in prompt if m.get("role") != "system"]
    last = max((i for i, (role, _) in enumerate(turns) if role == "user"), default=-1)
    if last < 0:
        return Sample("", text, system)
    return Sample(turns[last][1], text, system, tuple(turns[:last]))


def _completion_text(completion: Sequence[dict[str, Any]]) -> str:
    return "\n".join(_text(m.get("content")) for m in completion if m.get("role", "assistant") == "assistant")


def group_samples(samples: Sequence[Sample], max_responses: int = DEFAULT_MAX_RESPONSES) -> list[Group]:
    """Samples grouped by prompt in first-seen order, at most `max_responses` a group; empty prompts left out."""
    by_key: dict[tuple[str, str, History], list[int]] = {}
    for i, sample in enumerate(samples):
        if sample.prompt.strip():
            by_key.setdefault(sample.key, []).append(i)
    return [
        Group(key, tuple(indices[start : start + max_responses]))
        for key, indices in by_key.items()
        for start in range(0, len(indices), max_responses)
    ]


def chunks(items: Sequence[T], size: int) -> list[list[T]]:
    """`items` in order, in lists of at most `size`."""
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


class RewardClient:
    """Blocking client; one channel reused for every call. Thread-safe.

    `model`: the model every call names (an id, or an alias such as "production"); "" = the scorer's default.
    Pin an id for a whole RLHF run, and its rewards never change under it."""

    def __init__(
        self,
        target: str,
        token: str = "",
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        model: str = "",
    ) -> None:
        self.timeout, self.retry, self.model = timeout, retry or RetryPolicy(), model
        self.metadata = [("authorization", f"Bearer {token}")] if token else []
        self.channel = open_channel(target, credentials)  # round-robin over every address the target names
        self.stub = reward_pb2_grpc.RewardServiceStub(self.channel)
        self._max_responses = 0  # read from GetModelInfo on first need

    def _call(self, method: Callable[..., Reply], request: Any, timeout: float | None) -> Reply:
        """`method(request)` with retries of what may succeed later, all within one deadline."""
        deadline = time.monotonic() + (timeout or self.timeout)
        for attempt in range(self.retry.attempts):
            try:
                return method(request, timeout=max(0.001, deadline - time.monotonic()), metadata=self.metadata)
            except grpc.RpcError as e:
                pause = self.retry.delay(attempt)
                if not _retryable(e) or attempt + 1 == self.retry.attempts or time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
        raise AssertionError("unreachable")

    def score_full(
        self,
        prompt: str,
        responses: Sequence[str],
        system_prompt: str = "",
        history: Sequence[tuple[str, str]] = (),
        timeout: float | None = None,
        model: str | None = None,
    ) -> reward_pb2.ScoreResponse:
        """The whole reply; `model` names the model for this call (None: the client's)."""
        name = self.model if model is None else model
        return self._call(self.stub.Score, score_request(prompt, responses, system_prompt, history, name), timeout)

    def score(
        self,
        prompt: str,
        responses: Sequence[str],
        system_prompt: str = "",
        history: Sequence[tuple[str, str]] = (),
        timeout: float | None = None,
    ) -> list[float]:
        return list(self.score_full(prompt, responses, system_prompt, history, timeout).scores)

    def score_batch(
        self, items: Sequence[reward_pb2.ScoreRequest], timeout: float | None = None
    ) -> list[reward_pb2.ScoreResponse]:
        """One ScoreBatch call: the replies to `items`, in order, each naming the model that scored it."""
        return list(self._call(self.stub.ScoreBatch, reward_pb2.ScoreBatchRequest(items=items), timeout).results)

    def best_of_n(self, prompt: str, candidates: Sequence[str], system_prompt: str = "") -> tuple[int, str, float]:
        """(index, text, score) of the highest-scoring candidate."""
        reply = self.score_full(prompt, candidates, system_prompt)
        return reply.best_index, candidates[reply.best_index], reply.scores[reply.best_index]

    def model_info(self, timeout: float | None = None) -> reward_pb2.ModelInfo:
        return self._call(self.stub.GetModelInfo, reward_pb2.ModelInfoRequest(), timeout)

    def rewards(
        self, samples: Sequence[Sample], max_items: int = MAX_ITEMS, model: str | None = None
    ) -> list[float | None]:
        """One score per sample, in order: each prompt's completions scored together, the prompts in
        ScoreBatch calls of at most `max_items`; None for a sample with an empty prompt. `model`: the
        model to name (None: the client's)."""
        name = self.model if model is None else model
        if not self._max_responses:
            self._max_responses = self.model_info().max_responses or DEFAULT_MAX_RESPONSES
        out: list[float | None] = [None] * len(samples)
        for chunk in chunks(group_samples(samples, self._max_responses), max_items):
            items = [
                score_request(g.key[0], [samples[i].completion for i in g.indices], g.key[1], g.key[2], name)
                for g in chunk
            ]
            reply = self._call(self.stub.ScoreBatch, reward_pb2.ScoreBatchRequest(items=items), None)
            for group, result in zip(chunk, reply.results, strict=True):
                for i, value in zip(group.indices, result.scores, strict=True):
                    out[i] = value
        return out

    def reward_function(
        self, max_items: int = MAX_ITEMS, model: str | None = None
    ) -> Callable[..., list[float | None]]:
        """A reward function for TRL's GRPOTrainer: `fn(prompts=..., completions=..., **kwargs)`, one score
        per completion (None where the prompt is empty); plain strings and conversational messages alike.
        `model`: the model id to pin for the whole run (None: the client's), so the reward never changes."""

        def cheems_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
            samples = [to_sample(p, c) for p, c in zip(prompts, completions, strict=True)]
            return self.rewards(samples, max_items, model)

        return cheems_reward

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> RewardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRewardClient:
    """asyncio client with the same retries and deadlines; use inside a running event loop."""

    def __init__(
        self, target: str, token: str = "", timeout: float = 30.0, retry: RetryPolicy | None = None, model: str = ""
    ) -> None:
        self.timeout, self.retry, self.model = timeout, retry or RetryPolicy(), model
        self.metadata = [("authorization", f"Bearer {token}")] if token else []
        self.channel = open_aio_channel(target)
        self.stub = reward_pb2_grpc.RewardServiceStub(self.channel)

    async def score(
        self,
        prompt: str,
        responses: Sequence[str],
        system_prompt: str = "",
        history: Sequence[tuple[str, str]] = (),
        timeout: float | None = None,
    ) -> list[float]:
        request = score_request(prompt, responses, system_prompt, history, self.model)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout or self.timeout)
        for attempt in range(self.retry.attempts):
            try:
                reply = await self.stub.Score(
                    request, timeout=max(0.001, deadline - loop.time()), metadata=self.metadata
                )
                return list(reply.scores)
            except grpc.aio.AioRpcError as e:  # its trailing_metadata() is a plain method, as _retryable reads it
                pause = self.retry.delay(attempt)
                if not _retryable(e) or attempt + 1 == self.retry.attempts or loop.time() + pause > deadline:
                    raise
                await asyncio.sleep(pause)
        raise AssertionError("unreachable")

    async def close(self) -> None:
        await self.channel.close()
