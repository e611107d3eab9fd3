"""CheemsBench metrics as pure functions (paper section 3.4, equations (1) and (2)).

For each prompt, every pair of responses with different gold ranks is a comparison (lower rank is
better). Accuracy pools comparisons within a first-level category; exact match is per prompt, 1
iff every comparison of the prompt is right. Both are macro-averaged over categories to give a
subset's figures, and Overall is the mean over subsets of (accuracy + exact match) / 2.

Ties in reward, the one place the paper and the official code disagree:
- `paper` (default): a comparison is right iff r_better > r_worse, in both metrics.
- `official`: accuracy as above, but exact match is broken only by a strict reversal
  (r_better < r_worse), so a constant reward model scores exact match 1.0.
A prompt whose responses all share one rank has no comparisons: it adds nothing to accuracy and
counts as an exact match (an empty conjunction is true), as in both the paper and the official code.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from cheems.formats.cheemsbench import ranked_pairs
from evaluator.calibration import DEFAULT_BINS, expected_calibration_error
from evaluator.errors import EvaluationError


class Semantics(StrEnum):
    PAPER = "paper"
    OFFICIAL = "official"


@dataclass(frozen=True)
class ScoredPrompt:
    """One benchmark prompt: its first-level category, gold ranks and rewards, in response order."""

    category: str
    ranks: tuple[int, ...]
    rewards: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.ranks) != len(self.rewards):
            raise ValueError(f"ranks and rewards differ in length: {len(self.ranks)} != {len(self.rewards)}")


@dataclass(frozen=True)
class CategoryMetrics:
    accuracy: float | None  # None when the category has no comparisons
    exact_match: float
    ece: float | None
    prompts: int
    pairs: int


@dataclass(frozen=True)
class SubsetMetrics:
    accuracy: float
    exact_match: float
    ece: float | None
    per_category: Mapping[str, CategoryMetrics]
    prompts: int
    pairs: int


@dataclass(frozen=True)
class EvalResult:
    semantics: Semantics
    overall: float
    subsets: Mapping[str, SubsetMetrics]


def margins(prompt: ScoredPrompt) -> list[float]:
    """r_better - r_worse for each comparison of the prompt."""
    return [prompt.rewards[b] - prompt.rewards[w] for b, w in ranked_pairs(prompt.ranks)]


def is_exact(prompt_margins: Sequence[float], semantics: Semantics) -> bool:
    if semantics is Semantics.OFFICIAL:
        return all(m >= 0 for m in prompt_margins)
    return all(m > 0 for m in prompt_margins)


def category_metrics(
    prompts: Sequence[ScoredPrompt], semantics: Semantics = Semantics.PAPER, ece_bins: int = DEFAULT_BINS
) -> CategoryMetrics:
    """Pooled accuracy and mean exact match of the prompts of one category."""
    per_prompt = [margins(p) for p in prompts]
    ece = expected_calibration_error([m for ms in per_prompt for m in ms], ece_bins)
    return margin_metrics(per_prompt, semantics, ece)


def margin_metrics(
    per_prompt: Sequence[Sequence[float]], semantics: Semantics = Semantics.PAPER, ece: float | None = None
) -> CategoryMetrics:
    """Accuracy and exact match of one category from each prompt's comparison margins (> 0: right)."""
    if not per_prompt:
        raise EvaluationError("a category needs at least one prompt")
    pooled = [m for ms in per_prompt for m in ms]
    accuracy = sum(1 for m in pooled if m > 0) / len(pooled) if pooled else None
    exact = sum(1 for ms in per_prompt if is_exact(ms, semantics)) / len(per_prompt)
    return CategoryMetrics(accuracy, exact, ece, len(per_prompt), len(pooled))


def subset_metrics(
    prompts: Sequence[ScoredPrompt], semantics: Semantics = Semantics.PAPER, ece_bins: int = DEFAULT_BINS
) -> SubsetMetrics:
    """Per-category metrics, macro-averaged; categories without comparisons are left out of accuracy."""
    groups: dict[str, list[ScoredPrompt]] = defaultdict(list)
    for prompt in prompts:
        groups[prompt.category].append(prompt)
    return macro_average({name: category_metrics(groups[name], semantics, ece_bins) for name in sorted(groups)})


def macro_average(per_category: Mapping[str, CategoryMetrics]) -> SubsetMetrics:
    """A subset's figures: the mean over its categories (those without comparisons left out of accuracy)."""
    accuracies = [c.accuracy for c in per_category.values() if c.accuracy is not None]
    if not accuracies:
        raise EvaluationError("no comparisons: in every prompt all responses share one gold rank")
    eces = [c.ece for c in per_category.values() if c.ece is not None]
    return SubsetMetrics(
        accuracy=_mean(accuracies),
        exact_match=_mean([c.exact_match for c in per_category.values()]),
        ece=_mean(eces) if eces else None,
        per_category=per_category,
        prompts=sum(c.prompts for c in per_category.values()),
        pairs=sum(c.pairs for c in per_category.values()),
    )


def evaluate_subsets(
    subsets: Mapping[str, Sequence[ScoredPrompt]],
    semantics: Semantics = Semantics.PAPER,
    ece_bins: int = DEFAULT_BINS,
) -> EvalResult:
    """Metrics of every subset and the paper's Overall: mean over subsets of (accuracy + exact match) / 2."""
    if not subsets:
        raise EvaluationError("no subsets to evaluate")
    metrics = {name: subset_metrics(prompts, semantics, ece_bins) for name, prompts in subsets.items()}
    return EvalResult(semantics, overall(metrics), metrics)


def overall(subsets: Mapping[str, SubsetMetrics]) -> float:
    return _mean([(s.accuracy + s.exact_match) / 2 for s in subsets.values()])


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)
