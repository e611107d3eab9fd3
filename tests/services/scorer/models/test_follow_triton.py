"""`cheems serve --follow` on Triton: a model a call names is loaded on demand into the one Triton the scorer runs
(explicit model control, no second tritonserver) and scores exactly as in process; 8 clients call Score through a
promotion of that model without a failed or mixed call, readiness never drops, and no copy is loaded again: the
new production model is the copy already loaded, the old one stays for the calls that pin it. Past --max-models the
least recently used model is unloaded from that Triton, while the server serves on."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest
from sqlalchemy import Engine

from cheems.v1 import reward_pb2_grpc, training_pb2
from services.bus.broker import EmbeddedBroker
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer
from services.store import lifecycle
from services.store.db import session_scope
from tests.services.scorer.models.following import (
    REQUESTS,
    Load,
    check_switch,
    model_info,
    promote,
    register,
    wait_for,
)

pytestmark = pytest.mark.slow


def test_switches_to_a_new_triton_under_load(
    broker: EmbeddedBroker,
    store: tuple[str, Engine],
    first: training_pb2.Model,
    checkpoints: dict[str, Path],
    expected: dict[str, list[list[float]]],
) -> None:
    url, engine = store
    with session_scope(engine) as session:
        lifecycle.promote(session, first.model_id, "person:test")
    config = ScorerConfig(
        follow=True,
        bootstrap=broker.bootstrap,
        db=url,
        backend="triton",
        grpc_port=0,
        http_port=-1,
        watch_seconds=0.2,
        max_models=2,
    )
    with ScorerServer(config) as server:
        port = server.grpc_port
        info = model_info(port)
        assert (info.model_id, info.backend) == (first.model_id, "triton")
        old_host = server.host
        assert old_host is not None and old_host.pid is not None
        triton_pid = old_host.pid
        two = register(engine, checkpoints["two"])
        pinned = REQUESTS[1].__deepcopy__()
        pinned.model = two.model_id  # named before it serves by default: a Triton of its own, loaded on demand
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = reward_pb2_grpc.RewardServiceStub(channel).Score(pinned, timeout=120)
        assert reply.model == two.model_id and list(reply.scores) == pytest.approx(expected["two"][1], abs=1e-4)
        loaded = model_info(port).models
        assert [(m.model_id, m.is_default) for m in loaded] == [(first.model_id, True), (two.model_id, False)]
        assert server.triton is not None and server.triton.pid == triton_pid  # one server, two models in it
        names = {m: served_as(server, m) for m in (first.model_id, two.model_id)}
        assert ready_in_triton(server) == set(names.values())
        with Load(port) as load:
            time.sleep(1.0)
            announced = time.monotonic()
            promote(engine, broker.bootstrap, two)
            assert wait_for(lambda: model_info(port).model_id == two.model_id, 120)
            switched = time.monotonic()
            # calls on the new model, however slow the machine (a fixed second saw none in a loaded CI run)
            assert wait_for(lambda: any(r.model == two.model_id and r.started > switched for r in load.replies), 60)
        scores = {first.model_id: expected["one"], two.model_id: expected["two"]}
        check_switch(load, scores, first.model_id, two.model_id, announced, switched)
        assert server.host is not None and server.host is not old_host and server.host.alive()
        assert server.host.pid == triton_pid, "the same tritonserver serves the new production model"
        assert ready_in_triton(server) == set(names.values()), "a model loaded twice, or the old one dropped"
        assert served_as(server, two.model_id) == names[two.model_id]  # the copy the pinned call loaded
        assert served_as(server, first.model_id) == names[first.model_id]  # kept for the calls pinning it

        third = register(engine, checkpoints["one"])  # a third model: past --max-models 2, the LRU one goes
        pinned.model = third.model_id
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = reward_pb2_grpc.RewardServiceStub(channel).Score(pinned, timeout=120)
        assert list(reply.scores) == pytest.approx(expected["one"][1], abs=1e-4)
        want = {names[two.model_id], served_as(server, third.model_id)}
        assert wait_for(lambda: ready_in_triton(server) == want, 30), ready_in_triton(server)
        assert server.triton.pid == triton_pid
        assert server.supervisor is not None and server.supervisor.restarts == 0


def served_as(server: ScorerServer, model_id: str) -> str:
    """The Triton name of a model the scorer serves."""
    assert server.shelf is not None
    with server.shelf.lease(model_id) as model:
        assert model.host is not None
        return str(model.host.name)


def ready_in_triton(server: ScorerServer) -> set[str]:
    """Of the models the scorer ever loaded, those its Triton reports ready (asked with Triton's own client)."""
    from tritonclient.grpc import InferenceServerClient

    assert server.triton is not None
    names = {f"{ScorerConfig().triton_model_name}-{n}" for n in range(1, 64)}
    with InferenceServerClient(server.triton.url) as client:
        return {name for name in names if client.is_model_ready(name)}
