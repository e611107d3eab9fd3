"""How the annotation service makes a prompt's tasks, and how it hands them out.

    AnnotationService(engine, tasks=TaskConfig(rule_filter=FilterConfig(max_chars=6000), doubling=DoublingConfig(0.2)),
                      queue=QueueConfig(max_held=5, lease_seconds=1800, people_per_prompt=8))

rule_filter (paper section 4.1, `algorithm.filters`): every response is judged before tasks are made; a rejected
one is stored with its reason (`services.store.filtered`) and put in no task. On by default, with the paper's
handling (the same rules for every prompt); None turns it off (every response annotated, stored reasons cleared).
doubling (`algorithm.doubles`): the share of triples annotated a second time by another person; none by default.

QueueConfig (`services.store.tasks`, where the rule it sets is enforced; its fields say what each does and why its
default): how many tasks a person holds at once (5), how long an idle one stays theirs alone (30 minutes), and how
many different people a prompt's tasks need (0: the paper's rule, every triple a different person). The command
line's `cheems service annotation` (and `cheems up`) `--max-held --lease --people-per-prompt` set it; `cheems
status --people-per-prompt` (the service's) says which prompts the accounts cannot finish.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.annotation.algorithm.doubles import DoublingConfig
from services.annotation.algorithm.filters import FilterConfig
from services.store.tasks import QueueConfig

__all__ = ["QueueConfig", "TaskConfig"]


@dataclass(frozen=True)
class TaskConfig:
    rule_filter: FilterConfig | None = field(default_factory=FilterConfig)
    doubling: DoublingConfig = field(default_factory=DoublingConfig)
