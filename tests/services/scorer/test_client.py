"""The Python client: retries decided by status and reason, the TRL reward function, and real servers
(sync, asyncio, best-of-N, TLS)."""

from __future__ import annotations

import asyncio
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from cheems.processes.ports import free_port
from cheems.v1 import reward_pb2, reward_pb2_grpc
from services.grpc_errors import REASON_KEY
from services.scorer.client import (
    AsyncRewardClient,
    Group,
    RetryPolicy,
    RewardClient,
    Sample,
    _retryable,
    group_samples,
    to_sample,
)
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer

PROMPT = "写一句关于春天的诗。"
CANDIDATES = ["春风又绿江南岸。", "不知道。", "spring spring 春天 ok"]


def test_sync_client_best_of_n_and_reward_function(truncating_server: ScorerServer) -> None:
    with RewardClient(f"127.0.0.1:{truncating_server.grpc_port}") as client:
        scores = client.score(PROMPT, CANDIDATES)
        index, text, score = client.best_of_n(PROMPT, CANDIDATES)
        assert (text, score) == (CANDIDATES[index], pytest.approx(max(scores)))
        reward = client.reward_function()
        per_sample = reward(prompts=[PROMPT] * 3, completions=CANDIDATES, completion_ids=[[1]] * 3, trainer_state=None)
        assert per_sample == pytest.approx(scores, abs=1e-5)


def test_async_client(truncating_server: ScorerServer) -> None:
    async def run() -> list[list[float]]:
        client = AsyncRewardClient(f"127.0.0.1:{truncating_server.grpc_port}")
        try:
            return list(await asyncio.gather(*(client.score(PROMPT, CANDIDATES) for _ in range(4))))
        finally:
            await client.close()

    results = asyncio.run(run())
    assert len(results) == 4 and all(r == pytest.approx(results[0]) for r in results)


def test_client_sends_the_token(strict_server: ScorerServer) -> None:
    with RewardClient(f"127.0.0.1:{strict_server.grpc_port}", token="s3cret-Q7vK2mN9xR4tW8yB6pL3") as client:
        assert len(client.score("你好", ["好"])) == 1
    with RewardClient(f"127.0.0.1:{strict_server.grpc_port}") as client, pytest.raises(grpc.RpcError) as info:
        client.score("你好", ["好"])
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_retries_unavailable_then_reaches_a_server_that_comes_up(tiny_model: Path) -> None:
    port = free_port()
    config = ScorerConfig(model=str(tiny_model), backend="torch", host="127.0.0.1", grpc_port=port, http_port=-1)
    server = ScorerServer(config)
    import threading

    starter = threading.Timer(1.0, server.start)
    starter.start()
    try:
        with RewardClient(
            f"127.0.0.1:{port}", timeout=60, retry=RetryPolicy(attempts=30, initial_backoff=0.2, max_backoff=1.0)
        ) as client:
            assert len(client.score("你好", ["好"])) == 1
    finally:
        starter.join()
        server.stop(grace=1)


def test_gives_up_after_the_retry_budget() -> None:
    started = time.monotonic()
    retry = RetryPolicy(attempts=3, initial_backoff=0.05)
    with RewardClient(f"127.0.0.1:{free_port()}", retry=retry) as client, pytest.raises(grpc.RpcError) as info:
        client.score("你好", ["好"])
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert time.monotonic() - started < 10


def test_tls(tiny_model: Path, tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )
    config = ScorerConfig(
        model=str(tiny_model),
        backend="torch",
        host="127.0.0.1",
        grpc_port=0,
        http_port=-1,
        tls_cert=str(cert),
        tls_key=str(key),
    )
    with ScorerServer(config) as server:
        credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with RewardClient(f"localhost:{server.grpc_port}", credentials=credentials) as client:
            assert len(client.score("你好", ["好", "不好"])) == 2
        plain = RewardClient(f"localhost:{server.grpc_port}", retry=RetryPolicy(attempts=1))
        with plain, pytest.raises(grpc.RpcError):
            plain.score("你好", ["好"])


# --- retries: from the status code and the server's `cheems-error-reason`, never the message text


