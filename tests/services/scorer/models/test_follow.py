"""`cheems serve --follow` on the torch backend, with the real broker and store: the default model is the
registry's production model. The scorer switches to each promoted model under load without a failed or mixed
call (the old one kept loaded for the calls pinning it), ignores registrations (candidates are served only to
calls naming them), keeps serving through a broken production model, serves pinned calls while there is no
production model yet, and a scorer killed during a switch comes back with the production model."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from sqlalchemy import Engine

from cheems.processes.ports import free_port
from cheems.v1 import reward_pb2_grpc, training_pb2
from services.bus.broker import EmbeddedBroker
from services.scorer.config import ScorerConfig
from services.scorer.models.loading import load_first
from services.scorer.runtime import ScorerServer
from services.store import lifecycle
from services.store.db import session_scope
from tests.services.scorer.models.following import (
    REQUESTS,
    Load,
    announce,
    check_switch,
    model_info,
    promote,
    register,
    serving,
    wait_for,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def following(
    broker: EmbeddedBroker, store: tuple[str, Engine], first: training_pb2.Model, expected: object
) -> Iterator[ScorerServer]:
    """`cheems serve --follow --db URL --backend torch --prefix-sharing off`, in process, started from the
    registry's production model (sharing off: not the default, so a model loaded later shows whether it kept
    the setting)."""
    with session_scope(store[1]) as session:
        lifecycle.promote(session, first.model_id, "person:test")
    config = ScorerConfig(
        follow=True,
        bootstrap=broker.bootstrap,
        db=store[0],
        backend="torch",
        grpc_port=0,
        http_port=-1,
        prefix_sharing=False,
    )
    with ScorerServer(config) as server:
        yield server


def test_switches_under_load_without_a_failed_or_mixed_call(
    following: ScorerServer,
    broker: EmbeddedBroker,
    store: tuple[str, Engine],
    first: training_pb2.Model,
    checkpoints: dict[str, Path],
    expected: dict[str, list[list[float]]],
) -> None:
    port = following.grpc_port
    info = model_info(port)
    assert (info.model_id, info.name, info.backend, info.follow_error) == (
        first.model_id,
        checkpoints["one"].name,
        "torch",
        "",
    ), "started from the registry's production model"
    old = following.models.current
    two = register(store[1], checkpoints["two"])
    announce(broker.bootstrap, two)  # registered: a candidate, not served by default
    with Load(port) as load:
        time.sleep(1.0)
        assert model_info(port).model_id == first.model_id
        announced = time.monotonic()
        promote(store[1], broker.bootstrap, two)
        assert wait_for(lambda: model_info(port).model_id == two.model_id, 60)
        switched = time.monotonic()
        # calls on the new model, however slow the machine (a fixed second saw none in a loaded CI run)
        assert wait_for(lambda: any(r.model == two.model_id and r.started > switched for r in load.replies), 60)
    scores = {first.model_id: expected["one"], two.model_id: expected["two"]}
    check_switch(load, scores, first.model_id, two.model_id, announced, switched)
    info = model_info(port)
    assert (info.model_id, info.name) == (two.model_id, checkpoints["two"].name)
    assert str(checkpoints["two"]) not in str(info)  # no server path in what any scorer-client reads
    assert info.prefix_sharing is False and following.backend is not None
    assert following.backend.prefix_sharing is False, "the followed model lost --prefix-sharing off"
    # the old production model stays loaded, the same copy, for the calls that pinned it (an RLHF run)
    assert old is not None and not old.closed and following.shelf is not None
    assert following.shelf.held(first.model_id) is old
    listed = [(m.model_id, m.is_default) for m in model_info(port).models]
    assert listed == [(two.model_id, True), (first.model_id, False)]


def test_a_broken_production_model_leaves_the_current_one_serving(
    following: ScorerServer,
    broker: EmbeddedBroker,
    store: tuple[str, Engine],
    checkpoints: dict[str, Path],
    expected: dict[str, list[list[float]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    port, engine = following.grpc_port, store[1]
    caplog.set_level(logging.INFO, logger="services.scorer.models.follow")
    current = model_info(port)
    broken = register(engine, checkpoints["broken"])
    promote(engine, broker.bootstrap, broken)
    assert wait_for(lambda: model_info(port).follow_error, 30)
    info = model_info(port)
    assert info.model_id == current.model_id and broken.model_id in info.follow_error
    assert str(checkpoints["broken"]) not in info.follow_error  # the path is in the log only
    assert str(checkpoints["broken"]) in caplog.text
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = reward_pb2_grpc.RewardServiceStub(channel).Score(REQUESTS[0], timeout=30)
    assert reply.model == current.model_id
    name = current.name
    assert list(reply.scores) == pytest.approx(expected["two" if name == "two" else "one"][0], abs=1e-4)
    time.sleep(6)  # a reconciliation with the registry passes: the broken model is not loaded again
    assert caplog.text.count(f"model {broken.model_id} is production: loading") == 1
    model, why = load_first(following.config)  # a restart now serves no default model, and says why
    assert model is None and broken.model_id in why
    newest = register(engine, checkpoints["one"])  # the next promotion is tried as usual
    promote(engine, broker.bootstrap, newest)
    assert wait_for(lambda: model_info(port).model_id == newest.model_id, 30)
    assert model_info(port).follow_error == ""


def test_a_forged_model_event_changes_nothing_served_and_a_real_promotion_still_switches(
    following: ScorerServer,
    broker: EmbeddedBroker,
    store: tuple[str, Engine],
    checkpoints: dict[str, Path],
    expected: dict[str, list[list[float]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Any service that may write to the models topic could send these: the scorer checks each in the registry."""
    port, engine = following.grpc_port, store[1]
    caplog.set_level(logging.INFO, logger="services.scorer.models.follow")
    current = model_info(port)
    scores = expected["two" if current.name == "two" else "one"]
    other = checkpoints["one" if current.name == "two" else "two"]  # a checkpoint the scorer does not serve
    assert following.follower is not None
    switches = following.follower.switches
    candidate = register(engine, other)  # registered, never promoted
    forged = {
        "an unknown model": training_pb2.Model(model_id="rm-forged", path=str(other)),
        "a candidate": candidate,
        "production's id with another path": training_pb2.Model(model_id=current.model_id, path=str(other)),
    }
    for model in forged.values():
        announce(broker.bootstrap, model, training_pb2.ModelChange(action="promoted", to_state="production"))

    def counted(result: str) -> float:
        value = following.metrics.registry.get_sample_value("cheems_scorer_follow_events_total", {"result": result})
        return value or 0.0

    assert wait_for(lambda: counted("refused") >= 3 or following.follower.switches != switches, 30)
    assert following.follower.switches == switches, "a forged event switched the default model"
    assert counted("refused") == 3
    for _ in range(3):  # and nothing switches later either (a reconciliation passes meanwhile)
        assert (model_info(port).model_id, following.follower.switches) == (current.model_id, switches)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = reward_pb2_grpc.RewardServiceStub(channel).Score(REQUESTS[1], timeout=30)
        assert (reply.model, list(reply.scores)) == (current.model_id, pytest.approx(scores[1], abs=1e-4))
        time.sleep(2)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for model_id in ("rm-forged", candidate.model_id, current.model_id):
        assert any(repr(model_id) in line for line in warned), (model_id, warned)
    assert any("production alias does not point at it" in line for line in warned)
    assert any("is not the registry's path" in line for line in warned)
    applied = counted("applied")
    promote(engine, broker.bootstrap, candidate)  # the real step: the registry and its event agree
    assert wait_for(lambda: model_info(port).model_id == candidate.model_id, 60)
    assert wait_for(lambda: counted("applied") > applied, 30) and counted("refused") == 3


