"""The scorer as a stranger's client sees it: no project code, descriptors from server reflection, no deadline.

This is how grpcurl and Go/Java stubs call by default: the server must not need the client to have the
generated `cheems.v1` classes, nor to set a deadline (the server's `max_call_seconds` applies then).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from services.scorer.runtime import ScorerServer
from tests.services.scorer.conftest import running

SERVICE = "cheems.v1.RewardService"
PROMPT = "请用一句话介绍长城。"
RESPONSES = ["长城是中国古代修建的军事防御工程，绵延上万里。", "不知道。", "The Great Wall 很长 very long。"]


class ReflectedClient:
    """Calls RewardService with message classes built from what the server's reflection describes."""

    def __init__(self, port: int) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(self.channel))
        self.service = self.pool.FindServiceByName(SERVICE)

    def message(self, full_name: str) -> Any:
        return message_factory.GetMessageClass(self.pool.FindMessageTypeByName(full_name))

    def call(self, method_name: str, request: Any) -> Any:
        method = self.service.methods_by_name[method_name]
        reply_class = message_factory.GetMessageClass(method.output_type)
        assert type(request).DESCRIPTOR.full_name == method.input_type.full_name
        rpc = self.channel.unary_unary(
            f"/{SERVICE}/{method_name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=reply_class.FromString,
        )
        return rpc(request)  # no timeout=: the caller sets no deadline

    def close(self) -> None:
        self.channel.close()


@pytest.fixture(scope="module")
def client(triton_server: ScorerServer) -> Iterator[ReflectedClient]:
    c = ReflectedClient(triton_server.grpc_port)
    yield c
    c.close()


@pytest.fixture(scope="module")
def wide_server(tiny_model: Path) -> Iterator[ScorerServer]:
    """Triton backend taking more responses per call than Triton's max batch size (64)."""
    yield from running(tiny_model, backend="triton", max_responses=128)


def check_scores(reply: Any, n: int) -> None:
    scores = list(reply.scores)
    assert len(scores) == n and all(math.isfinite(s) for s in scores)
    assert 0 <= reply.best_index < n and scores[reply.best_index] == max(scores)
    assert list(reply.truncated) == [False] * n


def test_the_service_is_described_by_reflection(client: ReflectedClient) -> None:
    assert {m.name for m in client.service.methods} == {"Score", "ScoreBatch", "GetModelInfo"}
    fields = {f.name for f in client.message("cheems.v1.ScoreRequest").DESCRIPTOR.fields}
    assert {"prompt", "responses", "system_prompt", "history", "request_id"} <= fields


def test_score_without_a_deadline(client: ReflectedClient) -> None:
    ScoreRequest = client.message("cheems.v1.ScoreRequest")
    reply = client.call("Score", ScoreRequest(prompt=PROMPT, responses=RESPONSES, request_id="反射-1"))
    check_scores(reply, 3)
    assert reply.request_id == "反射-1" and reply.model == "tiny"
    assert reply.timings.total_ms >= reply.timings.inference_ms > 0


def test_score_batch_without_a_deadline(client: ReflectedClient) -> None:
    ScoreRequest = client.message("cheems.v1.ScoreRequest")
    ScoreBatchRequest = client.message("cheems.v1.ScoreBatchRequest")
    items = [ScoreRequest(prompt=PROMPT, responses=RESPONSES[:k], request_id=f"第{k}项") for k in (1, 2, 3)]
    reply = client.call("ScoreBatch", ScoreBatchRequest(items=items))
    assert [r.request_id for r in reply.results] == ["第1项", "第2项", "第3项"]
    for k, result in zip((1, 2, 3), reply.results, strict=True):
        check_scores(result, k)
    single = client.call("Score", ScoreRequest(prompt=PROMPT, responses=RESPONSES))
    assert list(reply.results[2].scores) == pytest.approx(list(single.scores), abs=1e-4)


def test_model_info_without_a_deadline(client: ReflectedClient) -> None:
    info = client.call("GetModelInfo", client.message("cheems.v1.ModelInfoRequest")())
    assert (info.name, info.backend, info.max_responses, info.truncation) == ("tiny", "triton", 64, "error")
    assert info.max_length == 2048


def test_more_responses_than_tritons_max_batch(wide_server: ScorerServer) -> None:
    client = ReflectedClient(wide_server.grpc_port)
    try:
        ScoreRequest = client.message("cheems.v1.ScoreRequest")
        responses = [f"第{i}个回答：长城" + "很长。" * (i % 7) for i in range(65)]
        reply = client.call("Score", ScoreRequest(prompt=PROMPT, responses=responses))
        assert len(reply.scores) == 65 and all(math.isfinite(s) for s in reply.scores)
        pieces: list[float] = []
        for first in range(0, 65, 20):
            pieces += client.call("Score", ScoreRequest(prompt=PROMPT, responses=responses[first : first + 20])).scores
        assert list(reply.scores) == pytest.approx(pieces, abs=1e-4)
        assert reply.best_index == max(range(65), key=lambda i: reply.scores[i])
    finally:
        client.close()
