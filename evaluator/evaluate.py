"""Evaluate a rewards file on CheemsBench files: the work behind `cheems eval`.

Each bench file is one subset, named by its file stem (`open.jsonl` -> `open`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cheems.cheemsbench import BenchItem, read_bench
from cheems.rewards_file import read_rewards
from evaluator.calibration import DEFAULT_BINS
from evaluator.errors import EvaluationError
from evaluator.join import join_rewards
from evaluator.metrics import EvalResult, Semantics, evaluate_subsets


def subset_name(path: str | Path) -> str:
    return Path(path).stem


def load_subsets(bench_paths: Sequence[str | Path]) -> dict[str, tuple[str, list[BenchItem]]]:
    """Read each bench file; subset name -> (path, items). Two files with one stem is an error."""
    subsets: dict[str, tuple[str, list[BenchItem]]] = {}
    for path in bench_paths:
        name = subset_name(path)
        if name in subsets:
            raise EvaluationError(f"{path} and {subsets[name][0]} would both be subset {name!r}; rename one")
        subsets[name] = (str(path), read_bench(path))
    return subsets


def evaluate_files(
    bench_paths: Sequence[str | Path],
    rewards_path: str | Path,
    semantics: Semantics = Semantics.PAPER,
    ece_bins: int = DEFAULT_BINS,
) -> EvalResult:
    """Read bench and reward files and compute every metric."""
    subsets = load_subsets(bench_paths)
    rewards = read_rewards(rewards_path)
    scored = {name: join_rewards(items, rewards, path) for name, (path, items) in subsets.items()}
    return evaluate_subsets(scored, semantics, ece_bins)
