"""A discarded response is each annotator's vote, not a veto: which relations survive the discards (pure).

    kept = kept_relations([Vote(relations, seen={"r1", "r2", "r3"}, discarded={"r3"}), ...])
    gone = dropped(votes); surviving(vote, gone)          # one vote's relations that count (the overview's figures)

Annotators discard responses with substantial meaningless content (paper section 3.1: garbled or code-switched
text); resolution (Algorithm 1) then orders the responses left. One annotation must not decide that for everyone:
a response is dropped for the prompt (every relation touching it, from every annotation) only when a strict
majority of the annotations that saw it (ranked or discarded it) discarded it. Otherwise only the discarding
annotations' own relations touching it go, and the others' judgments of it stand. One annotator who saw a response
alone and discarded it is that majority; one of two is not. The rankings (the service's resolution) and the admin
overview's figures (`quality`, `doubles`) count relations by this one rule.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from services.annotation.algorithm.resolve import Relation


@dataclass(frozen=True)
class Vote:
    """One annotation: its relations, the responses it saw, and those it discarded."""

    relations: Sequence[Relation]
    seen: frozenset[str] = field(default_factory=frozenset)
    discarded: frozenset[str] = field(default_factory=frozenset)


def vote_of(relations: Sequence[Relation], discarded: Iterable[str]) -> Vote:
    """The vote of an annotation: it saw what its relations name and what it discarded."""
    gone = frozenset(discarded)
    return Vote(relations, frozenset(k for r in relations for k in (r.better, r.worse)) | gone, gone)


def dropped(votes: Sequence[Vote]) -> frozenset[str]:
    """The responses a strict majority of the annotations that saw them discarded."""
    seen = Counter(k for vote in votes for k in vote.seen)
    against = Counter(k for vote in votes for k in vote.discarded)
    return frozenset(k for k, n in against.items() if 2 * n > seen[k])


def kept_relations(votes: Sequence[Vote]) -> list[Relation]:
    """Every vote's relations but those touching a dropped response or one the vote itself discarded."""
    gone = dropped(votes)
    return [r for vote in votes for r in surviving(vote, gone)]


def surviving(vote: Vote, gone: frozenset[str]) -> list[Relation]:
    """The vote's relations touching neither a response in `gone` nor one it discarded."""
    out = gone | vote.discarded
    return [r for r in vote.relations if r.better not in out and r.worse not in out]
