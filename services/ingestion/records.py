"""One jsonl line -> one sample, whatever the layout; a bad line gives a RecordError, not an exception.

Layouts: CheemsBench (`responses` with ids, `rank`), CheemsPreference pairwise (`answer1`,
`answer2`, `preference`: ids are md5 of the content), and raw (`prompt` or `input` plus
`responses` as strings or `{"id", "content"}`; string responses get md5 ids). `sys_prompt` and
`category` are kept when present.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cheems.cheemsbench import prompt_key
from cheems.errors import FormatError
from cheems.jsonl import require
from cheems.responses import content_id, parse_responses


@dataclass(frozen=True)
class SampleRecord:
    prompt: str
    responses: tuple[tuple[str, str], ...]  # (key, content)
    category: tuple[str, ...] = ()
    system_prompt: str | None = None
    line: int = 0


@dataclass(frozen=True)
class RecordError:
    line: int
    field: str
    message: str


@dataclass
class Parsed:
    samples: list[SampleRecord] = field(default_factory=list)
    errors: list[RecordError] = field(default_factory=list)


def parse_record(obj: Any, path: str | Path = "<record>", line: int = 0) -> SampleRecord:
    """A sample from one decoded line; FormatError naming the field otherwise."""
    if not isinstance(obj, dict):
        raise FormatError(path, line, f"expected a JSON object, got {type(obj).__name__}")
    text = require(obj, prompt_key(obj), str, path, line)
    if not text.strip():
        raise FormatError(path, line, "empty prompt", field=prompt_key(obj))
    if {"answer1", "answer2"} <= obj.keys():
        answers = [require(obj, k, str, path, line) for k in ("answer1", "answer2")]
        responses = tuple((content_id(a), a) for a in dict.fromkeys(answers))
    else:
        raw = require(obj, "responses", list, path, line)
        if raw and all(isinstance(r, str) for r in raw):
            responses = tuple((content_id(r), r) for r in dict.fromkeys(raw))
        else:
            responses = tuple((r.id, r.content) for r in parse_responses(raw, path, line))
    category = obj.get("category") or []
    if not isinstance(category, list) or not all(isinstance(c, str) for c in category):
        raise FormatError(path, line, "expected a list of strings", field="category")
    system = obj.get("sys_prompt") or obj.get("system_prompt")
    if system is not None and not isinstance(system, str):
        raise FormatError(path, line, "expected a string", field="sys_prompt")
    return SampleRecord(text, responses, tuple(category), system or None, line)


def parse_lines(lines: list[str], path: str | Path = "<input>") -> Parsed:
    """Every line parsed; bad ones become RecordErrors with their line numbers, good ones samples."""
    import json

    parsed = Parsed()
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            parsed.samples.append(parse_record(json.loads(text), path, number))
        except json.JSONDecodeError as e:
            parsed.errors.append(RecordError(number, "", f"invalid JSON ({e.msg} at column {e.colno})"))
        except FormatError as e:
            parsed.errors.append(RecordError(number, e.field or "", e.message))
    return parsed
