"""Calls that name their model (torch backend, real store): a pinned id gets exactly that model's scores, over
gRPC, ScoreBatch and HTTP; an alias follows the registry; unknown, rejected and malformed names are refused with
the right status and reason, never another model's scores; past --max-models the least recently used idle model
is unloaded."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import Engine

from cheems.v1 import reward_pb2, reward_pb2_grpc, training_pb2
from services.bus.broker import EmbeddedBroker
from services.grpc_errors import error_reason
from services.scorer.client import RewardClient
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer
from services.store import lifecycle
from services.store.db import session_scope
from tests.services.scorer.models.following import REQUESTS, model_info, register, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(
    broker: EmbeddedBroker, store: tuple[str, Engine], first: training_pb2.Model, expected: object
) -> Iterator[ScorerServer]:
    """`cheems serve --follow --backend torch --max-models 2`: the default model (production: "one", until the
    second test promotes "two") and one more at a time. The tests build on each other, in file order."""
    with session_scope(store[1]) as session:
        lifecycle.promote(session, first.model_id, "person:test")
    config = ScorerConfig(
        follow=True, bootstrap=broker.bootstrap, db=store[0], backend="torch", grpc_port=0, http_port=0, max_models=2
    )
    with ScorerServer(config) as running:
        yield running


@pytest.fixture(scope="module")
def two(server: ScorerServer, store: tuple[str, Engine], checkpoints: dict[str, Path]) -> training_pb2.Model:
    return register(store[1], checkpoints["two"])  # registered, never announced: the default stays "one"


def score(port: int, model: str, request: reward_pb2.ScoreRequest = REQUESTS[0]) -> reward_pb2.ScoreResponse:
    named = reward_pb2.ScoreRequest()
    named.CopyFrom(request)
    named.model = model
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return reward_pb2_grpc.RewardServiceStub(channel).Score(named)  # no deadline, as grpcurl and Go stubs call


def refused(port: int, model: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        score(port, model)
    return caught.value


def test_a_pinned_id_gets_exactly_its_model_and_no_name_gets_the_default(
    server: ScorerServer, first: training_pb2.Model, two: training_pb2.Model, expected: dict[str, list[list[float]]]
) -> None:
    port = server.grpc_port
    for name, want, model_id in [("", "one", first.model_id), (two.model_id, "two", two.model_id)]:
        for request, scores in zip(REQUESTS, expected[want], strict=True):
            reply = score(port, name, request)
            assert reply.model == model_id and list(reply.scores) == pytest.approx(scores, abs=1e-4)
    assert score(port, first.model_id).model == first.model_id  # the default by its own id
    info = model_info(port)
    assert info.model_id == first.model_id  # naming a model never changes the default
    assert [(m.model_id, m.is_default) for m in info.models] == [(first.model_id, True), (two.model_id, False)]

    batch = reward_pb2.ScoreBatchRequest(items=[REQUESTS[0], REQUESTS[1], REQUESTS[0]])
    batch.items[1].model = two.model_id
    batch.items[2].model = two.model_id
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        results = reward_pb2_grpc.RewardServiceStub(channel).ScoreBatch(batch, timeout=60).results
    assert [r.model for r in results] == [first.model_id, two.model_id, two.model_id]
    assert list(results[1].scores) == pytest.approx(expected["two"][1], abs=1e-4)
    assert list(results[2].scores) == pytest.approx(expected["two"][0], abs=1e-4)

    with RewardClient(f"127.0.0.1:{port}", model=two.model_id) as client:  # what an RLHF run pins
        reward = client.reward_function()
        values = reward(prompts=[REQUESTS[0].prompt] * 2, completions=list(REQUESTS[0].responses))
    assert values == pytest.approx(expected["two"][0], abs=1e-4)


def test_names_that_serve_nothing_are_refused_with_their_reason(
    server: ScorerServer, store: tuple[str, Engine], two: training_pb2.Model
) -> None:
    port = server.grpc_port
    error = refused(port, "rm-nobody")
    assert error.code() == grpc.StatusCode.NOT_FOUND and "rm-nobody" in (error.details() or "")
    assert error_reason(error) == "model_not_found"
    by_alias, by_default = score(port, "production").model, score(port, "").model
    assert by_alias == by_default, (by_alias, by_default, two.model_id)  # the alias names the default here
    for bad in ["a b", "x" * 65, "名字", "-x", "a\x00b"]:
        error = refused(port, bad)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "model:" in (error.details() or "")
    with session_scope(store[1]) as session:
        lifecycle.promote(session, two.model_id, "person:ann")
    assert wait_for(lambda: score(port, "production").model == two.model_id, 30)  # the alias, looked up again
    assert wait_for(lambda: score(port, "").model == two.model_id, 30)  # the default follows production


def test_a_rejected_model_stops_being_served_within_the_recheck(
    server: ScorerServer, store: tuple[str, Engine], tiny_checkpoint: Callable[..., Path]
) -> None:
    port, engine = server.grpc_port, store[1]
    three = register(engine, tiny_checkpoint(seed=3))
    assert score(port, three.model_id).model == three.model_id
    with session_scope(engine) as session:
        lifecycle.reject(session, three.model_id, "person:ann", "prefers long answers")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            score(port, three.model_id)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.NOT_FOUND
            assert f"model {three.model_id!r} was rejected" in (error.details() or "")
            break
        time.sleep(0.5)
    else:
        pytest.fail("a rejected model was still served 30 s later")
    assert three.model_id not in [m.model_id for m in model_info(port).models]  # unloaded


def test_past_max_models_the_least_recently_used_idle_model_is_unloaded(
    server: ScorerServer, store: tuple[str, Engine], first: training_pb2.Model, tiny_checkpoint: Callable[..., Path]
) -> None:
    port = server.grpc_port  # the default is "two" now; "one" is a model calls name
    four = register(store[1], tiny_checkpoint(seed=4))
    score(port, first.model_id)
    assert first.model_id in [m.model_id for m in model_info(port).models]
    assert score(port, four.model_id).model == four.model_id
    loaded = [m.model_id for m in model_info(port).models]
    assert len(loaded) == 2 and four.model_id in loaded and first.model_id not in loaded
    assert score(port, first.model_id).model == first.model_id  # loaded again when named again


def http(port: int, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_http_names_the_model_in_the_body_or_the_query(
    server: ScorerServer, first: training_pb2.Model, expected: dict[str, list[list[float]]]
) -> None:
    port = server.http_port  # the default is "two": "one" is named
    body = {"prompt": REQUESTS[0].prompt, "responses": list(REQUESTS[0].responses), "model": first.model_id}
    status, reply = http(port, "/score", body)
    assert status == 200 and reply["model"] == first.model_id
    assert reply["scores"] == pytest.approx(expected["one"][0], abs=1e-4)
    status, by_query = http(port, f"/get_reward?model={first.model_id}", {"query": ["你好", "你好世界"]})
    status_default, by_default = http(port, "/get_reward", {"query": ["你好", "你好世界"]})
    assert status == status_default == 200 and by_query["rewards"] != by_default["rewards"]
    status, refused_reply = http(port, "/get_reward", {"query": ["你好"], "model": "rm-nobody"})
    assert status == 404 and refused_reply["reason"] == "model_not_found" and "rm-nobody" in refused_reply["error"]
    status, bad = http(port, "/score", {**body, "model": 7})
    assert status == 400 and "model" in bad["error"]
