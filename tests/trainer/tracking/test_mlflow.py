"""MLflow: the run of a real (cut and resumed) tiny training in a SQLite tracking store, read with MlflowClient,
holds metrics.jsonl's figures at its steps and the config and data hash as parameters; the resumed process went on
with the run the first one started."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from tests.trainer.tracking.conftest import Reported, expected
from trainer.tracking.session import tracking_uri


def test_the_run_equals_metrics_jsonl_and_has_the_config(reported: Reported) -> None:
    client = MlflowClient(tracking_uri=reported.tracking_uri)
    experiment = client.get_experiment_by_name("tests")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])  # one run: the resume went on with it
    assert run.info.status == "FINISHED" and run.info.run_name == "run"  # out_dir's folder name
    assert {r["tracking"]["mlflow"] for r in reported.records if "tracking" in r} == {run.info.run_id}
    by_step = {r["step"]: r for r in reported.records}
    for name in {name for r in reported.records for name in expected(r)}:
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, name))
        assert history == sorted((s, expected(r)[name]) for s, r in by_step.items() if name in expected(r)), name
    metadata = json.loads((reported.out / "model" / "cheems_metadata.json").read_text(encoding="utf-8"))
    params = run.data.params
    assert params["data_sha256"] == metadata["data_sha256"] and params["world_size"] == "1"
    assert params["lr"] == params["learning_rate"] == "0.003"  # learning_rate: lr as resolved (0 = the default)
    assert json.loads(params["report_to"]) == ["tensorboard", "mlflow"]
    assert set(metadata["config"]) <= set(params)  # every TrainConfig field
    assert metadata["tracking"]["mlflow"] == run.info.run_id


def test_the_store_defaults_to_the_environment_then_beside_the_out_dir(
    monkeypatch: pytest.MonkeyPatch, reported: Reported
) -> None:
    from trainer.config import TrainConfig

    config = TrainConfig(out_dir=str(reported.out))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking_uri(config) == f"sqlite:///{reported.out.resolve().parent / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert tracking_uri(config) == "http://127.0.0.1:5000"
    assert tracking_uri(TrainConfig(out_dir="x", tracking_uri="sqlite:///m.db")) == "sqlite:///m.db"
