"""`cheems serve --follow` on Triton: a model a call names is loaded on demand in a Triton of its own and scores
exactly as in process; a promoted model gets a Triton of its own, started beside the one serving;
8 clients call Score through the switch without a failed or mixed call, readiness never drops, and the old
Triton is stopped (no process left) once its last call is done."""

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
from services.scorer.triton import processes
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
        follow=True, bootstrap=broker.bootstrap, db=url, backend="triton", grpc_port=0, http_port=-1, watch_seconds=0.2
    )
    with ScorerServer(config) as server:
        port = server.grpc_port
        info = model_info(port)
        assert (info.model_id, info.backend) == (first.model_id, "triton")
        old_host = server.host
        assert old_host is not None and old_host.pid is not None
        old_tree = processes.tree(old_host.pid)
        two = register(engine, checkpoints["two"])
        pinned = REQUESTS[1].__deepcopy__()
        pinned.model = two.model_id  # named before it serves by default: a Triton of its own, loaded on demand
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = reward_pb2_grpc.RewardServiceStub(channel).Score(pinned, timeout=120)
        assert reply.model == two.model_id and list(reply.scores) == pytest.approx(expected["two"][1], abs=1e-4)
        loaded = model_info(port).models
        assert [(m.model_id, m.is_default) for m in loaded] == [(first.model_id, True), (two.model_id, False)]
        with Load(port) as load:
            time.sleep(1.0)
            announced = time.monotonic()
            promote(engine, broker.bootstrap, two)
            assert wait_for(lambda: model_info(port).model_id == two.model_id, 120)
            switched = time.monotonic()
            time.sleep(1.0)
        scores = {first.model_id: expected["one"], two.model_id: expected["two"]}
        check_switch(load, scores, first.model_id, two.model_id, announced, switched)
        assert server.host is not None and server.host is not old_host and server.host.alive()
        assert wait_for(lambda: not [p for p in old_tree if processes.alive(p)], 30), "the old Triton lives on"
        assert server.supervisor is not None and server.supervisor.restarts == 0
