"""LoRA runs end to end on the tiny real-vocabulary RM (`trainer.train` with lora_rank): the loss goes down, the
checkpoints hold the trainable state only, a resume reproduces the losses, and every run ends with the merged
export and the adapter folder; with one process, and with two torchrun processes (gloo) under DDP and under FSDP2,
which match the one process. (The merge itself, to 1e-5 against the adapter-wrapped model: test_merge.py.)"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from tests.trainer.test_train import synthetic_bench
from trainer.adapters.lora import is_adapter
from trainer.config import TrainConfig
from trainer.train import train

pytestmark = pytest.mark.slow  # torchrun: see tests/conftest.py

HEAD = "score.modules_to_save.default.weight"
STOP, CUT = 10, 4  # a whole run: 10 steps (0.8 of an epoch of 12 batches), then its export
KNOBS = {"max_length": 128, "epochs": 0.8, "lr": 3e-3, "lora_rank": 4, "progress": False}


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint: Callable[..., Path]) -> Path:
    return tiny_checkpoint(hidden_size=32, layers=2, seed=0)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_bench(tmp_path_factory.mktemp("data") / "train.jsonl", range(0, 24), 1)


def losses(run: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def single(tiny: Path, data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One process, a whole run of STOP steps; beside it `cut`: stopped after CUT, then resumed to the end. The
    responses of a prompt are not packed (prefix_sharing off), so the torchrun runs (packed) check packing too."""
    root = tmp_path_factory.mktemp("lora")

    def config(out: Path, **changes: object) -> TrainConfig:
        knobs = {**KNOBS, "micro_batch_size": 10, "prefix_sharing": False, **changes}
        return TrainConfig(model=str(tiny), train_files=[str(data)], out_dir=str(out), **knobs)  # type: ignore[arg-type]

    whole = train(config(root / "whole"))
    assert (whole.steps, whole.model_dir) == (STOP, root / "whole" / "model")
    assert train(config(root / "cut", stop_after=CUT)).model_dir is None  # stopped: no export
    assert train(config(root / "cut")).steps == STOP
    return root


def test_the_loss_goes_down(single: Path) -> None:
    trace = losses(single / "whole")
    assert len(trace) == STOP and sum(trace[-3:]) / 3 < trace[0] - 0.1, trace


def test_a_resumed_run_reproduces_the_losses(single: Path) -> None:
    assert losses(single / "cut") == pytest.approx(losses(single / "whole"), abs=1e-6)


def test_a_checkpoint_holds_the_adapters_and_the_head_and_no_frozen_weight(single: Path, tiny: Path) -> None:
    step = single / "whole" / "checkpoints" / f"step-{STOP:08d}"
    assert sorted(p.name for p in step.glob("*.safetensors")) == ["trainable.safetensors"]
    weights = load_file(step / "trainable.safetensors")
    assert HEAD in weights and all(is_adapter(n) or n == HEAD for n in weights)
    assert len([n for n in weights if ".lora_A." in n]) == 2 * 7  # every decoder linear of both layers
    base_bytes = (tiny / "model.safetensors").stat().st_size
    assert (step / "trainable.safetensors").stat().st_size < base_bytes / 50  # no embedding, no base layer
    position = json.loads((step / "position.json").read_text())
    assert (position["format"], position["weights"]) == ("full", "trainable")


