"""Double annotation (paper Appendix D): a share of the triples is annotated twice, by two independent people,
and the two annotations' agreement is measured against the paper's 90% target (pure; the service and overview).

    config = DoublingConfig(share=0.2, seed=0)
    doubled(task_id, config)                     # True for about 20% of task ids, the same ones every run
    figures = double_agreement(pairs, judgments) # pairs: [(Judgment, Judgment)], the two copies of a triple;
                                                 # judgments: every annotation of their prompts
    figures.agreement, figures.by_pair[("张三", "李四")].agreement, TARGET

Which triples are doubled depends only on the task id and the seed (a hash), so creating a prompt's tasks again
doubles the same ones. Agreement compares the pairwise relations of the two annotations of a triple: for each
pair of responses both annotations relate, they agree when they prefer the same one or both call it a tie. Only
the relations resolution counts are compared (`quality.counted`, the rule of `algorithm.discards`): a response
either annotation discarded, or that most annotations of the prompt discarded, is left out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from services.annotation.algorithm.quality import Judgment, counted, prompt_drops
from services.annotation.algorithm.resolve import Relation

TARGET = 0.9  # the agreement two independent annotators must reach (Appendix D)


@dataclass(frozen=True)
class DoublingConfig:
    """share: the fraction of a prompt's triples that get a second task (copy 1), in [0, 1];
    seed: which triples (another seed, other triples)."""

    share: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.share, int | float) and 0.0 <= self.share <= 1.0):
            raise ValueError(f"double_share must be a number in [0, 1], got {self.share!r}")


def doubled(task_id: str, config: DoublingConfig) -> bool:
    """Whether the task gets a second copy: its hash with the seed, read as a number in [0, 1), is below the share."""
    if config.share <= 0.0:
        return False
    digest = hashlib.sha256(f"{config.seed}:{task_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < config.share


@dataclass(frozen=True)
class Agreement:
    triples: int  # doubled triples with both copies annotated
    compared: int  # pairs of responses both annotations relate
    agreeing: int

    @property
    def agreement(self) -> float | None:
        return self.agreeing / self.compared if self.compared else None


@dataclass(frozen=True)
class DoubleAgreement(Agreement):
    by_pair: dict[tuple[str, str], Agreement] = field(default_factory=dict)  # (annotator, annotator), sorted


def verdicts(relations: Iterable[Relation]) -> dict[frozenset[str], str | None]:
    """{pair of responses: the preferred one, or None for a tie}."""
    return {frozenset((r.better, r.worse)): None if r.tie else r.better for r in relations}


def compare(first: Judgment, second: Judgment, gone: frozenset[str] = frozenset()) -> tuple[int, int]:
    """(pairs compared, pairs agreeing) of two annotations of the same triple; `gone`: the prompt's drops."""
    a, b = verdicts(counted(first, gone)), verdicts(counted(second, gone))
    common = [pair for pair in a if pair in b]
    return len(common), sum(1 for pair in common if a[pair] == b[pair])


def double_agreement(pairs: Sequence[tuple[Judgment, Judgment]], judgments: Iterable[Judgment]) -> DoubleAgreement:
    """Agreement over every doubled triple, overall and per pair of annotators; `judgments`: every annotation of the
    pairs' prompts (the pairs' own included), whose discards decide what the prompt drops."""
    drops = prompt_drops(judgments)
    totals: dict[tuple[str, str], list[int]] = {}
    for first, second in pairs:
        compared, agreeing = compare(first, second, drops.get(first.prompt_id, frozenset()))
        names = (min(first.annotator, second.annotator), max(first.annotator, second.annotator))
        counts = totals.setdefault(names, [0, 0, 0])
        counts[0], counts[1], counts[2] = counts[0] + 1, counts[1] + compared, counts[2] + agreeing
    by_pair = {names: Agreement(*counts) for names, counts in sorted(totals.items())}
    triples, compared, agreeing = (sum(c[i] for c in totals.values()) for i in range(3))
    return DoubleAgreement(triples, compared, agreeing, by_pair)
