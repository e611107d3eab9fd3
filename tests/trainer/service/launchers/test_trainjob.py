"""The Kubeflow Trainer v2 launcher (`--workload trainjob`) through the official client, against a local server speaking
the TrainJob paths (a cluster cannot run here): the TrainJob made from the manifest (valid against Trainer's own CRD),
progress and the model, a restart of the service, cancel, a failed TrainJob, and a cluster without Trainer."""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from sqlalchemy import Engine

from cheems.extras import MissingExtra
from tests.k8s.crd_schema import crd_schema
from tests.trainer.conftest import seed_sample
from tests.trainer.service.launchers.fake_cluster import FakeKubernetes, api_client, running
from trainer.service.config import TrainingConfig
from trainer.service.launchers import LaunchSpec
from trainer.service.launchers.trainjob import TrainJobLauncher, load_trainjob, trainjob_manifest
from trainer.service.server import make_launcher
from trainer.service.trainings import TrainingService


@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeKubernetes]:
    yield from running()


@pytest.fixture
def make_service(engine: Engine, cluster: FakeKubernetes, tmp_path: Path) -> Iterator[Callable[[], TrainingService]]:
    seed_sample(engine, 0, 2)
    cluster.forbid = cluster.no_trainer = False
    made: list[TrainingService] = []

    def make() -> TrainingService:
        config = TrainingConfig(
            data_dir=str(tmp_path), launcher="kubernetes", workload="trainjob", model="/m/tiny", poll_seconds=0.1
        )
        launcher = TrainJobLauncher(api_client(cluster), "cheems", load_trainjob(), image="registry/cheems-gpu:1")
        made.append(TrainingService(engine, config, launcher))
        return made[-1]

    yield make
    for service in made:
        service.close()


def wait_for(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s")


@pytest.mark.parametrize("nodes", [1, 4])
def test_the_trainjob_is_the_manifest_filled_for_the_training(nodes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHEEMS_LOG_FORMAT", raising=False)
    spec = LaunchSpec("ab12", "qwen25-paper", "/data/cheems/datasets/d.jsonl", "/data/cheems/trainings/ab12", "/m")
    spec = LaunchSpec(**{**vars(spec), "nproc": 8})
    job = trainjob_manifest(load_trainjob(), spec, "cheems", "registry/cheems-gpu:1", nodes)
    schema = crd_schema(job["apiVersion"], job["kind"])
    assert schema is not None
    jsonschema.validate(job, schema)  # Kubeflow Trainer's own CRD, unknown fields refused
    assert job["metadata"]["name"] == "cheems-train-ab12" and job["metadata"]["namespace"] == "cheems"
    assert job["metadata"]["labels"]["cheems.io/training-id"] == "ab12"
    assert job["spec"]["runtimeRef"]["name"] == "cheems-torch"
    trainer = job["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"], trainer["image"]) == (nodes, 8, "registry/cheems-gpu:1")
    args = trainer["args"]
    assert args[:3] == ["train", "--recipe=qwen25-paper", "--nproc=8"]
    assert not any(a.startswith(("--nnodes", "--rdzv")) for a in args), "the runtime gives the rendezvous"
    assert args[-8:] == [
        *("--set", "model=/m", "--set", 'train_files=["/data/cheems/datasets/d.jsonl"]'),
        *("--set", "out_dir=/data/cheems/trainings/ab12", "--set", "progress=false"),
    ]
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "8"  # quantities as strings
    assert trainer["env"] == [{"name": "CHEEMS_TRAINING_ID", "value": "ab12"}]  # on every line the ranks log
    monkeypatch.setenv("CHEEMS_LOG_FORMAT", "json")  # the service's (cheems-config): the run logs as it does
    job = trainjob_manifest(load_trainjob(), spec, "cheems", "", nodes)
    assert job["spec"]["trainer"]["env"][-1] == {"name": "CHEEMS_LOG_FORMAT", "value": "json"}
    jsonschema.validate(job, schema)


def test_the_setting_picks_the_trainjob_launcher(monkeypatch: pytest.MonkeyPatch, cluster: FakeKubernetes) -> None:
    monkeypatch.setattr("trainer.service.launchers.kubernetes.api_client", lambda: api_client(cluster))
    job = make_launcher(TrainingConfig(launcher="kubernetes", namespace="cheems"))
    trainjob = make_launcher(TrainingConfig(launcher="kubernetes", workload="trainjob", namespace="cheems"))
    assert (type(job).__name__, type(trainjob).__name__) == ("KubernetesLauncher", "TrainJobLauncher")
    with pytest.raises(ValueError, match="workload must be one of job, trainjob"):
        TrainingConfig(workload="pytorchjob")


def test_without_the_kubernetes_extra_the_launcher_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # as where `cheems[kubernetes]` is not installed
    with pytest.raises(
        MissingExtra, match=r"--launcher local trains on this machine, or pip install 'cheems\[kubernetes\]'$"
    ):
        make_launcher(TrainingConfig(launcher="kubernetes", namespace="cheems"))
    assert make_launcher(TrainingConfig()).__class__.__name__ == "LocalLauncher"


def test_a_trainjob_trains_is_watched_again_after_a_restart_and_registers_the_model(
    make_service: Callable[[], TrainingService], cluster: FakeKubernetes, tiny_model: Path
) -> None:
    service = make_service()
    training = service.start_training(dataset_recipe="human", overrides={"epochs": "1"})
    handle = training.handle or ""
    assert (training.state, handle) == ("running", f"cheems-train-{training.id}")
    assert cluster.trainjobs[handle]["spec"]["trainer"]["args"][-2:] == ["--set", "epochs=1"]
    out = Path(training.out_dir)  # what the nodes write to the shared volume
    out.mkdir(parents=True)
    (out / "metrics.jsonl").write_text(json.dumps({"step": 1, "total_steps": 2, "loss": 0.69}) + "\n")
    wait_for(lambda: service.get_training(training.id).step == 1)
    service.close()  # the service goes away; the TrainJob goes on
    with (out / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 2, "total_steps": 2, "loss": 0.5, "eval": {"overall": 0.6}}) + "\n")
    shutil.copytree(tiny_model, out / "model")
    (out / "model" / "cheems_metadata.json").write_text(json.dumps({"final_eval": {"overall": 0.625}}))
    cluster.finish(handle)

    again = make_service()
    assert again.recover() == 1
    done = wait_for(lambda: (t := again.get_training(training.id)).state == "succeeded" and t)
    assert (done.step, done.loss) == (2, 0.5)
    (model,) = again.list_models()
    assert (model.id, model.path, model.overall) == (f"rm-{training.id}", str(out / "model"), 0.625)


