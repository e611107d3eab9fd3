"""One record of preference or sample data, in whichever layout people's tools write it, read into one shape.

    record = parse_record(obj, "prefs.jsonl", line)            # the layout told by the fields
    record = parse_record(obj, "prefs.jsonl", line, "alpaca")  # or forced (`--format alpaca`)

Layouts, each told by its fields (`TELLING`):
- `cheemsbench` (official): input, responses [{id, content}], rank {id: int}, category.
- `pairwise` (official CheemsPreference): input, answer1, answer2, preference 1 or 2.
- `annotations` (official CheemsPreference): input, responses, annotations [[chosen, rejected, "1"]].
- `samples`: input or prompt, responses [str or {id, content}]; prompts to annotate, no preference.
- `trl` (TRL, OpenRLHF, UltraFeedback-binarized): prompt?, chosen, rejected as strings or as lists of
  {role, content}; the prompt may be left implicit in full chosen/rejected conversations.
- `hh-rlhf` (Anthropic HH-RLHF): chosen, rejected as "\\n\\nHuman: ...\\n\\nAssistant: ..." transcripts.
- `sharegpt` (LLaMA-Factory): conversations [{from, value}], chosen {from, value}, rejected, system?.
- `alpaca` (LLaMA-Factory): instruction, input?, chosen, rejected, system?, history [[query, answer]]?.

The official layouts may carry `sys_prompt` (or `system_prompt`) and `history` ([{role, content}],
oldest first); both are kept, and the official code's habit of ignoring `sys_prompt` is not copied.
Responses known only by their text get the official id: the md5 of the content. A conversation's
context (system prompt, earlier turns, last user turn) is what identifies a prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from cheems.errors import FormatError, InvalidInput
from cheems.formats import community_layouts
from cheems.formats.cheemsbench import parse_bench_record, prompt_key
from cheems.formats.datafile import iter_file
from cheems.formats.jsonl import require
from cheems.formats.record import CONTEXT_FIELDS, Pair, Record, add_responses, check_pair, messages, other_fields
from cheems.formats.responses import Response, content_id, parse_responses

_PAIRWISE = ("answer1", "answer2", "preference")


def parse_record(obj: Any, path: str | Path, line: int, layout: str | None = None) -> Record:
    """The record of one decoded object; FormatError naming the line and field when it does not fit."""
    if not isinstance(obj, dict):
        raise FormatError(path, line, f"expected a JSON object, got {type(obj).__name__}")
    name = layout or detect(obj)
    if name is None:
        shown = ", ".join(sorted(map(str, obj))[:8]) or "none"
        raise FormatError(path, line, f"no known layout fits the fields ({shown}); accepted: {accepted()}")
    if name not in PARSERS:
        raise FormatError(path, line, f"unknown layout {name!r}; accepted: {', '.join(PARSERS)}")
    record = PARSERS[name](obj, path, line)
    if not record.prompt.strip():
        raise FormatError(path, line, "empty prompt", field=_PROMPT_FIELD.get(name, prompt_key(obj)))
    return record


def detect(obj: Mapping[str, Any]) -> str | None:
    """The layout whose telling fields the object has, else None."""
    if "conversations" in obj:
        return "sharegpt"
    if "instruction" in obj:
        return "alpaca"
    if "chosen" in obj or "rejected" in obj:
        chosen = obj.get("chosen")
        transcript = isinstance(chosen, str) and chosen.lstrip().startswith("Human:")
        return "hh-rlhf" if "prompt" not in obj and transcript else "trl"
    if "rank" in obj:
        return "cheemsbench"
    if "annotations" in obj:
        return "annotations"
    if any(k in obj for k in _PAIRWISE):
        return "pairwise"
    if "responses" in obj:
        return "samples"
    return None


def accepted() -> str:
    return "; ".join(f"{name} ({fields})" for name, fields in TELLING.items())


# --- the official layouts ------------------------------------------------------------------------


def _official_context(obj: dict[str, Any], path: str | Path, line: int) -> dict[str, Any]:
    system = obj.get("sys_prompt", obj.get("system_prompt"))
    if system is not None and not isinstance(system, str):
        raise FormatError(path, line, f"expected a string, got {type(system).__name__}", field="sys_prompt")
    history = messages(obj["history"], path, line, "history") if "history" in obj else []
    if any(role == "system" for role, _ in history):
        raise FormatError(path, line, "a system turn belongs in sys_prompt", field="history")
    category = obj.get("category") or []
    if not isinstance(category, list) or not all(isinstance(c, str) for c in category):
        raise FormatError(path, line, "expected a list of strings", field="category")
    return {"system_prompt": system or None, "history": tuple(history), "category": tuple(category)}


def _cheemsbench(obj: dict[str, Any], path: str | Path, line: int) -> Record:
    item = parse_bench_record(obj, path, line)
    context = _official_context(obj, path, line)
    extra = {k: v for k, v in item.extra.items() if k not in CONTEXT_FIELDS}
    return Record(item.input, item.responses, (), item.rank, extra=extra, layout="cheemsbench", line=line, **context)


def _pairwise(obj: dict[str, Any], path: str | Path, line: int) -> Record:
    text = require(obj, prompt_key(obj), str, path, line)
    responses, pair = answer_pair(obj, path, line, "")
    known = {"input", "prompt", "category", *_PAIRWISE}
    return Record(
        text,
        responses,
        (pair,),
        None,
        extra=other_fields(obj, known),
        layout="pairwise",
        line=line,
        **_official_context(obj, path, line),
    )


def answer_pair(obj: dict[str, Any], path: str | Path, line: int, prefix: str) -> tuple[tuple[Response, ...], Pair]:
    """The two responses and the pair of an {answer1, answer2, preference} object; `prefix` locates it."""
    answers = []
    for key in ("answer1", "answer2"):
        try:
            answers.append(require(obj, key, str, path, line))
        except FormatError as e:
            raise FormatError(path, line, e.message, field=prefix + key) from None
    preference = obj.get("preference")
    if isinstance(preference, bool) or str(preference) not in {"1", "2"}:
        problem = "missing field" if "preference" not in obj else f"expected 1 or 2, got {preference!r}"
        raise FormatError(path, line, problem, field=prefix + "preference")
    responses = tuple(Response(content_id(a), a) for a in answers)
    chosen, rejected = (
        (responses[0].id, responses[1].id) if str(preference) == "1" else (responses[1].id, responses[0].id)
    )
    if chosen == rejected:
        raise FormatError(path, line, "answer1 and answer2 are the same text", field=prefix + "answer2")
    return responses, (chosen, rejected)


def _annotations(obj: dict[str, Any], path: str | Path, line: int) -> Record:
    text = require(obj, prompt_key(obj), str, path, line)
    responses = list(parse_responses(require(obj, "responses", list, path, line), path, line))
    value = require(obj, "annotations", list, path, line)
    pairs: list[Pair] = []
    for i, annotation in enumerate(value):
        where = f"annotations[{i}]"
        if isinstance(annotation, dict):
            more, pair = answer_pair(annotation, path, line, where + ".")
            add_responses(responses, more, path, line)
        else:
            ok = (
                isinstance(annotation, list)
                and len(annotation) == 3
                and all(isinstance(x, str) for x in annotation[:2])
            )
            if not ok or str(annotation[2]) != "1":
                raise FormatError(path, line, f'expected [chosen_id, rejected_id, "1"], got {annotation!r}', where)
            pair = (annotation[0], annotation[1])
        check_pair(pair, {r.id for r in responses}, path, line, where)
        pairs.append(pair)
    known = {"input", "prompt", "responses", "annotations", "category"}
    return Record(
        text,
        tuple(responses),
        tuple(dict.fromkeys(pairs)),
        None,
        extra=other_fields(obj, known),
        layout="annotations",
        line=line,
        **_official_context(obj, path, line),
    )


def _samples(obj: dict[str, Any], path: str | Path, line: int) -> Record:
    text = require(obj, prompt_key(obj), str, path, line)
    raw = require(obj, "responses", list, path, line)
    if raw and all(isinstance(r, str) for r in raw):
        responses = tuple(Response(content_id(r), r) for r in dict.fromkeys(raw))
    else:
        responses = parse_responses(raw, path, line)
    known = {"input", "prompt", "responses", "category"}
    return Record(
        text,
        responses,
        extra=other_fields(obj, known),
        layout="samples",
        line=line,
        **_official_context(obj, path, line),
    )


PARSERS: dict[str, Callable[[dict[str, Any], str | Path, int], Record]] = {
    "cheemsbench": _cheemsbench,
    "pairwise": _pairwise,
    "annotations": _annotations,
    "samples": _samples,
    "trl": community_layouts.trl,
    "hh-rlhf": community_layouts.hh_rlhf,
    "sharegpt": community_layouts.sharegpt,
    "alpaca": community_layouts.alpaca,
}
TELLING = {
    "cheemsbench": "input, responses, rank, category",
    "pairwise": "input, answer1, answer2, preference",
    "annotations": "input, responses, annotations",
    "samples": "input or prompt, responses",
    "trl": "prompt, chosen, rejected",
    "hh-rlhf": "chosen, rejected as Human:/Assistant: transcripts",
    "sharegpt": "conversations, chosen, rejected",
    "alpaca": "instruction, input, chosen, rejected",
}
_PROMPT_FIELD = {"trl": "prompt", "hh-rlhf": "chosen", "sharegpt": "conversations", "alpaca": "instruction"}


# --- a whole file --------------------------------------------------------------------------------


def iter_records(path: str | Path, layout: str | None = None) -> Iterator[tuple[int, Record | FormatError]]:
    """(line, record or the FormatError of that line) for every record of a jsonl, JSON array or Parquet file."""
    if layout is not None and layout not in PARSERS:
        raise InvalidInput(f"unknown format {layout!r}; accepted: {', '.join(PARSERS)}")
    for line, obj in iter_file(path):
        if isinstance(obj, FormatError):
            yield line, obj
            continue
        try:
            yield line, parse_record(obj, path, line, layout)
        except FormatError as e:
            yield line, e


def read_records(path: str | Path, layout: str | None = None) -> list[Record]:
    """Every record of the file; the first bad one raises its FormatError (all or nothing)."""
    records = []
    for _, record in iter_records(path, layout):
        if isinstance(record, FormatError):
            raise record
        records.append(record)
    return records