class FakeError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, reason: str | bytes | None, details: str = "") -> None:
        self._code, self._details = code, details
        self._trailing = () if reason is None else ((REASON_KEY, reason),)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._trailing


RE = grpc.StatusCode.RESOURCE_EXHAUSTED


@pytest.mark.parametrize(
    ("code", "reason", "details", "retry"),
    [
        (grpc.StatusCode.UNAVAILABLE, None, "connection refused", True),
        (grpc.StatusCode.UNAVAILABLE, "backend_unavailable", "Triton is restarting", True),
        (RE, "overloaded", "queue full", True),
        (RE, b"overloaded", "", True),
        (RE, "limit_exceeded", "9 responses exceed the limit of 3 per call", False),
        (RE, "limit_exceeded", "responses[0] is 90 tokens with its prompt, over max_length 48", False),
        (RE, None, "Received message larger than max (70000000 vs. 67108864)", False),
        (RE, None, "server overloaded, try again", False),
        (grpc.StatusCode.INVALID_ARGUMENT, "invalid_request", "prompt is empty", False),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "deadline_exceeded", "", False),
        (grpc.StatusCode.INTERNAL, "internal", "", False),
        (grpc.StatusCode.INTERNAL, "overloaded", "", False),
        (grpc.StatusCode.UNAUTHENTICATED, None, "", False),
    ],
)
def test_retryable_reads_code_and_reason(code: grpc.StatusCode, reason: Any, details: str, retry: bool) -> None:
    assert _retryable(FakeError(code, reason, details)) is retry


def test_retryable_reads_aio_errors() -> None:
    def aio(reason: str) -> grpc.aio.AioRpcError:
        trailing = grpc.aio.Metadata((REASON_KEY, reason))
        return grpc.aio.AioRpcError(RE, grpc.aio.Metadata(), trailing, "details")

    assert _retryable(aio("overloaded")) and not _retryable(aio("limit_exceeded"))


class Refusing(reward_pb2_grpc.RewardServiceServicer):
    """Answers every Score with RESOURCE_EXHAUSTED and a reason, as the scorer does; counts the calls."""

    def __init__(self) -> None:
        self.calls, self.reason = 0, "limit_exceeded"

    def Score(self, request: reward_pb2.ScoreRequest, context: grpc.ServicerContext) -> reward_pb2.ScoreResponse:
        self.calls += 1
        context.set_trailing_metadata(((REASON_KEY, self.reason),))
        context.abort(RE, f"responses[0] is {len(request.responses[0])} tokens, over max_length 48")
        raise AssertionError("abort raises")


@pytest.fixture
def refusing() -> Iterator[tuple[Refusing, str]]:
    servicer, server = Refusing(), grpc.server(futures.ThreadPoolExecutor(2))
    reward_pb2_grpc.add_RewardServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(None)


QUICK = RetryPolicy(attempts=3, initial_backoff=0.01)


def test_an_over_length_request_reaches_the_server_once(refusing: tuple[Refusing, str]) -> None:
    servicer, target = refusing
    with RewardClient(target, retry=QUICK) as client, pytest.raises(grpc.RpcError) as info:
        client.score("你好", ["长" * 500])
    assert info.value.code() == RE and servicer.calls == 1


def test_an_overloaded_server_is_retried(refusing: tuple[Refusing, str]) -> None:
    servicer, target = refusing
    servicer.reason = "overloaded"
    with RewardClient(target, retry=QUICK) as client, pytest.raises(grpc.RpcError):
        client.score("你好", ["好"])
    assert servicer.calls == QUICK.attempts


def test_async_client_follows_the_same_rule(refusing: tuple[Refusing, str]) -> None:
    servicer, target = refusing

    async def run() -> None:
        client = AsyncRewardClient(target, retry=QUICK)
        try:
            with pytest.raises(grpc.aio.AioRpcError):
                await client.score("你好", ["长" * 500])
        finally:
            await client.close()

    asyncio.run(run())
    assert servicer.calls == 1
    servicer.reason = "overloaded"
    asyncio.run(run())
    assert servicer.calls == 1 + QUICK.attempts


