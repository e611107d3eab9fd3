"""Candidate responses, as both official layouts spell them: `{"id": str, "content": str}`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cheems.errors import FormatError


@dataclass(frozen=True)
class Response:
    id: str
    content: str

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "content": self.content}


def content_id(content: str) -> str:
    """The id the official loader gives a response known only by its text: md5 of its UTF-8 bytes."""
    return hashlib.md5(content.encode("utf-8")).hexdigest()


def parse_responses(value: Any, path: str | Path, line: int) -> tuple[Response, ...]:
    """Validate a `responses` list: non-empty, objects with string id and content, ids unique."""
    if not isinstance(value, list):
        raise FormatError(path, line, f"expected a list, got {type(value).__name__}", field="responses")
    if not value:
        raise FormatError(path, line, "empty list: a prompt needs at least one response", field="responses")
    seen: set[str] = set()
    out = []
    for i, item in enumerate(value):
        where = f"responses[{i}]"
        if not isinstance(item, dict):
            raise FormatError(path, line, f"expected an object, got {type(item).__name__}", field=where)
        for key in ("id", "content"):
            if not isinstance(item.get(key), str):
                problem = "missing" if key not in item else f"expected str, got {type(item[key]).__name__}"
                raise FormatError(path, line, problem, field=f"{where}.{key}")
        if item["id"] in seen:
            raise FormatError(path, line, f"duplicate response id {item['id']!r}", field=f"{where}.id")
        seen.add(item["id"])
        out.append(Response(item["id"], item["content"]))
    return tuple(out)