class Serve:
    """`cheems -v serve ...` as a process; its log is read as it comes (kept in `log`), and `kill_on(text)`
    SIGKILLs it the moment a line with `text` is logged."""

    def __init__(self, *args: str) -> None:
        command = [sys.executable, "-m", "cheems_cli", "-v", "serve", *args]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        self.trigger = ""
        self.killed = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        line = self.process.stdout.readline() if self.process.stdout else ""
        assert line.startswith("serving:"), (line, "".join(self.log[-30:]))

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line)
            if self.trigger and self.trigger in line:
                self.kill()
                self.killed.set()

    def logged(self, text: str) -> bool:
        return any(text in line for line in self.log)

    def kill_on(self, text: str) -> None:
        self.trigger = text

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_before_any_production_model_and_killed_during_a_switch_it_restarts_on_production(
    broker: EmbeddedBroker,
    engine: Engine,
    db_url: str,
    checkpoints: dict[str, Path],
    expected: dict[str, list[list[float]]],
) -> None:
    port = free_port()
    args = ["--follow", "--db", db_url, "--bootstrap", broker.bootstrap, "--backend", "torch"]
    args += ["--grpc-port", str(port), "--http-port", "-1"]
    scorer = Serve(*args)
    try:
        assert serving(port) and model_info(port).model_id == "", "no production model: ready for pinned calls"
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel, pytest.raises(grpc.RpcError) as info:
            reward_pb2_grpc.RewardServiceStub(channel).Score(REQUESTS[0], timeout=10)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE and "no production model yet" in str(
            info.value.details()
        )
        one = register(engine, checkpoints["one"])
        pinned = REQUESTS[0].__deepcopy__()
        pinned.model = one.model_id
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            # the pinned model loads on this first call (tokenizer, weights, tokenizer pool): minutes on a loaded host
            assert reward_pb2_grpc.RewardServiceStub(channel).Score(pinned, timeout=180).model == one.model_id
        promote(engine, broker.bootstrap, one)
        assert wait_for(lambda: model_info(port).model_id == one.model_id, 60)
        two = register(engine, checkpoints["two"])
        scorer.kill_on(f"model {two.model_id} is production: loading")
        promote(engine, broker.bootstrap, two)
        assert scorer.killed.wait(30), scorer.log[-20:]
        assert not scorer.logged(f"now serving model {two.model_id}"), "killed after the switch, not during it"
        scorer = Serve(*args)
        info = model_info(port)
        assert (info.model_id, info.name) == (two.model_id, checkpoints["two"].name)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = reward_pb2_grpc.RewardServiceStub(channel).Score(REQUESTS[1], timeout=30)
        assert reply.model == two.model_id
        assert list(reply.scores) == pytest.approx(expected["two"][1], abs=1e-4)
    finally:
        scorer.kill()
