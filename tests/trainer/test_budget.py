"""Training with a token budget per forward, figures read at logging steps, start-up reported, and resumes
that keep or refuse a checkpoint's batching: end to end on the tiny real-vocabulary RM."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from cheems.errors import ConfigError
from cheems.forward import shared_rewards
from cheems.model import load_model
from tests.trainer.test_train import synthetic_bench
from trainer.config import TrainConfig
from trainer.loss import bt_loss
from trainer.microbatch import Forward
from trainer.sampler import SamplerConfig, epoch_batches, pairs_in_batch
from trainer.train import TrainResult, load_data, train

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint: Callable[..., Path]) -> Path:
    return tiny_checkpoint(hidden_size=32, layers=2, seed=0)


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_bench(tmp_path_factory.mktemp("budget") / "train.jsonl", range(0, 12), 1)


def config(tiny: Path, data: Path, out: Path, **changes: object) -> TrainConfig:
    settings: dict[str, object] = {
        "model": str(tiny), "train_files": [str(data)], "out_dir": str(out), "max_length": 128,
        "micro_batch_size": 10, "epochs": 1, "lr": 3e-3, "progress": False, "seed": 0,
    }  # fmt: skip
    return TrainConfig(**{**settings, **changes})  # type: ignore[arg-type]


def log_of(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def fixed(tiny: Path, data_file: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TrainResult, str]:
    """One epoch with a fixed micro batch and the default settings, what trainer.train logged at INFO captured:
    (folder, result, log text), shared by the tests that read it (read-only)."""
    out = tmp_path_factory.mktemp("fixed") / "fixed"
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("trainer.train")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        result = train(config(tiny, data_file, out))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return out, result, stream.getvalue()


def test_a_budget_that_holds_the_whole_step_trains_exactly_as_a_fixed_micro_batch(
    tiny: Path, data_file: Path, tmp_path: Path, fixed: tuple[Path, TrainResult, str]
) -> None:
    budget = train(config(tiny, data_file, tmp_path / "budget", max_tokens=100_000, global_batch_size=10))
    assert budget.steps == fixed[1].steps
    assert [r["loss"] for r in log_of(tmp_path / "budget")] == pytest.approx(
        [r["loss"] for r in log_of(fixed[0])], abs=1e-6
    )
    a = load_file(fixed[0] / "model" / "model.safetensors")
    b = load_file(tmp_path / "budget" / "model" / "model.safetensors")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-6, msg=name)


def test_a_small_budget_cuts_each_step_into_forwards_within_it_and_reports_them(
    tiny: Path, data_file: Path, tmp_path: Path
) -> None:
    result = train(config(tiny, data_file, tmp_path / "run", max_tokens=128, global_batch_size=20))
    log = log_of(tmp_path / "run")
    assert result.steps == len(log) == -(-60 // 20)  # 12 prompts x 5 responses, 20 responses a step
    assert [r["responses"] for r in log] == [20, 20, 20]  # the schedule stays in responses
    assert all(r["forwards"] > 1 for r in log)  # 20 responses of 20-40 tokens do not fit 128 padded tokens
    assert all(r["tokens"] > 0 and r["pairs"] > 0 and 0 <= r["accuracy"] <= 1 for r in log)


def test_the_first_steps_recorded_loss_is_that_of_its_forwards(tiny: Path, data_file: Path, tmp_path: Path) -> None:
    """Read at a logging step, from sums kept on the device: still the loss of the step's own forwards."""
    run = config(tiny, data_file, tmp_path / "run", micro_batch_size=6, grad_accum_steps=2, stop_after=1)
    model, tokenizer = load_model(tiny)
    data = load_data(run, tokenizer)
    train(run)
    first = log_of(tmp_path / "run")[0]
    batches = epoch_batches(data.groups, data.pairs, SamplerConfig(6, run.seed), 0)[:2]
    losses = []
    with torch.no_grad():
        for batch in batches:
            forward = Forward.even(batch, 1)
            rewards = shared_rewards(model, [data.examples[x].input_ids for x in forward.ids])
            pairs = pairs_in_batch(forward.ids, data.pairs, data.group_of)
            losses.append(bt_loss(rewards, pairs, run.reg_coef, run.margin).loss.item())
    assert first["loss"] == pytest.approx(sum(losses) / 2, abs=1e-6)
    assert first["forwards"] == 2 and first["responses"] == 12


def test_start_up_is_reported_in_the_first_record_and_the_summary(fixed: tuple[Path, TrainResult, str]) -> None:
    out, _, said = fixed
    startup = log_of(out)[0]["startup"]
    assert set(startup) == {"model", "data", "first_step", "total"}
    assert startup["total"] == pytest.approx(startup["model"] + startup["data"] + startup["first_step"], abs=0.01)
    assert "start-up" in said and "first step" in said


def test_a_resume_keeps_a_steps_position_across_a_new_budget_and_refuses_other_batching(
    tiny: Path, data_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    cut = train(config(tiny, data_file, out, max_tokens=256, global_batch_size=20, stop_after=1))
    assert cut.steps == 1 and cut.model_dir is None
    with pytest.raises(ConfigError, match=r"step-00000001.*20 responses a batch.*10 \(forwards"):
        train(config(tiny, data_file, out))  # no budget: a position counting forwards of 10
    resumed = train(config(tiny, data_file, out, max_tokens=512, global_batch_size=20))  # same steps, new budget
    assert resumed.steps == 3 and resumed.model_dir is not None
    assert [r["step"] for r in log_of(out)] == [1, 2, 3]


def test_a_budget_below_max_length_is_refused_naming_both() -> None:
    with pytest.raises(ValueError, match="max_tokens 100 is below max_length 128"):
        TrainConfig(max_length=128, max_tokens=100)


def test_compiled_training_matches_eager(tiny: Path, data_file: Path, tmp_path: Path) -> None:
    eager = train(config(tiny, data_file, tmp_path / "eager", stop_after=1, prefix_sharing=False))
    compiled = train(config(tiny, data_file, tmp_path / "compiled", stop_after=1, prefix_sharing=False, compile=True))
    assert compiled.steps == eager.steps == 1
    assert [r["loss"] for r in log_of(tmp_path / "compiled")] == pytest.approx(
        [r["loss"] for r in log_of(tmp_path / "eager")], abs=1e-4
    )
