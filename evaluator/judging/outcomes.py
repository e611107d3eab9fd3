"""A generative judge's verdicts as CheemsBench metrics (pure): two orders per pair, one outcome per pair.

The judge is asked about every human-ordered pair of a prompt (two responses with different gold
ranks; pairs the humans tied count in no metric and are not asked), once with the better response
shown as answerA and once as answerB, because judges have a position bias (paper section 4.2 and
Appendix: "GPT-4o generally prefers responses that are placed later"). The two verdicts make one
outcome:

- RIGHT: both orders prefer the human-better response;
- WRONG: both orders prefer the human-worse response;
- TIE: both orders answer C ("no clear difference");
- INCONSISTENT: the orders disagree (the verdict follows the position, or one order says C);
- UNPARSEABLE: an order's answer had no A/B/C after its retries.

The paper's accuracy counts a comparison right only when the preferred response strictly wins
(eq. 1, r_w > r_l); its exact match needs every comparison of the prompt right (eq. 2). A judge
gives no scores, so each outcome stands in for a margin r_w - r_l: RIGHT +1, TIE and INCONSISTENT
0 (an inconsistent verdict counts as a tie), WRONG and UNPARSEABLE -1. Then the metrics are the
reward model's, semantics included: `paper` (default) makes a tie, so an inconsistent verdict,
wrong in accuracy and exact match; `official` lets it keep exact match (only WRONG and UNPARSEABLE
break it). Accuracy is right / pairs either way. No calibration error: a judge has no margins.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from evaluator.errors import EvaluationError
from evaluator.metrics import EvalResult, Semantics, macro_average, margin_metrics, overall
from services.annotation.judge.pairwise import Verdict


class Outcome(StrEnum):
    RIGHT = "right"
    WRONG = "wrong"
    TIE = "tie"
    INCONSISTENT = "inconsistent"
    UNPARSEABLE = "unparseable"


MARGIN = {
    Outcome.RIGHT: 1.0,
    Outcome.TIE: 0.0,
    Outcome.INCONSISTENT: 0.0,
    Outcome.WRONG: -1.0,
    Outcome.UNPARSEABLE: -1.0,
}


def preference(verdict: Verdict, better_shown_first: bool) -> int:
    """+1 if the verdict prefers the human-better response, -1 the worse one, 0 for C."""
    if verdict is Verdict.TIE:
        return 0
    return 1 if (verdict is Verdict.A) == better_shown_first else -1


def combine(better_first: Verdict | None, better_second: Verdict | None) -> Outcome:
    """One pair's outcome from its verdict with the better response as answerA, then as answerB
    (None: unparseable)."""
    if better_first is None or better_second is None:
        return Outcome.UNPARSEABLE
    one, two = preference(better_first, True), preference(better_second, False)
    if one != two:
        return Outcome.INCONSISTENT
    return {1: Outcome.RIGHT, -1: Outcome.WRONG, 0: Outcome.TIE}[one]


@dataclass(frozen=True)
class JudgedPrompt:
    """One bench prompt: its first-level category and the outcome of each human-ordered pair."""

    category: str
    outcomes: tuple[Outcome, ...]


def judged_result(subsets: Mapping[str, Sequence[JudgedPrompt]], semantics: Semantics = Semantics.PAPER) -> EvalResult:
    """Accuracy and exact match per category, macro-averaged per subset, and the paper's Overall."""
    if not subsets:
        raise EvaluationError("no subsets to evaluate")
    metrics = {}
    for name, prompts in subsets.items():
        groups: dict[str, list[list[float]]] = defaultdict(list)
        for prompt in prompts:
            groups[prompt.category].append([MARGIN[o] for o in prompt.outcomes])
        metrics[name] = macro_average({c: margin_metrics(groups[c], semantics) for c in sorted(groups)})
    return EvalResult(semantics, overall(metrics), metrics)


def tally(prompts: Sequence[JudgedPrompt]) -> dict[str, int]:
    """How many pairs had each outcome (every outcome named, zeros included)."""
    counts = Counter(o for p in prompts for o in p.outcomes)
    return {o.value: counts[o] for o in Outcome}
