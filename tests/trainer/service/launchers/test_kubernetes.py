"""The Kubernetes launcher through the official client, against a local server speaking the batch/v1 Jobs paths
it uses (a cluster cannot run here): the Job made from the manifest, progress and the model, a restart of the
service, cancel (DELETE), a failed Job, and a 403 Forbidden recorded as the training's error."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from sqlalchemy import Engine

from tests.trainer.conftest import seed_sample
from tests.trainer.service.launchers.fake_cluster import FORBIDDEN, FakeKubernetes, running
from trainer.service.config import TrainingConfig
from trainer.service.launchers import LaunchSpec
from trainer.service.launchers.kubernetes import KubernetesLauncher, job_manifest, load_manifest
from trainer.service.trainings import TrainingService


@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeKubernetes]:
    yield from running()


def launcher(cluster: FakeKubernetes) -> KubernetesLauncher:
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{cluster.server_address[1]}"
    return KubernetesLauncher(client.ApiClient(configuration), "cheems", load_manifest(), image="registry/cheems-gpu:1")


@pytest.fixture
def make_service(engine: Engine, cluster: FakeKubernetes, tmp_path: Path) -> Iterator[Callable[[], TrainingService]]:
    seed_sample(engine, 0, 2)
    cluster.forbid = False
    made: list[TrainingService] = []

    def make() -> TrainingService:
        config = TrainingConfig(data_dir=str(tmp_path), launcher="kubernetes", model="/m/tiny", poll_seconds=0.1)
        made.append(TrainingService(engine, config, launcher(cluster)))
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


@pytest.mark.parametrize("nodes", [1, 2])
def test_the_job_is_the_manifest_filled_for_the_training(nodes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHEEMS_LOG_FORMAT", "json")  # the service's (cheems-config): the run logs as it does
    spec = LaunchSpec("ab12", "qwen25-paper", "/data/cheems/datasets/d.jsonl", "/data/cheems/trainings/ab12", "/m")
    job = job_manifest(load_manifest(), spec, "cheems", "registry/cheems-gpu:1", nodes)
    kubernetes_validate.validate(job, "1.33.0", strict=True)
    pod = job["spec"]["template"]["spec"]
    assert job["metadata"]["name"] == "cheems-train-ab12" and job["metadata"]["namespace"] == "cheems"
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == nodes
    assert pod["containers"][0]["image"] == "registry/cheems-gpu:1"
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "cheems-data"  # the shared volume
    args = pod["containers"][0]["args"]
    assert args[:3] == ["train", "--recipe=qwen25-paper", "--nproc=1"]
    assert args[-8:] == [
        *("--set", "model=/m", "--set", 'train_files=["/data/cheems/datasets/d.jsonl"]'),
        *("--set", "out_dir=/data/cheems/trainings/ab12", "--set", "progress=false"),
    ]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["CHEEMS_TRAINING_ID"] == {"name": "CHEEMS_TRAINING_ID", "value": "ab12"}  # on every line the ranks log
    assert env["CHEEMS_LOG_FORMAT"]["value"] == "json"
    assert len(env) == len(pod["containers"][0]["env"]), "one value of each variable"
    rdzv = "--rdzv-endpoint=cheems-train-ab12-0.cheems-train:29400"
    assert (rdzv in args, pod.get("subdomain")) == ((True, "cheems-train") if nodes > 1 else (False, None))


def test_a_job_trains_is_watched_again_after_a_restart_and_registers_the_model(
    make_service: Callable[[], TrainingService], cluster: FakeKubernetes, tiny_model: Path
) -> None:
    service = make_service()
    training = service.start_training(dataset_recipe="human", overrides={"epochs": "1"})
    handle = training.handle or ""
    assert (training.state, handle) == ("running", f"cheems-train-{training.id}")
    job = cluster.jobs[handle]
    assert "--set=epochs=1" not in job["spec"]["template"]["spec"]["containers"][0]["args"]  # args are split
    assert job["spec"]["template"]["spec"]["containers"][0]["args"][-2:] == ["--set", "epochs=1"]
    out = Path(training.out_dir)  # what the pods write to the shared volume
    out.mkdir(parents=True)
    (out / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "total_steps": 4, "loss": 0.69}) + "\n" + '{"step": 2, "total_steps": 4, "lo'
    )
    wait_for(lambda: service.get_training(training.id).step == 1)
    service.close()  # the service goes away; the Job goes on
    with (out / "metrics.jsonl").open("a") as f:
        f.write('ss": 0.6}\n' + json.dumps({"step": 4, "total_steps": 4, "loss": 0.5, "eval": {"overall": 0.6}}) + "\n")
    shutil.copytree(tiny_model, out / "model")
    (out / "model" / "cheems_metadata.json").write_text(json.dumps({"final_eval": {"overall": 0.625}}))
    cluster.finish(handle)

    again = make_service()
    assert again.recover() == 1
    done = wait_for(lambda: (t := again.get_training(training.id)).state == "succeeded" and t)
    assert (done.step, done.total_steps, done.loss, done.overall) == (4, 4, 0.5, 0.6)
    (model,) = again.list_models()
    assert (model.id, model.path, model.overall) == (f"rm-{training.id}", str(out / "model"), 0.625)


def test_cancel_deletes_the_job_and_a_failed_job_fails_the_training(
    make_service: Callable[[], TrainingService], cluster: FakeKubernetes
) -> None:
    service = make_service()
    first = service.start_training(dataset_recipe="human")
    assert service.cancel_training(first.id).state == "cancelled"
    deletes = [path for method, path in cluster.requests if method == "DELETE" and str(first.handle) in path]
    assert deletes == [f"/apis/batch/v1/namespaces/cheems/jobs/{first.handle}?propagationPolicy=Background"]
    assert first.handle not in cluster.jobs
    second = service.start_training(dataset_recipe="human")
    cluster.finish(second.handle or "", "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    failed = wait_for(lambda: (t := service.get_training(second.id)).state == "failed" and t)
    assert failed.error == (
        f"Job {second.handle} failed: BackoffLimitExceeded: Job has reached the specified backoff limit"
    )


def test_a_forbidden_job_fails_the_training_with_the_apis_reason(
    make_service: Callable[[], TrainingService], cluster: FakeKubernetes
) -> None:
    cluster.forbid = True
    service = make_service()
    training = service.start_training(dataset_recipe="human")
    assert training.state == "failed" and training.handle is None
    assert training.error == (
        f"the Kubernetes API refused to create Job cheems-train-{training.id} in namespace cheems: "
        f"403 Forbidden: {FORBIDDEN}"
    )
    assert f"cheems-train-{training.id}" not in cluster.jobs
