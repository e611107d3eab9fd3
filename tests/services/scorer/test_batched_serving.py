"""The scorer serving concurrent calls on the torch backend, called as strangers call it (descriptors from
reflection, no deadline): calls share forwards and each gets its own rewards, a bad call or a short deadline
fails alone, and the dtype each model runs in is reported (GetModelInfo, /metrics) or refused at start."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from cheems.errors import ConfigError
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer
from tests.services.scorer.conftest import running
from tests.services.scorer.test_reflection_client import SERVICE, ReflectedClient

REQUESTS = [
    ("请用一句话介绍长城。", ["长城是中国古代修建的军事防御工程。", "不知道。", "The Great Wall 很长。"]),
    ("一加一等于几？", ["二。", "等于二，这是最基本的加法。"]),
    ("写一句关于春天的诗。", ["春风又绿江南岸。"]),
    ("请用一句话介绍长城。", ["长城很长。", "长城在中国北方。"]),  # the first prompt again, another call
]


@pytest.fixture(scope="module")
def batching_server(tiny_model: Path) -> Iterator[ScorerServer]:
    """The torch backend with a generous queue delay: calls still being tokenized are waited for."""
    yield from running(tiny_model, backend="torch", queue_delay_us=50_000)


@pytest.fixture(scope="module")
def client(batching_server: ScorerServer) -> Iterator[ReflectedClient]:
    c = ReflectedClient(batching_server.grpc_port)
    yield c
    c.close()


def score(client: ReflectedClient, prompt: str, responses: list[str], timeout: float | None = None) -> Any:
    request = client.message(f"{SERVICE.rsplit('.', 1)[0]}.ScoreRequest")(prompt=prompt, responses=responses)
    if timeout is None:
        return client.call("Score", request)  # no deadline, as grpcurl and Go stubs call
    method = client.service.methods_by_name["Score"]
    from google.protobuf import message_factory

    rpc = client.channel.unary_unary(
        f"/{SERVICE}/Score",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=message_factory.GetMessageClass(method.output_type).FromString,
    )
    return rpc(request, timeout=timeout)


def metric(server: ScorerServer, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics", timeout=10).read().decode()
    found = re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.MULTILINE)
    return sum(float(v) for v in found)  # over the series' labels (model_id)


def test_concurrent_calls_share_forwards_and_a_bad_or_late_call_fails_alone(
    client: ReflectedClient, batching_server: ScorerServer
) -> None:
    alone = [list(score(client, p, r).scores) for p, r in REQUESTS]
    forwards = metric(batching_server, "cheems_scorer_forward_calls_count")
    calls = metric(batching_server, "cheems_scorer_forward_calls_sum")
    jobs: list[tuple[str, list[str], float | None]] = [(p, r, None) for p, r in REQUESTS * 6]
    jobs.insert(5, ("你好", [], None))  # bad input: INVALID_ARGUMENT, for this call only
    jobs.insert(11, ("你好", ["好"], 0.001))  # a deadline nobody can meet

    def outcome(job: tuple[str, list[str], float | None]) -> Any:
        try:
            return list(score(client, *job).scores)
        except grpc.RpcError as e:
            return e.code()

    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(outcome, jobs))
    assert results.pop(11) == grpc.StatusCode.DEADLINE_EXCEEDED
    assert results.pop(5) == grpc.StatusCode.INVALID_ARGUMENT
    for i, values in enumerate(results):
        assert values == pytest.approx(alone[i % len(REQUESTS)], abs=1e-5)
    shared_forwards = metric(batching_server, "cheems_scorer_forward_calls_count") - forwards
    served_calls = metric(batching_server, "cheems_scorer_forward_calls_sum") - calls
    assert served_calls >= 24 and shared_forwards < served_calls  # some forward served several calls


def test_model_info_and_metrics_report_the_dtype(client: ReflectedClient, batching_server: ScorerServer) -> None:
    info = client.call("GetModelInfo", client.message("cheems.v1.ModelInfoRequest")())
    assert info.dtype == "float32"  # auto, on the CPU
    assert info.attn_implementation == "sdpa"  # auto, on the CPU
    assert [(m.is_default, m.dtype, m.attn_implementation) for m in info.models] == [(True, "float32", "sdpa")]
    text = urllib.request.urlopen(f"http://127.0.0.1:{batching_server.http_port}/metrics", timeout=10).read().decode()
    model_id = info.model_id
    assert (
        f'cheems_scorer_model_info{{backend="torch",default="true",dtype="float32",model_id="{model_id}"}} 1.0' in text
    )


def test_a_bfloat16_scorer_says_so_and_scores_close_to_float32(tiny_model: Path, client: ReflectedClient) -> None:
    prompt, responses = REQUESTS[0]
    full = list(score(client, prompt, responses).scores)
    for server in running(tiny_model, backend="torch", dtype="bfloat16"):
        half = ReflectedClient(server.grpc_port)
        try:
            assert half.call("GetModelInfo", half.message("cheems.v1.ModelInfoRequest")()).dtype == "bfloat16"
            assert list(score(half, prompt, responses).scores) == pytest.approx(full, abs=2e-2)
        finally:
            half.close()


def test_a_device_that_cannot_run_the_dtype_is_refused_at_start_in_one_line(tiny_model: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    refusal = f"device cuda: CUDA is not available here (torch {torch.__version__})"
    args = ["serve", "--model", str(tiny_model), "--backend", "torch", "--device", "cuda", "--dtype", "bfloat16"]
    result = subprocess.run(
        [sys.executable, "-m", "cheems_cli", *args, "--grpc-port", "0", "--http-port", "-1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [f"error: {refusal}"]
    with pytest.raises(ConfigError, match=re.escape(refusal)):  # Triton's the same, before Triton starts
        ScorerServer(ScorerConfig(model=str(tiny_model), backend="triton", device="cuda", dtype="auto"))
