"""CheemsBench jsonl, exactly as the official repository lays it out.

One line per prompt:
    {"input": str, "responses": [{"id": str, "content": str}, ...],
     "rank": {id: int, ...}, "category": [level1, level2, ...]}
Lower rank is better; equal ranks are ties. `category[0]` is the category metrics are averaged over.
Like the official loader, `prompt` is accepted for `input` and integer strings for ranks; other
fields (e.g. `sys_prompt`) are kept and written back unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from cheems.errors import FormatError
from cheems.formats.jsonl import iter_objects, require, write_objects
from cheems.formats.responses import Response, parse_responses

_INT = re.compile(r"^\s*[+-]?\d+\s*$")
_KNOWN = {"input", "prompt", "responses", "rank", "category"}


@dataclass(frozen=True)
class BenchItem:
    input: str
    responses: tuple[Response, ...]
    rank: Mapping[str, int]
    category: tuple[str, ...]
    extra: Mapping[str, Any] = field(default_factory=dict)
    line: int = field(default=0, compare=False)  # where it was read, for error messages

    @property
    def primary_category(self) -> str:
        return self.category[0]

    def ranks(self) -> list[int]:
        """Ranks in response order."""
        return [self.rank[r.id] for r in self.responses]

    def to_json(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "responses": [r.to_json() for r in self.responses],
            "rank": dict(self.rank),
            "category": list(self.category),
            **self.extra,
        }


def ranked_pairs(ranks: Sequence[int]) -> list[tuple[int, int]]:
    """Index pairs (better, worse) for every two responses with different gold ranks (lower is better)."""
    return [
        (i, j) if ranks[i] < ranks[j] else (j, i) for i, j in combinations(range(len(ranks)), 2) if ranks[i] != ranks[j]
    ]


def parse_bench_record(obj: dict[str, Any], path: str | Path, line: int) -> BenchItem:
    """Validate one decoded line; FormatError names the file, line and field."""
    text = require(obj, prompt_key(obj), str, path, line)
    responses = parse_responses(require(obj, "responses", list, path, line), path, line)
    rank = _parse_rank(require(obj, "rank", dict, path, line), responses, path, line)
    category = require(obj, "category", list, path, line)
    if not category or not all(isinstance(c, str) and c for c in category):
        raise FormatError(path, line, "expected a non-empty list of non-empty strings", field="category")
    extra = {k: v for k, v in obj.items() if k not in _KNOWN}
    return BenchItem(text, responses, rank, tuple(category), extra, line)


def prompt_key(obj: dict[str, Any]) -> str:
    """The official loader reads `input`, falling back to `prompt`."""
    return "input" if "input" in obj or "prompt" not in obj else "prompt"


def _parse_rank(raw: dict[str, Any], responses: tuple[Response, ...], path: str | Path, line: int) -> dict[str, int]:
    ids = {r.id for r in responses}
    rank: dict[str, int] = {}
    for rid, value in raw.items():
        if rid not in ids:
            raise FormatError(path, line, f"rank names unknown response id {rid!r}", field="rank")
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and _INT.match(value))):
            raise FormatError(path, line, f"rank of {rid!r} is not an integer: {_preview(value)}", field="rank")
        try:
            rank[rid] = int(value)
        except ValueError:  # an integer string longer than Python converts (sys.get_int_max_str_digits())
            message = f"rank of {rid!r} is too long: {len(str(value))} characters"
            raise FormatError(path, line, message, field="rank") from None
    unranked = [r.id for r in responses if r.id not in rank]
    if unranked:
        raise FormatError(path, line, f"response id {unranked[0]!r} has no rank", field="rank")
    return rank


def _preview(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def read_bench(path: str | Path) -> list[BenchItem]:
    """Read a whole bench file; a prompt appearing twice is an error (the official loader asserts too)."""
    items: list[BenchItem] = []
    first_line: dict[str, int] = {}
    for line, obj in iter_objects(path):
        item = parse_bench_record(obj, path, line)
        if item.input in first_line:
            raise FormatError(path, line, f"duplicate prompt, first seen on line {first_line[item.input]}", "input")
        first_line[item.input] = line
        items.append(item)
    return items


def write_bench(path: str | Path, items: Iterable[BenchItem]) -> int:
    """Write items in the official layout, atomically."""
    return write_objects(path, (item.to_json() for item in items))
