"""The training service over gRPC with the local launcher: a real tiny training, progress, the registered model
and its ModelEvent on the real broker (a dataset's DatasetEvent too); cancelling; bad requests store nothing;
training on its own."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from sqlalchemy import Engine

from cheems.roles import OPERATOR
from cheems.v1 import events_pb2, training_pb2, training_pb2_grpc
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.channels import open_channel
from services.hosting import HostConfig
from services.store import lifecycle, registry
from services.store.accounts import AccountBook
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from tests.services.accounts import account
from tests.trainer.conftest import SAMPLE_HUMAN, read_events, seed_sample
from trainer.datasets.build import NoSupervisor
from trainer.service.auto import AutoTrainer
from trainer.service.config import TrainingConfig
from trainer.service.launchers.local import LocalLauncher, alive
from trainer.service.server import host
from trainer.service.trainings import TrainingService

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

FAST = {"epochs": "1", "max_length": "128", "micro_batch_size": "8"}
State = training_pb2.TrainingState


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """One SQLite store for the module (the restart test runs on PostgreSQL)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'cheems.db'}"
    upgrade(url)
    engine = create_engine_for(StoreConfig(url))
    seed_sample(engine, 0, 4)
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
def small_bench(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Three prompts of the sample's human subset: an evaluation during training that takes a moment."""
    path = tmp_path_factory.mktemp("bench") / "human.jsonl"
    path.write_text("".join(SAMPLE_HUMAN.read_text(encoding="utf-8").splitlines(keepends=True)[:3]), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def service(
    engine: Engine, broker: EmbeddedBroker, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory, small_bench: str
) -> Iterator[TrainingService]:
    """The service, its bench root the small bench's folder (a request names bench files under it)."""
    data, bench_root = str(tmp_path_factory.mktemp("data")), str(Path(small_bench).parent)
    config = TrainingConfig(data_dir=data, model=str(tiny_model), poll_seconds=0.3, bench_root=bench_root)
    service = TrainingService(engine, config, LocalLauncher(grace=5), Publisher(broker.bootstrap))
    yield service
    service.close()
    for training in service.active():
        if training.handle:
            service.launcher.stop(training.handle)


@pytest.fixture(scope="module")
def stub(service: TrainingService, engine: Engine) -> Iterator[Any]:
    """The service's stub on the channel of an operator, ops."""
    grpc_host = host(service, HostConfig(port=0), AccountBook(engine)).start()
    with open_channel(f"127.0.0.1:{grpc_host.port}", token=account(engine, "ops", OPERATOR)) as channel:
        yield training_pb2_grpc.TrainingServiceStub(channel)
    grpc_host.stop(0)


def wait_for(check: Callable[[], Any], timeout: float = 120.0, every: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s")


def test_start_training_trains_records_progress_and_registers_the_model(
    stub: Any, service: TrainingService, broker: EmbeddedBroker, small_bench: str
) -> None:
    overrides = {**FAST, "eval_files": Path(small_bench).name}  # a name under the service's bench root
    started = stub.StartTraining(training_pb2.StartTrainingRequest(dataset_recipe="human", overrides=overrides))
    assert started.state == State.TRAINING_STATE_RUNNING and started.launcher == "local"
    assert started.requested_by == "person:ops"  # the caller's account
    assert started.out_dir == str(service.data_dir / "trainings" / started.training_id)
    assert started.overrides["eval_files"] == f'["{Path(small_bench).resolve()}"]'  # the service's path of the name
    request = training_pb2.GetTrainingRequest(training_id=started.training_id)
    done = wait_for(lambda: (t := stub.GetTraining(request)).state != State.TRAINING_STATE_RUNNING and t)
    assert done.state == State.TRAINING_STATE_SUCCEEDED, done.error
    assert done.step == done.total_steps > 0 and done.HasField("loss") and done.HasField("overall")
    assert done.model_id == f"rm-{done.training_id}"
    (model,) = stub.ListModels(training_pb2.ListModelsRequest()).models
    assert (model.model_id, model.path) == (done.model_id, f"{done.out_dir}/model")
    assert model.overall == pytest.approx(done.overall) and model.dataset_recipe == "human"
    dataset = stub.ListDatasets(training_pb2.ListDatasetsRequest()).datasets[0]
    assert (dataset.dataset_id, dataset.prompts, dataset.rankings) == (done.dataset_id, 4, 4)
    events = [e for e in read_events(broker.bootstrap, topics.MODELS) if e.model.model_id == model.model_id]
    assert len(events) == 1 and isinstance(events[0], events_pb2.ModelEvent)
    assert events[0].model.path == model.path and events[0].header.producer == "training"
    board = str((Path(done.out_dir) / "tensorboard").resolve())  # report_to's default: TensorBoard in OUT/tensorboard
    with session_scope(service.engine) as session:  # the store keeps where the training was reported
        assert registry.get_training(session, done.training_id).tracking == {"tensorboard": board}
        assert registry.get_model(session, done.model_id).tracking == {"tensorboard": board}


def test_cancel_stops_the_process_group(stub: Any, service: TrainingService) -> None:
    slow = {**FAST, "epochs": "1000"}
    started = stub.StartTraining(training_pb2.StartTrainingRequest(dataset_recipe="human", overrides=slow))
    handle = service.get_training(started.training_id).handle
    assert handle and alive(handle)
    cancelled = stub.CancelTraining(training_pb2.CancelTrainingRequest(training_id=started.training_id))
    assert cancelled.state == State.TRAINING_STATE_CANCELLED and not alive(handle)
    with pytest.raises(grpc.RpcError) as error:
        stub.CancelTraining(training_pb2.CancelTrainingRequest(training_id=started.training_id))
    assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    time.sleep(1.0)  # a few monitor polls: the killed run is not made a failure or a model
    after = service.get_training(started.training_id)
    assert (after.state, after.model_id) == ("cancelled", None)


def test_a_failed_run_records_the_end_of_its_log(stub: Any, engine: Engine) -> None:
    """A registered base model (`base_model`, resolved to its path at launch) whose directory has gone."""
    with session_scope(engine) as session:
        lifecycle.register_checkpoint(session, "/nonexistent/rm", "rm-gone", "person:ops")
    request = training_pb2.StartTrainingRequest(dataset_recipe="human", overrides={"base_model": "rm-gone"})
    started = stub.StartTraining(request)
    assert started.overrides["base_model"] == "rm-gone"
    get = training_pb2.GetTrainingRequest(training_id=started.training_id)
    failed = wait_for(lambda: (t := stub.GetTraining(get)).state != State.TRAINING_STATE_RUNNING and t, 60)
    assert failed.state == State.TRAINING_STATE_FAILED and not failed.model_id
    assert failed.error.startswith("cheems train exited with status 2:\n") and "/nonexistent/rm" in failed.error


@pytest.mark.parametrize(
    ("request_fields", "code", "message"),
    [
        ({"recipe": "gpt-5"}, grpc.StatusCode.INVALID_ARGUMENT, "unknown recipe 'gpt-5'"),
        ({"overrides": {"epoch": "1"}}, grpc.StatusCode.INVALID_ARGUMENT, "overrides: epoch is not a training knob"),
        ({"overrides": {"epochs": "many"}}, grpc.StatusCode.INVALID_ARGUMENT, "not a valid float"),
        ({"overrides": {"lora_rank": "-1"}}, grpc.StatusCode.INVALID_ARGUMENT, "overrides: lora_rank must be >= 0"),
        ({"overrides": {"out_dir": "/tmp/x"}}, grpc.StatusCode.INVALID_ARGUMENT, "overrides: out_dir is not"),
        # the row 6: an operator's own directory as the model, and its Python run by trust_remote_code
        (
            {"overrides": {"epochs": "1", "trust_remote_code": "true"}},
            grpc.StatusCode.INVALID_ARGUMENT,
            "overrides: trust_remote_code is not a training knob an operator may set",
        ),
        (
            {"overrides": {"model": "/tmp/mine"}},
            grpc.StatusCode.INVALID_ARGUMENT,
            "overrides: model is not a training knob an operator may set",
        ),
        ({"overrides": {"token_cache": "/tmp/c"}}, grpc.StatusCode.INVALID_ARGUMENT, "overrides: token_cache is not"),
        ({"overrides": {"train_files": "/etc/passwd"}}, grpc.StatusCode.INVALID_ARGUMENT, "overrides: train_files"),
        ({"overrides": {"eval_files": "/etc/passwd"}}, grpc.StatusCode.INVALID_ARGUMENT, "overrides: eval_files[0]"),
        ({"overrides": {"eval_files": '["../../x.jsonl"]'}}, grpc.StatusCode.INVALID_ARGUMENT, "eval_files[0]"),
        (
            {"overrides": {"base_model": "/tmp/mine"}},
            grpc.StatusCode.INVALID_ARGUMENT,
            "overrides: base_model '/tmp/mine' is no registered model",
        ),
        ({"dataset_recipe": "ai"}, grpc.StatusCode.INVALID_ARGUMENT, "no preference pair"),
        ({"dataset_recipe": "humans"}, grpc.StatusCode.INVALID_ARGUMENT, "dataset recipe 'humans' is unknown"),
        ({"dataset_id": "f" * 64}, grpc.StatusCode.NOT_FOUND, "no dataset"),
    ],
)
def test_bad_requests_store_nothing(
    stub: Any, service: TrainingService, request_fields: dict[str, Any], code: grpc.StatusCode, message: str
) -> None:
    before = (len(service.list_trainings()), len(service.list_datasets()))
    with pytest.raises(grpc.RpcError) as error:
        stub.StartTraining(training_pb2.StartTrainingRequest(**request_fields))
    assert error.value.code() == code and message in (error.value.details() or "")
    assert "Traceback" not in (error.value.details() or "")
    assert (len(service.list_trainings()), len(service.list_datasets())) == before
    with pytest.raises(grpc.RpcError) as error:
        stub.GetTraining(training_pb2.GetTrainingRequest(training_id="nope"))
    assert error.value.code() == grpc.StatusCode.NOT_FOUND


def test_create_dataset(stub: Any, broker: EmbeddedBroker) -> None:
    made = stub.CreateDataset(training_pb2.CreateDatasetRequest(recipe="human"))
    assert made.recipe == "human" and made.prompts == 4 and Path(made.path).name == f"{made.dataset_id}.jsonl"
    announced = read_events(broker.bootstrap, topics.DATASETS)  # from the outbox, by the service's relay
    assert made.dataset_id in {e.dataset.dataset_id for e in announced}
    shown = json_format.MessageToDict(made)  # the JSON grpcurl prints: how the dataset was made
    assert shown["details"]["recipe"] == "human" and shown["details"]["counts"]["pairs"] == made.pairs
    listed = stub.ListDatasets(training_pb2.ListDatasetsRequest()).datasets
    assert made.dataset_id in [d.dataset_id for d in listed]
    for recipe, message in (("ai", "no preference pair"), ("gpt", "dataset recipe 'gpt' is unknown")):
        with pytest.raises(grpc.RpcError) as error:
            stub.CreateDataset(training_pb2.CreateDatasetRequest(recipe=recipe))
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and message in (error.value.details() or "")
    assert len(stub.ListDatasets(training_pb2.ListDatasetsRequest()).datasets) == len(listed)


def test_enough_new_rankings_start_a_training(service: TrainingService, engine: Engine, broker: EmbeddedBroker) -> None:
    auto = AutoTrainer(service)
    auto.after = 2
    with session_scope(engine) as s:
        left_over = registry.rankings_since_last_dataset(s)
    if left_over:  # run alone, no earlier test has put the fixture's rankings in a dataset yet
        service.create_dataset("human")
    with session_scope(engine) as s:
        assert registry.rankings_since_last_dataset(s) == 0
    assert auto.check() is None  # nothing new
    new = seed_sample(engine, 4, 2)  # two more ranked prompts, announced
    publisher = Publisher(broker.bootstrap)
    for pid in new:
        publisher.publish(topics.RANKINGS, pid, events_pb2.RankingEvent())
    publisher.flush()
    before = {t.id for t in service.list_trainings()}
    threads, training = auto.start(broker.bootstrap), None
    try:
        # recorded (pending) first, then launched (running): wait past the launch, which a loaded machine slows
        training = wait_for(
            lambda: next((t for t in service.list_trainings() if t.id not in before and t.state != "pending"), None),
            60,
        )
        assert training.recipe == "tiny-cpu" and training.state == "running"
        dataset = next(d for d in service.list_datasets() if d.id == training.dataset_id)
        assert dataset.prompts == 6
        # the paper's recipe once a model trained on human rankings can supervise (earlier tests' trainings may
        # have registered one by now); before that, a human dataset first, which makes that model
        with session_scope(engine) as s:
            supervisors = {m.id for m in registry.human_trained_models(s)}
        if dataset.recipe == "human+ai-distant-debias":
            assert dataset.supervisor_model_id in supervisors
        else:
            assert (dataset.recipe, dataset.supervisor_model_id) == ("human", None)
        assert auto.check() is None  # a training is running (and the rankings are in a dataset now)
    finally:
        auto.close()
        for thread in threads:
            thread.join(15)
        if training is not None:
            service.cancel_training(training.id)
        publisher.close()


def test_auto_trains_on_human_rankings_first_while_distant_supervision_has_no_supervisor() -> None:
    """The paper's order: an RM on human rankings, which then supervises the AI annotations."""
    asked: list[str] = []

    class Service:
        config = TrainingConfig(data_dir="unused", auto_after=1)

        def create_dataset(self, recipe: str = "") -> tuple[str, bool]:
            asked.append(recipe)
            if not recipe:  # the configured recipe: the paper's, with distant supervision
                raise NoSupervisor("dataset recipe human+ai-distant-debias waits: no human-trained model")
            return recipe, True

    auto = AutoTrainer(Service())  # type: ignore[arg-type]
    assert auto.make_dataset() == ("human", True) and asked == ["", "human"]


def test_distant_supervision_scores_on_the_configured_device_and_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    monkeypatch.setattr("trainer.service.trainings.create_dataset", lambda *args: seen.append(args[2]))
    config = TrainingConfig(data_dir="unused", supervision_device="cuda:1", supervision_dtype="float16")
    TrainingService(None, config, None).create_dataset("human")  # type: ignore[arg-type]
    assert (seen[0].scoring.device, seen[0].scoring.dtype) == ("cuda:1", "float16")
    assert (TrainingConfig().supervision_device, TrainingConfig().supervision_dtype) == ("auto", "auto")
    with pytest.raises(ValueError, match="supervision_dtype must be one of auto, bfloat16, float16, float32"):
        TrainingConfig(supervision_dtype="fp8")