@pytest.fixture(scope="module", params=["ddp", "fsdp"])
def two(request: pytest.FixtureRequest, tiny: Path, data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`cheems train --nproc 2` (torchrun, gloo), micro batch 5 a rank, checkpoints every CUT steps, a whole run;
    `cut` beside it: its copy as of the step-CUT checkpoint (no export), resumed to the end. The command runs in
    this process (typer's runner), its torchrun and workers in their own."""
    root = tmp_path_factory.mktemp(request.param)
    args = ["train", "--recipe", "tiny-cpu", "--nproc", "2"]
    knobs = {**KNOBS, "model": tiny, "train_files": data, "eval_files": "", "micro_batch_size": 5, "save_every": CUT}
    args += [arg for key, value in knobs.items() for arg in ("--set", f"{key}={value}")]
    args += ["--set", f"fsdp={str(request.param == 'fsdp').lower()}"]
    cheems([*args, "--set", f"out_dir={root / 'run'}"], root / "run.log")
    keep = shutil.ignore_patterns(*(f"step-{s:08d}" for s in range(CUT + 1, STOP + 1)), "model", "adapter")
    shutil.copytree(root / "run", root / "cut", ignore=keep)
    (root / "cut" / "metrics.jsonl").write_text("".join(f"{line}\n" for line in read_lines(root / "run")[:CUT]))
    cheems([*args, "--set", f"out_dir={root / 'cut'}"], root / "cut.log")
    assert f"resumed from {root / 'cut' / 'checkpoints' / f'step-{CUT:08d}'}" in (root / "cut.log").read_text()
    return root


def cheems(args: list[str], log: Path) -> None:
    """`cheems ARGS`, the stderr of the processes it starts (which inherit this one's) written to `log`."""
    from typer.testing import CliRunner

    from cheems_cli.main import app

    with log.open("w") as out:
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)
        try:
            result = CliRunner().invoke(app, args, env={"OMP_NUM_THREADS": "1"})
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    assert result.exit_code == 0, result.output + log.read_text()[-3000:]


def read_lines(run: Path) -> list[str]:
    return (run / "metrics.jsonl").read_text().splitlines()


def test_two_processes_match_one_and_resume_the_same(two: Path, single: Path) -> None:
    assert losses(two / "run") == pytest.approx(losses(single / "whole"), abs=1e-4)
    assert losses(two / "cut") == pytest.approx(losses(two / "run"), abs=1e-6)


def test_two_processes_checkpoint_the_trainable_state_only(two: Path) -> None:
    step = two / "run" / "checkpoints" / f"step-{CUT:08d}"
    position = json.loads((step / "position.json").read_text())
    assert position["weights"] == "trainable"
    if position["format"] == "full":  # DDP: rank 0 wrote the whole trainable state
        names = set(load_file(step / "trainable.safetensors"))
    else:  # FSDP2: each rank's shards through torch.distributed.checkpoint
        from torch.distributed.checkpoint import FileSystemReader

        assert {"__0_0.distcp", "__1_0.distcp"} <= {p.name for p in step.iterdir()}
        keys = FileSystemReader(str(step)).read_metadata().state_dict_metadata
        names = {k.removeprefix("model.") for k in keys if k.startswith("model.")}
    assert HEAD in names and all(is_adapter(n) or n == HEAD for n in names), sorted(names)[:5]
    assert len([n for n in names if ".lora_B." in n]) == 2 * 7


def exported(run: Path) -> dict[str, Any]:
    """The merged export's tensors, after checking the adapter folder peft loads lies beside it."""
    assert {p.name for p in (run / "adapter").iterdir()} == {"adapter_config.json", "adapter_model.safetensors"}
    tensors: dict[str, Any] = {}
    for file in sorted((run / "model").glob("*.safetensors")):
        tensors.update(load_file(file))
    return tensors


def test_one_process_exports_the_merged_model_and_a_resumed_run_the_same(single: Path, tiny: Path) -> None:
    merged, base = exported(single / "whole"), load_file(tiny / "model.safetensors")
    assert sorted(merged) == sorted(base)  # the plain model's names: no base_layer, lora_A/B or head copies
    moved = [n for n in base if n.endswith("q_proj.weight") and not torch.equal(merged[n], base[n])]
    assert len(moved) == 2, "the adapters were merged into every layer's q_proj"
    resumed = exported(single / "cut")
    assert all(torch.allclose(resumed[n], merged[n], atol=1e-5) for n in merged)


def test_two_processes_export_the_same_kind_of_model_and_resume_to_it(two: Path, single: Path) -> None:
    merged, one = exported(two / "run"), exported(single / "whole")
    assert {n: t.shape for n, t in merged.items()} == {n: t.shape for n, t in one.items()}
    resumed = exported(two / "cut")
    assert all(torch.allclose(resumed[n], merged[n], atol=1e-5) for n in merged)
