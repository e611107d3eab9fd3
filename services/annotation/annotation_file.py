"""The `cheems resolve` input: one prompt per line with its raw annotations.

    {"input": str, "responses": [{"id", "content"}], "category": [...],
     "annotations": [{"better": id, "worse": id} | {"equal": [id, id]} | {"order": [[id, ...], ...]}],
     "discarded": [id, ...]}                      # optional: garbled responses annotators excluded

`order` lists groups best first; members of a group are equal. Errors name the file, line and field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cheems.cheemsbench import prompt_key
from cheems.errors import FormatError
from cheems.jsonl import iter_objects, require
from cheems.responses import Response, parse_responses
from services.annotation.resolve import Relation, relations_of_order


@dataclass(frozen=True)
class AnnotatedPrompt:
    input: str
    responses: tuple[Response, ...]
    category: tuple[str, ...]
    annotations: int
    relations: tuple[Relation, ...]
    discarded: frozenset[str]
    line: int


def parse_annotated(obj: dict[str, Any], path: str | Path, line: int) -> AnnotatedPrompt:
    text = require(obj, prompt_key(obj), str, path, line)
    responses = parse_responses(require(obj, "responses", list, path, line), path, line)
    category = require(obj, "category", list, path, line)
    if not category or not all(isinstance(c, str) and c for c in category):
        raise FormatError(path, line, "expected a non-empty list of non-empty strings", field="category")
    ids = {r.id for r in responses}
    discarded = obj.get("discarded", [])
    if not isinstance(discarded, list) or not all(d in ids for d in discarded):
        raise FormatError(path, line, "expected a list of this prompt's response ids", field="discarded")
    annotations = require(obj, "annotations", list, path, line)
    relations: list[Relation] = []
    for i, anno in enumerate(annotations):
        relations += relations_of(anno, ids, path, line, f"annotations[{i}]")
    kept = [r for r in relations if r.better not in discarded and r.worse not in discarded]
    return AnnotatedPrompt(text, responses, tuple(category), len(annotations), tuple(kept), frozenset(discarded), line)


def relations_of(anno: Any, ids: set[str], path: str | Path, line: int, where: str) -> list[Relation]:
    """The pairwise relations of one annotation record; FormatError for unknown ids or a malformed record."""

    def known(rid: Any) -> str:
        if not isinstance(rid, str) or rid not in ids:
            raise FormatError(path, line, f"unknown response id {rid!r}", field=where)
        return rid

    if isinstance(anno, dict) and set(anno) == {"better", "worse"}:
        better, worse = known(anno["better"]), known(anno["worse"])
        if better == worse:
            raise FormatError(path, line, f"a response cannot be better than itself ({better!r})", field=where)
        return [Relation(better, worse)]
    if isinstance(anno, dict) and set(anno) == {"equal"}:
        pair = anno["equal"]
        if not isinstance(pair, list) or len(pair) != 2 or pair[0] == pair[1]:
            raise FormatError(path, line, "equal needs two different response ids", field=where)
        return [Relation(known(pair[0]), known(pair[1]), tie=True)]
    if isinstance(anno, dict) and set(anno) == {"order"}:
        groups = anno["order"]
        if not isinstance(groups, list) or not groups or not all(isinstance(g, list) and g for g in groups):
            raise FormatError(path, line, "order must be a non-empty list of non-empty id lists", field=where)
        flat = [known(rid) for group in groups for rid in group]
        if len(set(flat)) != len(flat):
            raise FormatError(path, line, "order names a response twice", field=where)
        return relations_of_order(groups)
    raise FormatError(path, line, 'expected {"better", "worse"}, {"equal": [a, b]} or {"order": [[...], ...]}', where)


def read_annotated(path: str | Path) -> list[AnnotatedPrompt]:
    return [parse_annotated(obj, path, line) for line, obj in iter_objects(path)]
