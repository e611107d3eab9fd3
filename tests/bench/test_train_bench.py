"""bench/train_bench.py: its options, the settings it compares, the bench file it trains on. No timings asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prefix_bench import SHAPES
from train_bench import parse_args, settings, steady, write_bench

from cheems.formats.cheemsbench import read_bench


def test_defaults_and_the_gpu_shape_are_read() -> None:
    args = parse_args([])
    assert (args.device, args.dtype, args.prompts, args.micro_batch, args.step) == ("cpu", "auto", 16, 10, 40)
    assert args.budgets == [4096, 8192] and args.shapes == list(SHAPES)
    gpu = ["--device", "cuda", "--hidden", "896", "--layers", "24", "--heads", "14", "--kv-heads", "2"]
    args = parse_args([*gpu, "--intermediate", "4864", "--budgets", "8192,20480", "--shapes", "RLHF-like"])
    assert (args.hidden, args.layers, args.intermediate, args.budgets) == (896, 24, 4864, [8192, 20480])
    assert args.shapes == ["RLHF-like"]


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--budgets", "1000"], "every budget must be at least --max-length 1536"),
        (["--step", "35"], "--step 35 must be a multiple of --micro-batch 10"),
        (["--shapes", "chat"], "unknown shape chat"),
    ],
)
def test_settings_that_cannot_run_are_refused(argv: list[str], error: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert error in capsys.readouterr().err


def test_sharing_off_and_on_then_each_budget_with_sharing() -> None:
    labels = [(label, changes) for label, changes in settings(10, [4096, 8192])]
    assert [c for _, c in labels] == [
        {"prefix_sharing": False},
        {"prefix_sharing": True},
        {"prefix_sharing": True, "max_tokens": 4096},
        {"prefix_sharing": True, "max_tokens": 8192},
    ]


def test_the_bench_file_is_a_cheemsbench_the_trainer_reads(tmp_path: Path) -> None:
    path = write_bench(tmp_path / "b.jsonl", SHAPES["RLHF-like"], 3)
    items = read_bench(path)
    assert len(items) == 3 and all(len(i.responses) == 8 for i in items)
    assert all(len(json.loads(line)["sys_prompt"]) > 900 for line in path.read_text(encoding="utf-8").splitlines())


def test_steady_leaves_out_the_first_step() -> None:
    records = [{"seconds": 9.0, "tokens": 10}, {"seconds": 1.0, "tokens": 100}, {"seconds": 3.0, "tokens": 300}]
    assert steady(records) == (2.0, 100.0)
