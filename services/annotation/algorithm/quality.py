"""How careful each annotator is, from their annotations and the resolved rankings (pure; the admin overview).

    figures = annotator_quality(judgments, rankings)     # {annotator: Quality}, people only
    figures["张三"].agreement, figures["张三"].cycle_share

Agreement: the share of an annotator's pairwise relations (an order [[a], [b, c]] gives a > b, a > c and
b = c) that the prompt's resolved ranking keeps: a > b is kept iff rank(a) < rank(b), a tie iff the ranks are
equal. Only the relations resolution counts are read (`counted`: a discard is its annotator's vote, the rule of
`algorithm.discards`). Relations on prompts without a ranking, or with a response the ranking lacks, are not
compared.

Cycle share: the share of an annotator's annotations with a preference lying on a cycle of their prompt's
preference graph (the counted relations of every annotation of the prompt, people's and AI's): a preference a > b
whose b also
reaches a. These are the conflicts resolution merges away; an annotator with many of them often disagrees
with everyone else, or with themselves.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx

from services.annotation.algorithm.discards import Vote, dropped, surviving, vote_of
from services.annotation.algorithm.resolve import Relation, preference_graph, relations_of_order


@dataclass(frozen=True)
class Judgment:
    """One stored annotation: who, on which prompt, its relations, the responses it discarded."""

    annotator: str
    kind: str  # "human" or "ai"
    prompt_id: str
    relations: tuple[Relation, ...]
    discarded: frozenset[str] = frozenset()

    def vote(self) -> Vote:
        """This annotation as a discard vote (`algorithm.discards`)."""
        return vote_of(self.relations, self.discarded)


@dataclass(frozen=True)
class Quality:
    annotator: str
    annotations: int
    compared: int  # relations compared with a resolved ranking
    agreeing: int
    on_cycles: int  # annotations with a preference on a cycle

    @property
    def agreement(self) -> float | None:
        return self.agreeing / self.compared if self.compared else None

    @property
    def cycle_share(self) -> float | None:
        return self.on_cycles / self.annotations if self.annotations else None


def stored_relations(result: Mapping[str, Any]) -> tuple[Relation, ...]:
    """The relations of a stored result ({"order"}, {"better", "worse"} or {"equal"}); the store checked its shape."""
    if "order" in result:
        return tuple(relations_of_order(result["order"]))
    if "better" in result:
        return (Relation(result["better"], result["worse"]),)
    if "equal" in result:
        a, b = result["equal"]
        return (Relation(a, b, tie=True),)
    return ()


def prompt_drops(judgments: Iterable[Judgment]) -> dict[str, frozenset[str]]:
    """{prompt id: the responses dropped for it}: `discards.dropped` over all its annotations, as resolution does."""
    return {prompt_id: dropped([j.vote() for j in group]) for prompt_id, group in by_prompt(judgments).items()}


def counted(judgment: Judgment, gone: frozenset[str]) -> list[Relation]:
    """The judgment's relations resolution counts, `gone` being its prompt's drops (`discards.surviving`)."""
    return surviving(judgment.vote(), gone)


def by_prompt(judgments: Iterable[Judgment]) -> dict[str, list[Judgment]]:
    grouped: dict[str, list[Judgment]] = defaultdict(list)
    for judgment in judgments:
        grouped[judgment.prompt_id].append(judgment)
    return grouped


def cycle_pairs(relations: Iterable[Relation]) -> set[tuple[str, str]]:
    """(better, worse) of every preference whose two responses share a strongly connected component."""
    relations = list(relations)
    component: dict[str, int] = {}
    for number, members in enumerate(nx.strongly_connected_components(preference_graph(relations))):
        if len(members) > 1:
            component.update(dict.fromkeys(members, number))
    return {
        (r.better, r.worse)
        for r in relations
        if not r.tie and r.better in component and component[r.better] == component.get(r.worse)
    }


def annotator_quality(judgments: Sequence[Judgment], rankings: Mapping[str, Mapping[str, int]]) -> dict[str, Quality]:
    """{annotator: Quality} of every person (kind "human") among `judgments`; `rankings`: {prompt id: rank}."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # annotations, compared, agreeing, on cycles
    for prompt_id, group in by_prompt(judgments).items():
        gone = dropped([j.vote() for j in group])  # this prompt's drops, as `prompt_drops` finds them
        kept_of = [counted(j, gone) for j in group]
        on_cycle = cycle_pairs(r for kept in kept_of for r in kept)
        rank = rankings.get(prompt_id, {})
        for judgment, kept in zip(group, kept_of, strict=True):
            if judgment.kind != "human":
                continue
            compared = [r for r in kept if r.better in rank and r.worse in rank]
            figures = counts[judgment.annotator]
            figures[0] += 1
            figures[1] += len(compared)
            figures[2] += sum(1 for r in compared if agrees(r, rank))
            figures[3] += any((r.better, r.worse) in on_cycle for r in kept if not r.tie)
    return {name: Quality(name, *figures) for name, figures in sorted(counts.items())}


def agrees(relation: Relation, rank: Mapping[str, int]) -> bool:
    a, b = rank[relation.better], rank[relation.worse]
    return a == b if relation.tie else a < b
