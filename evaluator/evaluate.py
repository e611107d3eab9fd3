"""The one evaluation path: loaded bench subsets + a rewards mapping + options -> EvalResult.

`cheems eval --rewards` (`evaluate_files`), the streaming evaluator's result sink and evaluation
during training all call `evaluate`; only where the rewards come from differs. Each bench file is
one subset, named by its file stem (`open.jsonl` -> `open`). A file is CheemsBench or RewardBench
(`cheems.formats.benchfile`: detected unless a format is given).

    options = EvalOptions(Semantics.OFFICIAL, ece_bins=10)
    result = evaluate(load_subsets(["open.jsonl", "human.jsonl"]), read_rewards("rewards.jsonl"), options)
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cheems.formats.benchfile import BenchFormat, read_bench_file
from cheems.formats.cheemsbench import BenchItem
from cheems.formats.rewards_file import RewardKey, read_rewards
from evaluator.calibration import DEFAULT_BINS
from evaluator.errors import EvaluationError
from evaluator.join import join_rewards
from evaluator.metrics import EvalResult, Semantics, evaluate_subsets

Subsets = dict[str, tuple[str, list[BenchItem]]]  # subset name -> (path, items)


@dataclass(frozen=True)
class EvalOptions:
    """How rewards become metrics.

    semantics: how a reward tie counts: "paper" (wrong in accuracy and exact match) or "official"
        (wrong in accuracy only); see `evaluator.metrics`.
    ece_bins: equal-width bins of the expected calibration error (>= 1).
    """

    semantics: Semantics = Semantics.PAPER
    ece_bins: int = DEFAULT_BINS

    def __post_init__(self) -> None:
        try:  # the plain string values ("paper") are taken too, as read from a store or a command line
            object.__setattr__(self, "semantics", Semantics(self.semantics))
        except ValueError:
            allowed = ", ".join(repr(s.value) for s in Semantics)
            raise EvaluationError(f"semantics: expected one of {allowed}, got {self.semantics!r}") from None
        if isinstance(self.ece_bins, bool) or not isinstance(self.ece_bins, int) or self.ece_bins < 1:
            raise EvaluationError(f"ece_bins: expected an integer >= 1, got {self.ece_bins!r}")


DEFAULT_OPTIONS = EvalOptions()


def subset_name(path: str | Path) -> str:
    return Path(path).stem


class BenchCache:
    """Bench files already read by this process, re-read only when a file changes (size or mtime).

    A long-running result sink finishes many runs over the same files; keeping the last `limit`
    files spares it reading and validating them again for every run.
    """

    def __init__(self, limit: int = 16) -> None:
        self.limit = limit
        self._files: OrderedDict[tuple[str, int, int, str], list[BenchItem]] = OrderedDict()

    def read(self, path: str | Path, fmt: BenchFormat = BenchFormat.AUTO) -> list[BenchItem]:
        status = os.stat(path)
        key = (str(Path(path).resolve()), status.st_size, status.st_mtime_ns, fmt.value)
        if key in self._files:
            self._files.move_to_end(key)
            return self._files[key]
        items = self._files[key] = read_bench_file(path, fmt)
        while len(self._files) > self.limit:
            self._files.popitem(last=False)
        return items


def load_subsets(
    bench_paths: Sequence[str | Path], cache: BenchCache | None = None, fmt: BenchFormat = BenchFormat.AUTO
) -> Subsets:
    """Read each bench file in `fmt` (through `cache` when given); two files with one stem is an error."""
    subsets: Subsets = {}
    for path in bench_paths:
        name = subset_name(path)
        if name in subsets:
            raise EvaluationError(f"{path} and {subsets[name][0]} would both be subset {name!r}; rename one")
        subsets[name] = (str(path), cache.read(path, fmt) if cache is not None else read_bench_file(path, fmt))
    return subsets


def evaluate(
    subsets: Mapping[str, tuple[str, Sequence[BenchItem]]],
    rewards: Mapping[RewardKey, float],
    options: EvalOptions = DEFAULT_OPTIONS,
) -> EvalResult:
    """Join every subset's items with their rewards and compute every metric."""
    scored = {name: join_rewards(items, rewards, path) for name, (path, items) in subsets.items()}
    return evaluate_subsets(scored, options.semantics, options.ece_bins)


def evaluate_files(
    bench_paths: Sequence[str | Path],
    rewards_path: str | Path,
    options: EvalOptions = DEFAULT_OPTIONS,
    fmt: BenchFormat = BenchFormat.AUTO,
) -> EvalResult:
    """Read bench and reward files and compute every metric (`cheems eval --rewards`)."""
    return evaluate(load_subsets(bench_paths, fmt=fmt), read_rewards(rewards_path), options)
