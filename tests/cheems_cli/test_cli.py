"""The `cheems eval` contract, run as users run it: a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evaluator.evaluate import evaluate_files
from evaluator.report import to_json


def cheems(*args: str | Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "cheems_cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_eval_prints_table_and_writes_json_and_report(tmp_path: Path, sample_paths) -> None:  # type: ignore[no-untyped-def]
    bench, rewards = sample_paths
    run = cheems("eval", *bench, "--rewards", rewards, "--json", tmp_path / "out.json", "--report", tmp_path / "r")
    assert run.returncode == 0, run.stderr
    assert "Overall" in run.stdout and "open" in run.stdout and "human" in run.stdout
    written = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert written == json.loads(json.dumps(to_json(evaluate_files(bench, rewards))))
    assert written["semantics"] == "paper"
    assert {p.name for p in (tmp_path / "r").iterdir()} == {"results.json", "per_category.png", "README.md"}


def test_official_semantics_flag(tmp_path: Path, sample_paths) -> None:  # type: ignore[no-untyped-def]
    bench, rewards = sample_paths
    run = cheems("eval", *bench, "--rewards", rewards, "--semantics", "official", "--json", tmp_path / "o.json")
    assert run.returncode == 0, run.stderr
    assert json.loads((tmp_path / "o.json").read_text(encoding="utf-8"))["semantics"] == "official"


def test_unknown_semantics_is_a_usage_error(sample_paths) -> None:  # type: ignore[no-untyped-def]
    bench, rewards = sample_paths
    run = cheems("eval", *bench, "--rewards", rewards, "--semantics", "loose")
    assert run.returncode == 2 and "--semantics" in run.stderr


@pytest.mark.parametrize(
    ("bench_line", "expected"),
    [
        (
            '{"input": "你好", "responses": [], "rank": {}, "category": ["理解"]}',
            "bad.jsonl:1: responses: empty list",
        ),
        (
            '{"input": "你好", "responses": [{"id": "a", "content": "好"}], "rank": {"z": 1}, "category": ["理解"]}',
            "bad.jsonl:1: rank: rank names unknown response id 'z'",
        ),
        ("not json", "bad.jsonl:1: invalid JSON"),
    ],
)
def test_bad_bench_gives_one_clear_error(tmp_path: Path, sample_paths, bench_line: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(bench_line + "\n", encoding="utf-8")
    run = cheems("eval", bad, "--rewards", sample_paths[1], "--json", tmp_path / "out.json")
    assert run.returncode == 2
    assert expected in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "out.json").exists()


def test_missing_reward_is_reported(tmp_path: Path, sample_paths) -> None:  # type: ignore[no-untyped-def]
    bench, _ = sample_paths
    rewards = tmp_path / "rewards.jsonl"
    rewards.write_text("", encoding="utf-8")
    run = cheems("eval", *bench, "--rewards", rewards)
    assert run.returncode == 2 and "no reward for response" in run.stderr


def test_missing_file_is_a_usage_error(tmp_path: Path, sample_paths) -> None:  # type: ignore[no-untyped-def]
    run = cheems("eval", tmp_path / "nope.jsonl", "--rewards", sample_paths[1])
    assert run.returncode == 2 and "does not exist" in run.stderr


def test_train_rejects_an_unknown_recipe_and_a_bad_override() -> None:
    run = cheems("train", "--recipe", "nope")
    assert run.returncode == 2 and "unknown recipe 'nope'" in run.stderr
    run = cheems("train", "--set", "micro_batch_size=zero")
    assert run.returncode == 2 and "micro_batch_size" in run.stderr
    run = cheems("train", "--set", "colour=blue")
    assert run.returncode == 2 and "colour" in run.stderr


def test_train_with_a_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    run = cheems("train", "--set", f"model={tmp_path / 'absent'}", "--set", f"out_dir={tmp_path / 'out'}")
    assert run.returncode == 2 and "is not a directory" in run.stderr and "Traceback" not in run.stderr
