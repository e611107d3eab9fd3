"""The model lifecycle through the training service's gRPC API (SQLite and PostgreSQL), each step's ModelEvent
relayed from the outbox to the real broker."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import Engine

from cheems.roles import ADMIN
from cheems.v1 import training_pb2, training_pb2_grpc
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.bus.relay import EventRelay
from services.channels import open_channel
from services.hosting import HostConfig
from services.store.accounts import AccountBook
from services.store.outbox import StoreOutbox
from tests.trainer.conftest import read_events
from trainer.service.config import TrainingConfig
from trainer.service.launchers.local import LocalLauncher
from trainer.service.server import host
from trainer.service.trainings import TrainingService

Code = grpc.StatusCode


@pytest.fixture
def stub(
    engine: Engine, tmp_path: Path, account: Callable[[str, str], str], tiny_checkpoint: Callable[..., Path]
) -> Iterator[Any]:
    """The service's stub on the channel of ann, an admin; models are registered from the tiny checkpoints' folder."""
    roots = (str(tiny_checkpoint().parent),)
    service = TrainingService(engine, TrainingConfig(data_dir=str(tmp_path), model_roots=roots), LocalLauncher())
    grpc_host = host(service, HostConfig(port=0), AccountBook(engine)).start()
    try:
        with open_channel(f"127.0.0.1:{grpc_host.port}", token=account("ann", ADMIN)) as channel:
            yield training_pb2_grpc.TrainingServiceStub(channel)
    finally:
        grpc_host.stop()
        service.close()


def refused(call: Callable[[], Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value


def test_register_promote_rollback_reject_over_grpc_each_step_announced(
    stub: Any, engine: Engine, broker: EmbeddedBroker, tiny_checkpoint: Callable[..., Path], tmp_path: Path
) -> None:
    path, a_id, b_id = str(tiny_checkpoint()), f"rm-a-{uuid.uuid4().hex[:6]}", f"rm-b-{uuid.uuid4().hex[:6]}"
    a = stub.RegisterModel(training_pb2.RegisterModelRequest(path=path, model_id=a_id, actor="ann"), timeout=60)
    assert (a.model_id, a.state, a.source, list(a.aliases), a.path) == (a_id, "candidate", "registered", [], path)
    stub.RegisterModel(training_pb2.RegisterModelRequest(path=path, model_id=b_id), timeout=60)

    bad = [
        (training_pb2.RegisterModelRequest(path=str(tmp_path / "nowhere")), Code.INVALID_ARGUMENT, "not a directory"),
        (training_pb2.RegisterModelRequest(path="/etc"), Code.INVALID_ARGUMENT, "outside the folders"),
        (training_pb2.RegisterModelRequest(path=f"{path}/../../.."), Code.INVALID_ARGUMENT, "outside the folders"),
        (training_pb2.RegisterModelRequest(path=path, model_id="production"), Code.INVALID_ARGUMENT, "alias"),
        (training_pb2.RegisterModelRequest(path=path, model_id=a_id), Code.FAILED_PRECONDITION, "already"),
    ]
    for request, code, words in bad:
        error = refused(lambda r=request: stub.RegisterModel(r, timeout=60))  # type: ignore[misc]
        assert error.code() == code and words in error.details()
    assert [m.model_id for m in stub.ListModels(training_pb2.ListModelsRequest()).models] == [b_id, a_id]

    promoted = stub.PromoteModel(training_pb2.PromoteModelRequest(model_id=a_id, actor="ann", reason="first"))
    assert [(c.model_id, c.action, c.actor) for c in promoted.changes] == [(a_id, "promoted", "person:ann")]
    assert promoted.production == a_id
    second = stub.PromoteModel(training_pb2.PromoteModelRequest(model_id=b_id, actor="policy:auto"))  # ignored
    assert {c.actor for c in second.changes} == {"person:ann"}  # the caller, whatever the request says
    assert [(c.model_id, c.to_state) for c in second.changes] == [(a_id, "evaluated"), (b_id, "production")]
    back = stub.RollbackModel(training_pb2.RollbackModelRequest(actor="ann", reason="rewards drifted"))
    assert back.production == a_id and back.changes[-1].reason == "rewards drifted"

    error = refused(lambda: stub.RejectModel(training_pb2.RejectModelRequest(model_id=a_id, reason="x")))
    assert error.code() == Code.FAILED_PRECONDITION and "is production" in error.details()
    error = refused(lambda: stub.RejectModel(training_pb2.RejectModelRequest(model_id=b_id)))
    assert error.code() == Code.INVALID_ARGUMENT and "reason" in error.details()
    stub.RejectModel(training_pb2.RejectModelRequest(model_id=b_id, actor="ann", reason="long answers win"))
    error = refused(lambda: stub.PromoteModel(training_pb2.PromoteModelRequest(model_id=b_id)))
    assert error.code() == Code.FAILED_PRECONDITION and "force" in error.details()
    error = refused(lambda: stub.PromoteModel(training_pb2.PromoteModelRequest(model_id="rm-nobody")))
    assert error.code() == Code.NOT_FOUND and "rm-nobody" in error.details()
    models = {m.model_id: m for m in stub.ListModels(training_pb2.ListModelsRequest()).models}
    assert (models[a_id].state, list(models[a_id].aliases)) == ("production", ["production"])
    assert (models[b_id].state, list(models[b_id].aliases)) == ("rejected", [])

    publisher = Publisher(broker.bootstrap)
    try:
        EventRelay(StoreOutbox(engine), publisher).drain()
    finally:
        publisher.close()
    events = [e for e in read_events(broker.bootstrap, topics.MODELS, want=8) if e.model.model_id in models]
    steps = {m: [(e.change.action, e.model.state) for e in events if e.model.model_id == m] for m in models}
    assert steps == {  # one partition per key: each model's steps in order
        a_id: [
            ("registered", "candidate"),
            ("promoted", "production"),
            ("demoted", "evaluated"),
            ("rolled_back", "production"),
        ],
        b_id: [
            ("registered", "candidate"),
            ("promoted", "production"),
            ("demoted", "evaluated"),
            ("rejected", "rejected"),
        ],
    }
    last = (
        events[-1]
        if events[-1].model.model_id == b_id
        else next(e for e in reversed(events) if e.model.model_id == b_id)
    )
    assert (last.change.reason, last.change.actor, json.loads(last.change.details_json)) == (
        "long answers win",
        "person:ann",
        {},
    )
    assert list(next(e for e in reversed(events) if e.model.model_id == a_id).model.aliases) == ["production"]


HUGE = "m" * 10_000


@pytest.mark.parametrize(
    ("method", "request_"),
    [
        ("GetTraining", training_pb2.GetTrainingRequest(training_id="a\x00b")),
        ("GetTraining", training_pb2.GetTrainingRequest(training_id=HUGE)),
        ("CancelTraining", training_pb2.CancelTrainingRequest(training_id="a\x00b")),
        ("PromoteModel", training_pb2.PromoteModelRequest(model_id="a\x00b", reason="r")),
        ("PromoteModel", training_pb2.PromoteModelRequest(model_id=HUGE, reason="r")),
        ("RejectModel", training_pb2.RejectModelRequest(model_id="a\x00b", reason="r")),
        ("StartTraining", training_pb2.StartTrainingRequest(dataset_id="a\x00b")),
    ],
    ids=["get-nul", "get-huge", "cancel-nul", "promote-nul", "promote-huge", "reject-nul", "start-nul"],
)
def test_an_id_the_store_cannot_hold_is_invalid_argument(stub: Any, method: str, request_: Any) -> None:
    """A NUL (PostgreSQL cannot compare it: it was UNKNOWN there) or an id longer than any stored one, named and
    shown in part; the service serves on."""
    with pytest.raises(grpc.RpcError) as refused:
        getattr(stub, method)(request_, timeout=30)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    assert len(refused.value.details() or "") < 400
    assert stub.ListModels(training_pb2.ListModelsRequest(), timeout=30) is not None