def test_cancel_deletes_the_trainjob_and_a_failed_one_fails_the_training(
    make_service: Callable[[], TrainingService], cluster: FakeKubernetes
) -> None:
    service = make_service()
    first = service.start_training(dataset_recipe="human")
    assert service.cancel_training(first.id).state == "cancelled"
    deletes = [path for method, path in cluster.requests if method == "DELETE" and str(first.handle) in path]
    assert deletes == [
        f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/cheems/trainjobs/{first.handle}?propagationPolicy=Background"
    ]
    assert first.handle not in cluster.trainjobs
    second = service.start_training(dataset_recipe="human")
    cluster.finish(second.handle or "", "Failed", "JobSetFailed", "node 2 exited with code 1")
    failed = wait_for(lambda: (t := service.get_training(second.id)).state == "failed" and t)
    assert failed.error == f"TrainJob {second.handle} failed: JobSetFailed: node 2 exited with code 1"


def test_a_cluster_without_kubeflow_trainer_fails_the_training_saying_so(
    make_service: Callable[[], TrainingService], cluster: FakeKubernetes
) -> None:
    cluster.no_trainer = True
    training = make_service().start_training(dataset_recipe="human")
    assert training.state == "failed" and training.handle is None
    assert training.error.startswith(f"the Kubernetes API refused to create TrainJob cheems-train-{training.id}")
    assert training.error.endswith("(is Kubeflow Trainer v2 installed?)")


def test_a_manifest_of_another_kind_or_unreadable_is_refused_naming_it(tmp_path: Path) -> None:
    from cheems.errors import InvalidInput
    from trainer.service.launchers.kubernetes import MANIFEST as JOB_MANIFEST
    from trainer.service.launchers.kubernetes import load_manifest
    from trainer.service.launchers.trainjob import MANIFEST as TRAINJOB_MANIFEST

    expected = r"trainjob manifest .*job\.yaml: expected a trainer\.kubeflow\.org/v1alpha1"
    with pytest.raises(InvalidInput, match=expected):
        load_trainjob(JOB_MANIFEST)
    with pytest.raises(InvalidInput, match=r"job manifest .*trainjob\.yaml: expected a batch/v1 Job"):
        load_manifest(TRAINJOB_MANIFEST)
    broken = tmp_path / "broken.yaml"
    broken.write_bytes(b"kind: [\xff")  # not UTF-8
    with pytest.raises(InvalidInput, match=r"trainjob manifest .*broken\.yaml: .*utf-8"):
        load_trainjob(broken)
