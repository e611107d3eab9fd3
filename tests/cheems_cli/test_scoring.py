"""`cheems rewards`' device, dtype and batch options: where they go, and one error line for what cannot run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from cheems_cli.main import app
from services.scorer.offline.jobs import OfflineScoring


def rewards(tmp_path: Path, *options: str) -> Any:
    (tmp_path / "bench.jsonl").write_text("")
    command = ["rewards", str(tmp_path / "bench.jsonl"), "--model", str(tmp_path), "--out", str(tmp_path / "r.jsonl")]
    return CliRunner().invoke(app, [*command, *options])


def test_the_options_reach_the_offline_scoring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(
        "services.scorer.offline.bench_rewards.write_bench_rewards", lambda *args: seen.append(args) or 0
    )  # fmt: skip
    result = rewards(
        tmp_path, "--device", "cpu", "--dtype", "float32", "--max-batch-tokens", "512", "--max-length", "64"
    )
    assert result.exit_code == 0, result.output
    assert seen[0][5] == OfflineScoring("cpu", "float32", max_length=64, max_batch_tokens=512)


def test_what_cannot_run_here_is_one_error_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = rewards(tmp_path, "--device", "cuda")  # no CUDA on this machine
    assert result.exit_code == 2 and result.output.strip().startswith("error: device cuda: CUDA is not available")
    assert len(result.output.strip().splitlines()) == 1

    def no_half(*args: object, **kwargs: object) -> None:
        raise RuntimeError("\"addmm_impl_cpu_\" not implemented for 'Half'\nmore lines")

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", no_half)  # a CPU without float16
    result = rewards(tmp_path, "--dtype", "float16")
    assert result.exit_code == 2, result.output
    assert (
        result.output.strip()
        == "error: dtype float16 cannot run on cpu: \"addmm_impl_cpu_\" not implemented for 'Half'"
    )
    assert rewards(tmp_path, "--dtype", "fp8").exit_code == 2  # not one of the choices
