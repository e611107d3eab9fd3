"""The annotator page's submit body, checked (pure): each error names the field and is a 400 at the edge.

    {"annotation_id": "web-…", "order": [["r2"], ["r1", "r3"]], "discarded": []}

`order` lists groups best first (a group is a tie); `discarded` the responses marked unusable. Each of the
task's responses is either ranked or discarded, exactly once. When all are discarded the stored order is
the three as one group: resolution leaves discarded responses out, so it adds no preference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cheems.errors import InvalidInput

FIELDS = {"annotation_id", "order", "discarded"}
MAX_ID = 128


class InvalidForm(InvalidInput):
    """A submit body the page would never send: not JSON, a missing or malformed field, ids not of the task."""


@dataclass(frozen=True)
class RankingForm:
    annotation_id: str
    order: list[list[str]]  # as stored: best group first
    discarded: list[str]


def string_list(field: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) and x for x in value):
        raise InvalidForm(f"{field}: expected a list of response ids")
    return value


def parse_form(body: Any, task_keys: Sequence[str]) -> RankingForm:
    """The checked form of a submit body for a task with `task_keys`; InvalidForm naming the field."""
    if not isinstance(body, dict):
        raise InvalidForm("the body must be a JSON object with annotation_id, order and discarded")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise InvalidForm(f"{unknown[0]}: unknown field (expected annotation_id, order, discarded)")
    annotation_id = body.get("annotation_id")
    if not isinstance(annotation_id, str) or not 0 < len(annotation_id) <= MAX_ID:
        raise InvalidForm(f"annotation_id: expected a non-empty string of at most {MAX_ID} characters")
    order = body.get("order", [])
    if not isinstance(order, list):
        raise InvalidForm("order: expected a list of groups (lists of response ids), best first")
    groups = [string_list(f"order[{i}]", group) for i, group in enumerate(order)]
    if any(not group for group in groups):
        raise InvalidForm("order: a group may not be empty")
    discarded = string_list("discarded", body.get("discarded", []))
    named = [key for group in groups for key in group] + discarded
    outside = [key for key in named if key not in task_keys]
    if outside:
        raise InvalidForm(f"order: {outside[0]!r} is not a response of this task")
    if len(set(named)) != len(named):
        raise InvalidForm("order: a response is named twice (ranked twice, or ranked and discarded)")
    missing = [key for key in task_keys if key not in named]
    if missing:
        raise InvalidForm(f"order: response {missing[0]!r} is neither ranked nor discarded")
    return RankingForm(annotation_id, groups or [list(discarded)], sorted(discarded))
