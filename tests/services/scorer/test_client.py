"""The Python client against a real server: sync, asyncio, retries, TRL adapter, best-of-N, TLS."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import grpc
import pytest

from services.scorer.client import AsyncRewardClient, RetryPolicy, RewardClient
from services.scorer.config import ScorerConfig
from services.scorer.server import ScorerServer
from services.scorer.triton_model import free_port

PROMPT = "写一句关于春天的诗。"
CANDIDATES = ["春风又绿江南岸。", "不知道。", "spring spring 春天 ok"]


def test_sync_client_best_of_n_and_reward_function(truncating_server: ScorerServer) -> None:
    with RewardClient(f"127.0.0.1:{truncating_server.grpc_port}") as client:
        scores = client.score(PROMPT, CANDIDATES)
        index, text, score = client.best_of_n(PROMPT, CANDIDATES)
        assert (text, score) == (CANDIDATES[index], pytest.approx(max(scores)))
        reward = client.reward_function()
        per_sample = reward(prompts=[PROMPT] * 3, completions=CANDIDATES)
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
    with RewardClient(f"127.0.0.1:{strict_server.grpc_port}", token="s3cret") as client:
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
