"""evaluate_files on real files: subsets by stem, and errors across files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evaluator.errors import EvaluationError
from evaluator.evaluate import evaluate_files
from evaluator.metrics import Semantics


def test_sample_evaluates_both_subsets(sample_paths: tuple[list[Path], Path]) -> None:
    bench, rewards = sample_paths
    result = evaluate_files(bench, rewards)
    assert list(result.subsets) == ["open", "human"]
    assert result.semantics is Semantics.PAPER
    for subset in result.subsets.values():
        assert 0.0 < subset.accuracy < 1.0 and subset.prompts == 18
    assert result.overall == pytest.approx(sum((s.accuracy + s.exact_match) / 2 for s in result.subsets.values()) / 2)


def test_sample_has_reward_ties_so_the_semantics_differ(sample_paths: tuple[list[Path], Path]) -> None:
    bench, rewards = sample_paths
    paper = evaluate_files(bench, rewards, Semantics.PAPER)
    official = evaluate_files(bench, rewards, Semantics.OFFICIAL)
    assert official.overall > paper.overall


def test_two_files_with_one_stem_are_rejected(tmp_path: Path, sample_paths: tuple[list[Path], Path]) -> None:
    bench, rewards = sample_paths
    (tmp_path / "x").mkdir()
    copy = shutil.copy(bench[0], tmp_path / "x" / "open.jsonl")
    with pytest.raises(EvaluationError, match="both be subset 'open'"):
        evaluate_files([bench[0], copy], rewards)


def test_rewards_missing_for_a_subset(tmp_path: Path, sample_paths: tuple[list[Path], Path]) -> None:
    bench, rewards = sample_paths
    partial = tmp_path / "rewards.jsonl"
    lines = rewards.read_text(encoding="utf-8").splitlines()
    partial.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    with pytest.raises(EvaluationError, match=r"human.jsonl:18: no reward"):
        evaluate_files(bench, partial)