def metric(server: ScorerServer, line_start: str, having: str = "") -> float:
    """The sum of the samples whose lines begin with `line_start` and hold `having`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics", timeout=10) as reply:
        lines = reply.read().decode().splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith(line_start) and having in line)


def test_the_real_server_sees_an_over_length_request_once(tiny_model: Path) -> None:
    config = ScorerConfig(model=str(tiny_model), backend="torch", host="127.0.0.1", grpc_port=0, http_port=0)
    config.max_length = 48
    with ScorerServer(config) as server, RewardClient(f"127.0.0.1:{server.grpc_port}", retry=QUICK) as client:
        with pytest.raises(grpc.RpcError) as info:
            client.score("你好", ["长城" * 100])
        assert info.value.code() == RE
        assert metric(server, 'cheems_scorer_requests_total{api="Score"') == 1


# --- the TRL reward function: pure pieces


def test_to_sample_plain_and_conversational() -> None:
    assert to_sample("你好", "好") == Sample("你好", "好")
    prompt = [
        {"role": "system", "content": "你是诗人。"},
        {"role": "user", "content": "写一句诗。"},
        {"role": "assistant", "content": "春眠不觉晓。"},
        {"role": "user", "content": "再写一句。"},
    ]
    completion = [{"role": "assistant", "content": "处处闻啼鸟。"}]
    history = (("user", "写一句诗。"), ("assistant", "春眠不觉晓。"))
    assert to_sample(prompt, completion) == Sample("再写一句。", "处处闻啼鸟。", "你是诗人。", history)
    two: list[dict[str, Any]] = [
        {"role": "assistant", "content": "夜来"},
        {"role": "assistant", "content": [{"type": "text", "text": "风雨声"}]},
    ]
    assert to_sample(prompt[:2], two) == Sample("写一句诗。", "夜来\n风雨声", "你是诗人。")
    assert to_sample([{"role": "system", "content": "只有系统"}], "好").prompt == ""


def test_group_samples_groups_by_prompt_splits_and_skips_empty_prompts() -> None:
    samples = [Sample(p, f"{p}{i}") for i in range(4) for p in ("甲", "乙")] + [Sample("  ", "空")]
    assert group_samples(samples) == [Group(("甲", "", ()), (0, 2, 4, 6)), Group(("乙", "", ()), (1, 3, 5, 7))]
    assert [g.indices for g in group_samples(samples, max_responses=3)] == [(0, 2, 4), (6,), (1, 3, 5), (7,)]
    other_system = Sample("甲", "x", system_prompt="系统")
    assert len(group_samples([samples[0], other_system])) == 2


# --- the TRL reward function against a real server


def test_reward_function_batches_prompts_and_keeps_input_order(truncating_server: ScorerServer) -> None:
    prompts = ["写一句诗。", "介绍长城。", "你好"]
    completions = [f"回答{i}：{'好' * i}" for i in range(12)]
    chosen = [prompts[i % 3] for i in range(12)]
    batches = 'cheems_scorer_requests_total{api="ScoreBatch",'
    with RewardClient(f"127.0.0.1:{truncating_server.grpc_port}") as client:
        before = metric(truncating_server, batches, 'status="OK"')
        got = client.reward_function(max_items=2)(prompts=[*chosen, ""], completions=[*completions, "空"])
        assert metric(truncating_server, batches, 'status="OK"') - before == 2  # 3 prompts in items of at most 2
        expected = [client.score(p, [c])[0] for p, c in zip(chosen, completions, strict=True)]
    assert got[:12] == pytest.approx(expected, abs=1e-4) and got[12] is None


def test_reward_function_conversational_and_split_by_max_responses(strict_server: ScorerServer) -> None:
    prompt = [{"role": "system", "content": "简短回答。"}, {"role": "user", "content": "你好"}]
    completions = [[{"role": "assistant", "content": c}] for c in ("好", "你好", "嗯", "早", "晚")]
    with RewardClient(f"127.0.0.1:{strict_server.grpc_port}", token="s3cret-Q7vK2mN9xR4tW8yB6pL3") as client:
        got = client.reward_function()(prompts=[prompt] * 5, completions=completions)  # max_responses is 3
        expected = [client.score("你好", [c[0]["content"]], system_prompt="简短回答。")[0] for c in completions]
    assert got == pytest.approx(expected, abs=1e-4)
