"""The `cheems resolve` input: one prompt per line with its raw annotations.

    {"input": str, "responses": [{"id", "content"}], "category": [...],
     "annotations": [{"better": id, "worse": id} | {"equal": [id, id]} | {"order": [[id, ...], ...]}],
     "discarded": [id, ...]}                      # optional: garbled responses annotators excluded

`order` lists groups best first; members of a group are equal. `sys_prompt` (optional) is kept. Errors
name the file, line and field.

Several lines may annotate one prompt (one line per annotator): lines with the same `input` are one
prompt, whose annotations form one graph. They must agree on everything but their annotations: the
system prompt, the category, and the content of each response id (a line may list only some of the
responses); `discarded` ids of any line are discarded for the prompt (a file is one curated set; the store's
resolution instead counts each discard as its annotator's vote: `algorithm.discards`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cheems.errors import FormatError
from cheems.formats.cheemsbench import prompt_key
from cheems.formats.jsonl import iter_objects, require
from cheems.formats.responses import Response, parse_responses
from services.annotation.algorithm.resolve import Relation, relations_of_order


@dataclass(frozen=True)
class AnnotatedPrompt:
    input: str
    responses: tuple[Response, ...]
    category: tuple[str, ...]
    annotations: int
    relations: tuple[Relation, ...]  # every relation of the annotations, discarded responses left out
    discarded: frozenset[str]
    line: int  # the prompt's first line
    system_prompt: str | None = None

    def to_bench_extra(self) -> dict[str, Any]:
        """The fields a bench line of this prompt carries beyond the official ones."""
        return {} if self.system_prompt is None else {"sys_prompt": self.system_prompt}


def parse_annotated(obj: dict[str, Any], path: str | Path, line: int) -> AnnotatedPrompt:
    text = require(obj, prompt_key(obj), str, path, line)
    responses = parse_responses(require(obj, "responses", list, path, line), path, line)
    category = require(obj, "category", list, path, line)
    if not category or not all(isinstance(c, str) and c for c in category):
        raise FormatError(path, line, "expected a non-empty list of non-empty strings", field="category")
    system_prompt = obj.get("sys_prompt")
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise FormatError(path, line, f"expected a string, got {type(system_prompt).__name__}", field="sys_prompt")
    system_prompt = system_prompt or None  # "" and absent are the same: no system prompt
    ids = {r.id for r in responses}
    discarded = obj.get("discarded", [])
    if not isinstance(discarded, list) or not all(isinstance(d, str) and d in ids for d in discarded):
        raise FormatError(path, line, "expected a list of this prompt's response ids", field="discarded")
    annotations = require(obj, "annotations", list, path, line)
    relations: list[Relation] = []
    for i, anno in enumerate(annotations):
        relations += relations_of(anno, ids, path, line, f"annotations[{i}]")
    prompt = AnnotatedPrompt(
        text, responses, tuple(category), len(annotations), tuple(relations), frozenset(discarded), line, system_prompt
    )
    return without_discarded(prompt)


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
    """One AnnotatedPrompt per prompt, in order of first appearance; the lines of one prompt merged."""
    prompts: dict[str, AnnotatedPrompt] = {}
    for line, obj in iter_objects(path):
        prompt = parse_annotated(obj, path, line)
        first = prompts.get(prompt.input)
        prompts[prompt.input] = prompt if first is None else merge(first, prompt, path)
    return list(prompts.values())


def merge(first: AnnotatedPrompt, other: AnnotatedPrompt, path: str | Path) -> AnnotatedPrompt:
    """Two lines of one prompt as one: their responses, annotations and discarded ids together."""
    line, since = other.line, f"than on line {first.line}, which has the same input"
    if other.system_prompt != first.system_prompt:
        raise FormatError(path, line, f"another system prompt {since}", field="sys_prompt")
    if other.category != first.category:
        raise FormatError(path, line, f"another category {since}", field="category")
    responses = {r.id: r for r in first.responses}
    for i, response in enumerate(other.responses):
        known = responses.setdefault(response.id, response)
        if known.content != response.content:
            message = f"response {response.id!r} has other content {since}"
            raise FormatError(path, line, message, field=f"responses[{i}].content")
    merged = replace(
        first,
        responses=tuple(responses.values()),
        annotations=first.annotations + other.annotations,
        relations=first.relations + other.relations,
        discarded=first.discarded | other.discarded,
    )
    return without_discarded(merged)  # a response one annotator discarded is discarded for all


def without_discarded(prompt: AnnotatedPrompt) -> AnnotatedPrompt:
    """The prompt with the relations that touch a discarded response left out."""
    kept = tuple(r for r in prompt.relations if r.better not in prompt.discarded and r.worse not in prompt.discarded)
    return replace(prompt, relations=kept)
