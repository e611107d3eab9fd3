"""Pure checks and normal forms of values before they reach the database; each error names the field.

The repository calls these first, so a bad value raises before any SQL is sent.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from services.store.errors import InvalidRecord
from services.store.models import KEY

TASK_SIZES = {"triple": 3, "pair": 2}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_RESULT_SHAPES = '{"better": id, "worse": id}, {"equal": [id, ...]} or {"order": [[id, ...], ...]}'


def digest(*parts: Any) -> str:
    """sha256 hex of a JSON array: unambiguous (None differs from "", ["a,b"] from ["a", "b"])."""
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()


def prompt_id_for(text: str, system_prompt: str | None = None, history: Sequence[Mapping[str, str]] = ()) -> str:
    """A prompt's id: the content hash of (system prompt, text), and of the earlier turns when there are any
    (so the ids of prompts without history are what they always were)."""
    if not history:
        return digest(system_prompt, text)
    return digest(system_prompt, text, [[turn["role"], turn["content"]] for turn in history])


def text(field: str, value: Any) -> str:
    """A string a text column can hold on every backend: PostgreSQL refuses NUL (U+0000) in text."""
    if not isinstance(value, str):
        raise InvalidRecord(f"{field}: expected a string, got {type(value).__name__}")
    if "\x00" in value:
        raise InvalidRecord(f"{field}: contains a NUL character (U+0000), which the database cannot store")
    return value


def turns(field: str, history: Iterable[tuple[str, str]]) -> list[dict[str, str]]:
    """Earlier turns of a conversation, (role, content) each, as the JSON the store keeps."""
    out = []
    for i, (role, content) in enumerate(history):
        out.append({"role": key(f"{field}[{i}].role", role), "content": text(f"{field}[{i}].content", content)})
    return out


def task_id_for(prompt_id: str, keys: Iterable[str], copy: int = 0) -> str:
    """A task's id: the hash of its prompt and its set of response keys, so creating it twice is harmless; a
    second copy of the same keys (double annotation) hashes its copy number too (copy 0 keeps the old ids)."""
    return digest(prompt_id, sorted(keys)) if copy == 0 else digest(prompt_id, sorted(keys), copy)


def one_of(field: str, value: Any, allowed: Iterable[str]) -> str:
    allowed = tuple(allowed)
    if value not in allowed:
        raise InvalidRecord(f"{field}: expected one of {', '.join(allowed)}, got {value!r}")
    return str(value)


def key(field: str, value: Any) -> str:
    """A response key, annotation id or annotator name: a non-empty string that fits its column (no NUL: `text`)."""
    if not isinstance(value, str) or not value or len(value) > KEY:
        shown = (
            f"{value[:80]!r}... ({len(value)} characters)"
            if isinstance(value, str) and len(value) > 80
            else repr(value)
        )
        raise InvalidRecord(f"{field}: expected a non-empty string of at most {KEY} characters, got {shown}")
    return text(field, value)


def count(field: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidRecord(f"{field}: expected an integer >= {minimum}, got {value!r}")
    return value


def sha256_hex(field: str, value: Any) -> str:
    if not isinstance(value, str) or not _SHA256.match(value):
        raise InvalidRecord(f"{field}: expected 64 lowercase hex digits, got {value!r}")
    return value


def strings(field: str, values: Any) -> list[str]:
    if isinstance(values, str) or not isinstance(values, Sequence) or not all(isinstance(v, str) for v in values):
        raise InvalidRecord(f"{field}: expected a list of strings, got {values!r}")
    return [text(f"{field}[{i}]", v) for i, v in enumerate(values)]


def response_pairs(responses: Iterable[tuple[str, str]]) -> dict[str, str]:
    """(key, content) pairs as a dict; a key given twice must carry the same content."""
    out: dict[str, str] = {}
    for i, (rkey, content) in enumerate(responses):
        key(f"responses[{i}].key", rkey)
        text(f"responses[{i}].content", content)
        if out.get(rkey, content) != content:
            raise InvalidRecord(f"responses[{i}]: key {rkey!r} given twice with different content")
        out[rkey] = content
    return out


def json_value(field: str, value: Any) -> Any:
    """The value as it will read back from a JSON column (tuples become lists)."""
    try:
        return json.loads(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError) as exc:
        raise InvalidRecord(f"{field}: not JSON-serialisable: {exc}") from exc


def result_keys(result: Mapping[str, Any]) -> list[str]:
    """The response keys an annotation result names, in order; extra fields (e.g. a judge's reason) are kept as is."""
    shapes = [name for name in ("order", "better", "equal") if name in result]
    if len(shapes) != 1:
        raise InvalidRecord(f"result: expected {_RESULT_SHAPES}, got {dict(result)!r}")
    if shapes == ["better"]:
        keys = [key("result.better", result["better"]), key("result.worse", result.get("worse"))]
    elif shapes == ["equal"]:
        keys = strings("result.equal", result["equal"])
        if len(keys) < 2:
            raise InvalidRecord(f"result.equal: expected at least two response keys, got {keys!r}")
    else:
        groups = result["order"]
        if not isinstance(groups, list) or not groups or not all(isinstance(g, list) and g for g in groups):
            raise InvalidRecord(f"result.order: expected a non-empty list of non-empty key lists, got {groups!r}")
        keys = [k for g in groups for k in strings("result.order", g)]
    if len(set(keys)) != len(keys):
        raise InvalidRecord(f"result: names a response key twice: {keys!r}")
    return keys


def task_group(kind: str, group: Sequence[str]) -> list[str]:
    """A task's response keys: distinct, three for a triple, two for a pair."""
    size = TASK_SIZES[one_of("kind", kind, TASK_SIZES)]
    keys = [key("groups[].key", k) for k in group]
    if len(keys) != size or len(set(keys)) != size:
        raise InvalidRecord(f"groups: a {kind} task needs {size} distinct response keys, got {keys!r}")
    return keys
