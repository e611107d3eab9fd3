"""The scorer end to end over real gRPC and HTTP, against a real Triton started by PyTriton."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from cheems.chat import Conversation, encode_many
from cheems.forward import forward_rewards
from cheems.model import load_model
from cheems.v1 import reward_pb2, reward_pb2_grpc
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer

PROMPT = "请用一句话介绍长城。"
RESPONSES = ["长城是中国古代修建的军事防御工程，绵延上万里。", "不知道。", "The Great Wall 很长 very long。"]


def stub(server: ScorerServer) -> Any:
    return reward_pb2_grpc.RewardServiceStub(grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}"))


def code_of(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), info.value.details()


def http(server: ScorerServer, path: str, body: Any = None, token: str = "") -> tuple[int, Any]:
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    headers = {"content-type": "application/json", **({"authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(f"http://127.0.0.1:{server.http_port}{path}", data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            raw = reply.read()
            status = reply.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    try:
        return status, json.loads(raw)
    except json.JSONDecodeError:
        return status, raw.decode()


def trainer_scores(model_dir: Path, prompt: str, responses: list[str]) -> list[float]:
    model, tokenizer = load_model(model_dir)
    ids = [e.input_ids for e in encode_many(tokenizer, [Conversation(prompt, r) for r in responses])]
    return forward_rewards(model.eval(), ids).tolist()


def test_scores_through_triton_equal_the_trainers(triton_server: ScorerServer, tiny_model: Path) -> None:
    reply = stub(triton_server).Score(
        reward_pb2.ScoreRequest(prompt=PROMPT, responses=RESPONSES, request_id="r-1"), timeout=30
    )
    expected = trainer_scores(tiny_model, PROMPT, RESPONSES)
    assert list(reply.scores) == pytest.approx(expected, abs=1e-5)
    assert reply.best_index == max(range(3), key=lambda i: expected[i])
    assert list(reply.truncated) == [False] * 3 and reply.request_id == "r-1"
    assert reply.timings.total_ms >= reply.timings.inference_ms > 0


def test_torch_and_triton_backends_agree(triton_server: ScorerServer, truncating_server: ScorerServer) -> None:
    request = reward_pb2.ScoreRequest(
        prompt="你好", responses=["你好！", "您好，有什么可以帮您？"], system_prompt="你是一个礼貌的助手"
    )
    via_triton = stub(triton_server).Score(request, timeout=30).scores
    via_torch = stub(truncating_server).Score(request, timeout=30).scores
    assert list(via_triton) == pytest.approx(list(via_torch), abs=1e-5)


def test_system_prompt_and_history_change_the_score(triton_server: ScorerServer) -> None:
    s = stub(triton_server)
    plain = s.Score(reward_pb2.ScoreRequest(prompt="你好", responses=["你好！"]), timeout=30).scores[0]
    system = s.Score(
        reward_pb2.ScoreRequest(prompt="你好", responses=["你好！"], system_prompt="你是诗人"), timeout=30
    ).scores[0]
    assert plain != pytest.approx(system, abs=1e-7)


def test_score_batch_keeps_order(triton_server: ScorerServer) -> None:
    items = [reward_pb2.ScoreRequest(prompt=PROMPT, responses=RESPONSES[:k]) for k in (1, 2, 3)]
    reply = stub(triton_server).ScoreBatch(reward_pb2.ScoreBatchRequest(items=items), timeout=30)
    assert [len(r.scores) for r in reply.results] == [1, 2, 3]
    assert reply.results[2].scores[0] == pytest.approx(reply.results[0].scores[0], abs=1e-5)


def test_health_and_reflection(triton_server: ScorerServer) -> None:
    channel = grpc.insecure_channel(f"127.0.0.1:{triton_server.grpc_port}")
    checker = health_pb2_grpc.HealthStub(channel)
    for service in ("", "cheems.v1.RewardService"):
        status = checker.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    reflector = reflection_pb2_grpc.ServerReflectionStub(channel)
    [answer] = list(reflector.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
    names = {s.name for s in answer.list_services_response.service}
    assert "cheems.v1.RewardService" in names and "grpc.health.v1.Health" in names


def test_model_info(strict_server: ScorerServer) -> None:
    info = stub(strict_server).GetModelInfo(
        reward_pb2.ModelInfoRequest(), timeout=5, metadata=[("authorization", "Bearer s3cret-Q7vK2mN9xR4tW8yB6pL3")]
    )
    assert (info.backend, info.max_responses, info.max_length, info.truncation) == ("torch", 3, 48, "error")
    assert info.model_id and info.name and info.dtype and info.models
    assert "/" not in str(info), "a scorer-client learned a server path"  # no checkpoint directory, no file


AUTH = [("authorization", "Bearer s3cret-Q7vK2mN9xR4tW8yB6pL3")]


@pytest.mark.parametrize(
    ("request_", "code", "detail"),
    [
        (reward_pb2.ScoreRequest(prompt="你好", responses=[]), grpc.StatusCode.INVALID_ARGUMENT, "responses is empty"),
        (reward_pb2.ScoreRequest(prompt="", responses=["好"]), grpc.StatusCode.INVALID_ARGUMENT, "prompt is empty"),
        (
            reward_pb2.ScoreRequest(prompt="你好", responses=["好"] * 4),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "4 responses exceed the limit of 3",
        ),
        (
            reward_pb2.ScoreRequest(prompt="你好", responses=["好" * 200]),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "over max_length 48",
        ),
    ],
)
def test_bad_input_gets_a_clear_status_and_the_server_keeps_serving(
    strict_server: ScorerServer, request_: Any, code: grpc.StatusCode, detail: str
) -> None:
    s = stub(strict_server)
    got, details = code_of(lambda: s.Score(request_, timeout=10, metadata=AUTH))
    assert got == code and detail in details
    assert len(s.Score(reward_pb2.ScoreRequest(prompt="你好", responses=["好"]), timeout=10, metadata=AUTH).scores) == 1


def test_truncation_when_the_policy_allows_it(truncating_server: ScorerServer) -> None:
    reply = stub(truncating_server).Score(
        reward_pb2.ScoreRequest(prompt="你好", responses=["好" * 200, "好"]), timeout=10
    )
    assert list(reply.truncated) == [True, False]


def test_auth(strict_server: ScorerServer) -> None:
    s = stub(strict_server)
    request = reward_pb2.ScoreRequest(prompt="你好", responses=["好"])
    assert code_of(lambda: s.Score(request, timeout=5))[0] == grpc.StatusCode.UNAUTHENTICATED
    wrong = [("authorization", "Bearer nope")]
    assert code_of(lambda: s.Score(request, timeout=5, metadata=wrong))[0] == grpc.StatusCode.UNAUTHENTICATED
    assert s.Score(request, timeout=5, metadata=AUTH).scores
    channel = grpc.insecure_channel(f"127.0.0.1:{strict_server.grpc_port}")  # probes need no token
    status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status
    assert status == health_pb2.HealthCheckResponse.SERVING
    assert http(strict_server, "/get_reward", {"query": ["x"]})[0] == 401
    assert http(strict_server, "/get_reward", {"query": ["x"]}, token="s3cret-Q7vK2mN9xR4tW8yB6pL3")[0] == 200


def test_deadline_exceeded(triton_server: ScorerServer) -> None:
    s = stub(triton_server)
    long = [f"第{i}个回答：" + "很长的内容。" * 150 for i in range(40)]
    got, _ = code_of(lambda: s.Score(reward_pb2.ScoreRequest(prompt=PROMPT, responses=long), timeout=0.05))
    assert got == grpc.StatusCode.DEADLINE_EXCEEDED
    assert s.Score(reward_pb2.ScoreRequest(prompt=PROMPT, responses=RESPONSES), timeout=30).scores


def test_unreachable_triton_is_unavailable(tiny_model: Path) -> None:
    from cheems.processes.ports import free_port

    config = ScorerConfig(
        model=str(tiny_model),
        host="127.0.0.1",
        grpc_port=0,
        http_port=0,
        backend="triton",
        triton_url=f"127.0.0.1:{free_port()}",
    )
    with ScorerServer(config) as server:
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status
        assert status == health_pb2.HealthCheckResponse.NOT_SERVING
        got, details = code_of(
            lambda: stub(server).Score(reward_pb2.ScoreRequest(prompt="你好", responses=["好"]), timeout=10)
        )
        assert got == grpc.StatusCode.UNAVAILABLE and "not serving" in details
        assert http(server, "/health")[0] == 503


def test_training_and_serving_produce_identical_token_ids(tiny_model: Path) -> None:
    from cheems.chat import Truncation
    from cheems.formats.responses import Response
    from services.scorer.tokenization import make_job, tokenize_job
    from trainer.data import PromptGroup, tokenize_groups

    _, tokenizer = load_model(tiny_model)
    group = PromptGroup(PROMPT, tuple(Response(f"r{i}", r) for i, r in enumerate(RESPONSES)), ((0, 1),), "你是助手")
    trained = tokenize_groups([group], tokenizer, keep_unpaired=True)
    served = tokenize_job(tokenizer, make_job(PROMPT, RESPONSES, "你是助手"), 2048, Truncation.NONE)
    assert [e.input_ids for e in served] == [list(x.input_ids) for x in trained.examples]
