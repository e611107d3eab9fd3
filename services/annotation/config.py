"""How the annotation service makes a prompt's tasks: the rule filter first, then triples, then their doubles.

    AnnotationService(engine, tasks=TaskConfig(rule_filter=FilterConfig(max_chars=6000), doubling=DoublingConfig(0.2)))

rule_filter (paper section 4.1, `algorithm.filters`): every response is judged before tasks are made; a rejected
one is stored with its reason (`services.store.filtered`) and put in no task. On by default, with the paper's
handling (the same rules for every prompt); None turns it off (every response annotated, stored reasons cleared).
doubling (`algorithm.doubles`): the share of triples annotated a second time by another person; none by default.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.annotation.algorithm.doubles import DoublingConfig
from services.annotation.algorithm.filters import FilterConfig


@dataclass(frozen=True)
class TaskConfig:
    rule_filter: FilterConfig | None = field(default_factory=FilterConfig)
    doubling: DoublingConfig = field(default_factory=DoublingConfig)
