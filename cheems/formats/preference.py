"""CheemsPreference: prompts with their responses and preference pairs, merged from records of any layout.

Read any layout `cheems.formats.layouts` knows (the official ones, TRL, HH-RLHF, LLaMA-Factory, ...);
records of the same prompt in context (system prompt, earlier turns, text) are merged into one, as
the official loader merges lines that share an `input`. A ranking (CheemsBench) becomes its pairs.
Written in the official annotation-list layout:
    {"input": str, "responses": [{"id", "content"}], "annotations": [[chosen_id, rejected_id, "1"], ...],
     "sys_prompt"?: str, "history"?: [{"role", "content"}], "category"?: [...], ...other fields kept}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cheems.errors import FormatError
from cheems.formats.cheemsbench import ranked_pairs
from cheems.formats.jsonl import write_objects
from cheems.formats.layouts import read_records
from cheems.formats.record import Pair, Record, add_responses
from cheems.formats.responses import Response


@dataclass(frozen=True)
class PreferenceItem:
    input: str
    responses: tuple[Response, ...]
    pairs: tuple[Pair, ...]
    extra: Mapping[str, Any] = field(default_factory=dict)  # sys_prompt, history, category and any other field

    def to_json(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "responses": [r.to_json() for r in self.responses],
            "annotations": [[chosen, rejected, "1"] for chosen, rejected in self.pairs],
            **self.extra,
        }

    @classmethod
    def of(cls, record: Record) -> PreferenceItem:
        """The official form of a (merged) record: context and category go to their official fields."""
        extra: dict[str, Any] = {}
        if record.category:
            extra["category"] = list(record.category)
        if record.system_prompt:
            extra["sys_prompt"] = record.system_prompt
        if record.history:
            extra["history"] = [{"role": role, "content": content} for role, content in record.history]
        return cls(record.prompt, record.responses, all_pairs(record), {**extra, **record.extra})


def all_pairs(record: Record) -> tuple[Pair, ...]:
    """The record's pairs, and those its ranking implies (better first), each once."""
    ranked: list[Pair] = []
    if record.rank is not None:
        ids = [r.id for r in record.responses]
        ranked = [(ids[b], ids[w]) for b, w in ranked_pairs([record.rank[i] for i in ids])]
    return tuple(dict.fromkeys([*record.pairs, *ranked]))


def merge(records: Iterable[Record], path: str | Path, errors: list[FormatError] | None = None) -> list[Record]:
    """One record per prompt in context, in order of first appearance: responses and pairs united.

    A merged record keeps its ranking only when it came from one ranked record; otherwise rankings
    become pairs. A record that gives a known response id other content is a FormatError at its
    line: raised, or, when `errors` is given, appended there and the record left out."""
    merged: dict[Any, Record] = {}
    for record in records:
        known = merged.get(record.context)
        try:
            merged[record.context] = record if known is None else _merge(known, record, path)
        except FormatError as e:
            if errors is None:
                raise
            errors.append(e)
    return list(merged.values())


def _merge(known: Record, record: Record, path: str | Path) -> Record:
    responses = list(known.responses)
    add_responses(responses, record.responses, path, record.line)
    pairs = tuple(dict.fromkeys([*all_pairs(known), *all_pairs(record)]))
    category = known.category or record.category
    extra = {**known.extra, **record.extra}
    return replace(known, responses=tuple(responses), pairs=pairs, rank=None, category=category, extra=extra)


def read_preference(path: str | Path, layout: str | None = None) -> list[PreferenceItem]:
    """Read a preference file of any layout, merging records of the same prompt; FormatError names the line."""
    return [PreferenceItem.of(record) for record in merge(read_records(path, layout), path)]


def write_preference(path: str | Path, items: Iterable[PreferenceItem]) -> int:
    """Write items in the annotation-list layout, atomically."""
    return write_objects(path, (item.to_json() for item in items))
