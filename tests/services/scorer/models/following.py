"""Helpers of the `--follow` tests: models registered in the store and announced on the models topic,
the scores each model gives, and clients calling Score through a switch."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import Engine

from cheems.v1 import events_pb2, reward_pb2, reward_pb2_grpc, training_pb2
from services.bus.client import Publisher
from services.bus.topics import MODELS
from services.scorer.config import ScorerConfig
from services.scorer.models.loading import load_served
from services.scorer.models.served import ModelRef, ModelSlot
from services.scorer.service import ScoreArgs, Scorer
from services.scorer.telemetry import ScorerMetrics
from services.store import lifecycle, registry
from services.store.db import session_scope

DATASET = "d" * 64
REQUESTS = [
    reward_pb2.ScoreRequest(prompt="你好", responses=["你好！有什么可以帮你？", "滚"]),
    reward_pb2.ScoreRequest(prompt="写一句关于春天的诗。", responses=["春风又绿江南岸。", "不知道。", "春天来了"]),
]


def register(engine: Engine, path: Path | str) -> training_pb2.Model:
    """A training that registered the model at `path`, as the training service records it."""
    with session_scope(engine) as session:
        registry.add_dataset(session, DATASET, "human", "data.jsonl", 1, 1, 1)
        training = registry.create_training(session, DATASET, "tiny-cpu", {}, "local", "out/{id}")
        model, _ = registry.register_model(session, training.id, str(path), None)
        created = Timestamp()
        created.FromDatetime(model.created_at)
        return training_pb2.Model(
            model_id=model.id,
            path=model.path,
            dataset_id=model.dataset_id,
            recipe=model.recipe,
            dataset_recipe=model.dataset_recipe,
            training_id=model.training_id,
            created_at=created,
        )


def announce(bootstrap: str, model: training_pb2.Model, change: training_pb2.ModelChange | None = None) -> None:
    """The ModelEvent the training service publishes once a model is registered (or a lifecycle step's)."""
    publisher = Publisher(bootstrap)
    try:
        publisher.publish(MODELS, model.model_id, events_pb2.ModelEvent(model=model, change=change))
        publisher.flush()
    finally:
        publisher.close()


def promote(engine: Engine, bootstrap: str, model: training_pb2.Model) -> None:
    """A promotion recorded in the store and announced, as `cheems models promote` and the outbox relay do."""
    with session_scope(engine) as session:
        lifecycle.promote(session, model.model_id, "person:test")
    if bootstrap:
        announce(bootstrap, model, training_pb2.ModelChange(action="promoted", to_state="production"))


def expected_scores(paths: dict[str, Path]) -> dict[str, list[list[float]]]:
    """{name: the scores of REQUESTS by the model at paths[name]}, computed in process (torch)."""
    expected, previous = {}, None
    for name, path in paths.items():
        config = ScorerConfig(model=str(path), backend="torch")
        model = load_served(config, ModelRef(name, str(path)), previous=previous)
        scorer = Scorer(config, ModelSlot(model), ScorerMetrics())
        expected[name] = [scorer.score(ScoreArgs(r.prompt, list(r.responses))).scores for r in REQUESTS]
        previous = model
    return expected


def wait_for(condition: Callable[[], object], seconds: float, every: float = 0.05) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(every)
    return False


def model_info(port: int) -> reward_pb2.ModelInfo:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return reward_pb2_grpc.RewardServiceStub(channel).GetModelInfo(reward_pb2.ModelInfoRequest(), timeout=10)


def serving(port: int) -> bool:
    """Readiness, as a probe sees it."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status
    return bool(status == health_pb2.HealthCheckResponse.SERVING)


@dataclass
class Reply:
    thread: int
    started: float
    ended: float
    request: int
    model: str
    scores: list[float]


@dataclass
class Load:
    """`clients` threads calling Score back to back, and a watcher of readiness, until `stop`."""

    port: int
    clients: int = 8
    replies: list[Reply] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    not_serving: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Load:
        channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self._threads = [threading.Thread(target=self._client, args=(i, channel)) for i in range(self.clients)]
        self._threads.append(threading.Thread(target=self._watch, args=(channel,)))
        for t in self._threads:
            t.start()
        return self

    def _client(self, thread: int, channel: grpc.Channel) -> None:
        stub = reward_pb2_grpc.RewardServiceStub(channel)
        i = thread
        while not self._stop.is_set():
            i += 1
            started = time.monotonic()
            try:
                reply = stub.Score(REQUESTS[i % len(REQUESTS)], timeout=30)
            except grpc.RpcError as e:
                self.failures.append(f"{e.code().name}: {e.details()}")
                continue
            ended = time.monotonic()
            self.replies.append(Reply(thread, started, ended, i % len(REQUESTS), reply.model, list(reply.scores)))

    def _watch(self, channel: grpc.Channel) -> None:
        stub = health_pb2_grpc.HealthStub(channel)
        while not self._stop.wait(0.05):
            status = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status
            if status != health_pb2.HealthCheckResponse.SERVING:
                self.not_serving.append(time.monotonic())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in self._threads), "a client hung"


def check_switch(
    load: Load, expected: dict[str, list[list[float]]], first: str, second: str, announced: float, switched: float
) -> None:
    """No call failed, readiness never dropped, every reply scored by the model it names, and each client saw
    `first` then `second`, never back: replies that ended before the announcement name `first`, those that
    started after the switch was seen name `second`."""
    assert not load.failures, load.failures[:5]
    assert not load.not_serving, "readiness dropped during the switch"
    for reply in load.replies:
        assert reply.model in (first, second), reply.model
        assert reply.scores == pytest.approx(expected[reply.model][reply.request], abs=1e-4), reply
    for thread in range(load.clients):
        models = [r.model for r in sorted(load.replies, key=lambda r: r.started) if r.thread == thread]
        assert models == sorted(models, key=[first, second].index), f"client {thread} went back to {first}"
    assert all(r.model == first for r in load.replies if r.ended < announced)
    assert all(r.model == second for r in load.replies if r.started > switched)
    counts = {m: sum(r.model == m for r in load.replies) for m in (first, second)}
    assert counts[first] > 0 and counts[second] > 0, counts
