"""One real tiny training reported to TensorBoard and MLflow, cut after 3 steps and resumed to its end (the second
process goes on with the runs the first started), shared by the backends' tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.test_train import synthetic_bench
from trainer.config import TrainConfig
from trainer.train import TrainResult, train

CUT = 3  # steps before the interruption


@dataclass(frozen=True)
class Reported:
    out: Path
    tracking_uri: str
    records: list[dict[str, Any]]  # OUT/metrics.jsonl
    result: TrainResult


@pytest.fixture(scope="package")
def reported(tiny_checkpoint: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory) -> Reported:
    root = tmp_path_factory.mktemp("reported")
    data = synthetic_bench(root / "train.jsonl", range(0, 12), 1)
    bench = synthetic_bench(root / "bench.jsonl", range(50, 56), 2)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    config = TrainConfig(
        model=str(tiny_checkpoint(hidden_size=32, layers=2, seed=0)), train_files=[str(data)], eval_files=[str(bench)],
        out_dir=str(root / "run"), max_length=128, micro_batch_size=10, epochs=1, lr=3e-3, eval_every=3,
        progress=False, report_to=["tensorboard", "mlflow"], tracking_uri=uri, experiment="tests",
    )  # fmt: skip
    cut = train(TrainConfig(**{**config.to_dict(), "stop_after": CUT}))
    assert cut.steps == CUT and cut.model_dir is None
    result = train(config)
    lines = (root / "run" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return Reported(root / "run", uri, [json.loads(line) for line in lines], result)


def expected(record: dict[str, Any]) -> dict[str, float]:
    """What every backend must hold at the record's step: the figures of the issue, named as documented."""
    names = {
        "loss": "train/loss", "bt": "train/bt_loss", "accuracy": "train/accuracy", "margin": "train/margin",
        "reward_mean": "train/reward_mean", "reward_std": "train/reward_std", "lr": "train/lr",
        "grad_norm": "train/grad_norm", "tokens_per_s": "perf/tokens_per_s", "memory_peak_bytes": "memory/peak_bytes",
    }  # fmt: skip
    out = {name: float(record[key]) for key, name in names.items()}
    if "eval" in record:
        out["eval/overall"] = record["eval"]["overall"]
        out |= {f"eval/{s}/accuracy": m["accuracy"] for s, m in record["eval"]["subsets"].items()}
    return out
