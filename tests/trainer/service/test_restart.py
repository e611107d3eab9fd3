"""`cheems service training` killed (SIGKILL) while it trains, then started again (PostgreSQL store, real broker):
a run still alive is watched again, a run that died meanwhile is relaunched and resumes from its checkpoint,
and each model is registered and announced once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from cheems.roles import OPERATOR
from cheems.v1 import training_pb2, training_pb2_grpc
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.channels import open_channel
from services.store.accounts import add_account
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from tests.conftest import _postgres_schema
from tests.trainer.conftest import read_events, seed_sample
from trainer.service.launchers.local import alive, parse_handle

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

FAST = {"max_length": "128", "micro_batch_size": "8", "eval_files": ""}  # no evaluation: quicker
State = training_pb2.TrainingState


@pytest.fixture(scope="module")
def db_url() -> Iterator[str]:
    yield from _postgres_schema()


@pytest.fixture(scope="module")
def engine(db_url: str) -> Iterator[Engine]:
    upgrade(db_url)
    engine = create_engine_for(StoreConfig(db_url))
    seed_sample(engine, 0, 4)
    yield engine
    engine.dispose()


class ServiceProcess:
    """`cheems service training` in a process of its own, on a free port."""

    def __init__(self, db_url: str, bootstrap: str, data_dir: Path, model: Path) -> None:
        command = [sys.executable, "-m", "cheems_cli", "service", "training", "--db", db_url, "--bootstrap", bootstrap]
        command += ["--data-dir", str(data_dir), "--model", str(model), "--port", "0"]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.output: list[str] = []
        for line in self.process.stdout or []:
            self.output.append(line)
            if line.startswith("training: gRPC"):
                self.port = int(line.split(",")[0].rsplit(":", 1)[1])
                break
        else:
            raise AssertionError("the service did not start:\n" + "".join(self.output))
        with session_scope(create_engine_for(StoreConfig(db_url))) as session:  # an operator's token
            token = add_account(session, f"ops-{uuid.uuid4().hex[:6]}", OPERATOR)
        self.channel = open_channel(f"127.0.0.1:{self.port}", token=token)
        self.stub = training_pb2_grpc.TrainingServiceStub(self.channel)

    def get(self, training_id: str) -> Any:
        return self.stub.GetTraining(training_pb2.GetTrainingRequest(training_id=training_id))

    def close(self, sig: int = signal.SIGTERM) -> int:
        self.channel.close()
        self.process.send_signal(sig)
        code = self.process.wait(30)
        self.output += (self.process.stdout.read() if self.process.stdout else "").splitlines(keepends=True)
        return code


def wait_for(check: Any, timeout: float = 150.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.3)
    raise AssertionError(f"not within {timeout} s")


def test_a_restarted_service_reattaches_and_relaunches(
    engine: Engine, db_url: str, broker: EmbeddedBroker, tiny_model: Path, tmp_path: Path
) -> None:
    first = ServiceProcess(db_url, broker.bootstrap, tmp_path, tiny_model)
    try:
        # the run that will die: a checkpoint every other step, killed after the first one
        dying = first.stub.StartTraining(
            training_pb2.StartTrainingRequest(
                dataset_recipe="human", overrides={**FAST, "epochs": "6", "save_every": "2"}
            )
        )
        wait_for(lambda: first.get(dying.training_id).step >= 3)
        # frozen at once, so that it cannot finish while the service is killed on a busy machine
        os.killpg(parse_handle(_handle(engine, dying.training_id))[0], signal.SIGSTOP)
        living = first.stub.StartTraining(
            training_pb2.StartTrainingRequest(dataset_recipe="human", overrides={**FAST, "epochs": "1"})
        )
        assert first.close(signal.SIGKILL) == -signal.SIGKILL
    except BaseException:
        first.close(signal.SIGKILL)
        raise
    dying_handle = _handle(engine, dying.training_id)
    living_handle = _handle(engine, living.training_id)
    assert alive(living_handle), "the run outlives the service that started it"
    os.killpg(parse_handle(dying_handle)[0], signal.SIGKILL)
    wait_for(lambda: not alive(dying_handle), 10)

    second = ServiceProcess(db_url, broker.bootstrap, tmp_path, tiny_model)
    try:
        ended = [wait_for(lambda t=t: (x := second.get(t.training_id)).state != State.TRAINING_STATE_RUNNING and x)
                 for t in (living, dying)]  # fmt: skip
        for training in ended:
            assert training.state == State.TRAINING_STATE_SUCCEEDED, training.error
        models = second.stub.ListModels(training_pb2.ListModelsRequest()).models
        assert sorted(m.model_id for m in models) == sorted(t.model_id for t in ended)
    finally:
        assert second.close() == 0, "".join(second.output)
    events = read_events(broker.bootstrap, topics.MODELS, want=2)
    assert sorted(e.model.model_id for e in events) == sorted(t.model_id for t in ended)  # each once
    out = Path(ended[1].out_dir)
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps.count(1) == 1 and steps[-1] == ended[1].total_steps, steps  # resumed, not restarted
    assert "resumed from" in (out / "train.log").read_text()


def _handle(engine: Engine, training_id: str) -> str:
    from services.store import registry
    from services.store.db import session_scope

    with session_scope(engine) as s:
        handle = registry.get_training(s, training_id).handle
    assert handle
    return handle
