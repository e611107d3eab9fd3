"""Conflict resolution (paper Algorithm 1, Appendix C) as a pure function.

Annotations become a directed preference graph over response ids: `a > b` adds the edge a -> b,
`a = b` adds both a -> b and b -> a. Cycles are conflicts: each is merged into one node, and this
repeats until the graph is acyclic. Nodes are then peeled layer by layer: the nodes with no
incoming edge form rank 1, and so on. Responses merged together share a rank.

Merging cycles until none is left ends, whatever the order of merges, in the graph's strongly
connected components (a cycle never leaves its component, and each component is one cycle-merge
fixpoint), so this computes the condensation directly; that also makes the result independent of
annotation order.

Conflict ratio (Table 5): the share of pairwise relations in the annotations that the resolved
ranking contradicts. A preference a > b is kept iff rank(a) < rank(b); a tie a = b is kept iff
rank(a) == rank(b). An order annotation [[a], [b, c]] contributes the relations a > b, a > c and
b = c. Since ties always end inside one merged node, only preferences lying on a cycle count as
conflicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations

import networkx as nx


@dataclass(frozen=True)
class Relation:
    """`better` > `worse`, or a tie when `tie` (then the order of the two is irrelevant)."""

    better: str
    worse: str
    tie: bool = False


def relations_of_order(groups: Sequence[Sequence[str]]) -> list[Relation]:
    """An ordering with ties, best group first: every cross-group pair ordered, every in-group pair tied."""
    out = [Relation(a, b, tie=True) for group in groups for a, b in combinations(group, 2)]
    for i, upper in enumerate(groups):
        out += [Relation(a, b) for lower in groups[i + 1 :] for a in upper for b in lower]
    return out


@dataclass(frozen=True)
class Resolution:
    rank: dict[str, int]  # response id -> rank (1 = best)
    relations: int
    conflicts: int  # relations the ranking contradicts
    merged_nodes: int  # merged nodes: groups of two or more responses fused by cycles

    @property
    def conflict_ratio(self) -> float:
        return self.conflicts / self.relations if self.relations else 0.0


def preference_graph(relations: Iterable[Relation], nodes: Iterable[str] = ()) -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(nodes)
    for r in relations:
        graph.add_edge(r.better, r.worse)
        if r.tie:
            graph.add_edge(r.worse, r.better)
    return graph


def resolve(relations: Sequence[Relation], nodes: Iterable[str] = ()) -> Resolution:
    """Partial ranking of every node mentioned (plus `nodes`), with conflict statistics."""
    graph = preference_graph(relations, nodes)
    dag = nx.condensation(graph)  # node i has attribute "members": the original ids merged into it
    rank = {}
    for layer, members in enumerate(nx.topological_generations(dag), start=1):
        for node in members:
            for response in dag.nodes[node]["members"]:
                rank[response] = layer
    conflicts = sum(1 for r in relations if not _kept(r, rank))
    merged = sum(1 for node in dag.nodes if len(dag.nodes[node]["members"]) > 1)
    return Resolution(rank, len(relations), conflicts, merged)


def _kept(relation: Relation, rank: dict[str, int]) -> bool:
    a, b = rank[relation.better], rank[relation.worse]
    return a == b if relation.tie else a < b
