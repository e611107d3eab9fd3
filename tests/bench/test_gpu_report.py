"""bench/gpu_report.py: the quick CPU run prints every row, each a figure or "not measured: why"; the table's rules
(a failed part's rows say why, nothing is dropped) and the options. No timing asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_parts.rows import NOT_MEASURED, PARTS, ROWS, Cell, fill, missing, render
from gpu_report import parse_args

ROOT = Path(__file__).resolve().parents[2]
ASKED = ("fsdp", "adapters")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    """The report on this CPU, as `make gpu-report` runs it where there is no GPU: (stdout, the JSON). The parts new
    with it (FSDP2, the adapters); the serving and training parts run bench/gpu_bench.py's and train_bench.py's
    measures, tested in their own files, so here they are left out (and say so), to keep `make test` short."""
    folder = tmp_path_factory.mktemp("gpu-report")
    report = folder / "report.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, str(ROOT / "bench/gpu_report.py"), "--json", str(report), "--budget", "1500"]
    command += ["--parts", ",".join(ASKED)]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=1800, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout, json.loads(report.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_the_quick_cpu_run_prints_every_row_a_figure_or_why_not(quick_run: tuple[str, dict]) -> None:
    stdout, report = quick_run
    lines = {line.split(" | ")[0].lstrip("| "): line for line in stdout.splitlines() if line.startswith("| ")}
    for row in ROWS:
        cell = lines[row.label].split(" | ")[1]
        assert cell.startswith(NOT_MEASURED) or any(c.isdigit() for c in cell), (row.key, cell)
    assert [r["key"] for r in report["rows"]] == [r.key for r in ROWS]
    assert report["device"] == "cpu" and report["card"].startswith("CPU") and report["torch"]
    assert "torch " in stdout and "CPU" in stdout  # the header: where and with what it ran


@pytest.mark.slow
def test_on_the_cpu_the_cuda_rows_say_why_and_the_others_are_measured(quick_run: tuple[str, dict]) -> None:
    rows = {r["key"]: r for r in quick_run[1]["rows"]}
    assert rows["qlora"]["value"].startswith(NOT_MEASURED + "QLoRA needs CUDA")
    assert rows["fixed_costs"]["value"].startswith(NOT_MEASURED + "CUDA only")
    for key in ("fsdp_load", "fsdp_step", "lora_memory", "lora_time"):
        assert rows[key]["measured"], rows[key]["value"]
    for key in ("served", "served_p50", "train_mfu", "train_vs_bare"):
        assert rows[key]["value"].startswith(NOT_MEASURED + "not asked for (--parts fsdp,adapters)"), rows[key]
    assert rows["fsdp_step"]["figures"]["ranks"][0]["step_s"] > 0
    lora = rows["lora_memory"]["figures"]
    assert lora["lora"]["peak_bytes"] > 0 and lora["full"]["peak_bytes"] > 0


def test_a_part_that_failed_leaves_its_rows_saying_why() -> None:
    cells = {"served": Cell("0.91 (x / y)"), "fsdp_load": Cell("1.0 s")}
    table = fill(cells, {"fsdp": "fsdp part failed: CUDA error: out of memory (exit 1)"})
    values = {row.key: cell.value for row, cell in table}
    assert [row.key for row, _ in table] == [r.key for r in ROWS]
    assert values["served"] == "0.91 (x / y)" and values["fsdp_load"] == "1.0 s"
    assert values["fsdp_step"] == NOT_MEASURED + "fsdp part failed: CUDA error: out of memory (exit 1)"
    assert values["train_mfu"] == NOT_MEASURED + "the training part gave no figure for it"
    text = render(table, "header")
    assert text.count("\n| ") == len(ROWS) + 2 and "| - |" in text  # a row per goal, the head and its rule


def test_a_reason_is_one_line() -> None:
    assert missing("bitsandbytes\n  not installed ").value == NOT_MEASURED + "bitsandbytes not installed"
    assert not missing("").measured


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--parts", "serving,gpu"], "--parts: gpu: choose from"),
        (["--parts", ","], "--parts: none given"),
        (["--budget", "0"], "--budget must be > 0"),
    ],
)
def test_options_that_cannot_run_are_refused(argv: list[str], error: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert error in capsys.readouterr().err


def test_every_part_by_default_and_the_cpu_without_cuda() -> None:
    args = parse_args(["--device", "cpu", "--parts", "fsdp,serving"])
    assert args.parts == ["fsdp", "serving"] and args.device == "cpu"
    assert parse_args(["--device", "cpu"]).parts == list(PARTS)
