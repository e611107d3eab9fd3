"""Request bodies for the HTTP adapter: a bounded read and a JSON parse that shares the GIL.

`read_body` refuses a body over the limit before reading it (Content-Length) or as soon as it passes
the limit (chunked). `parse_body` walks arrays and objects itself and hands each scalar to `json`'s
C scanner: `json.loads` holds the GIL for a whole 50 MB body (measured: /health waited 2.3 s), while
this lets go between values (about 20 ms). It also bounds nesting (`MAX_DEPTH`) and the number of
values, and its errors name where the body is wrong (`labels[0]: ...`). Pure apart from `read_body`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.requests import ClientDisconnect, Request

from services.scorer.errors import ClientGone, InvalidRequest, LimitExceeded

MAX_DEPTH = 32  # nesting levels a body may have (OpenRLHF labels can be objects; 100k levels is an attack)


async def read_body(request: Request, limit: int) -> bytearray:
    """The body, or LimitExceeded without reading it (Content-Length) or once it passes `limit`."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise LimitExceeded(f"body of {declared} bytes exceeds max_message_bytes ({limit})")
    data = bytearray()
    try:
        async for chunk in request.stream():
            data += chunk
            if len(data) > limit:
                raise LimitExceeded(f"body exceeds max_message_bytes ({limit} bytes)")
    except ClientDisconnect:
        raise ClientGone("the caller went away while sending the body") from None
    return data


class BadJson(Exception):
    """A parse error and where it happened (path segments, outermost first)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.path: list[str] = []


WHITESPACE = re.compile(r"[ \t\n\r]*")
SCALAR = json.JSONDecoder().raw_decode


class Parser:
    """JSON over a str: containers walked here, each scalar parsed by `json`'s C scanner."""

    def __init__(self, text: str, max_values: int) -> None:
        self.text, self.max_values, self.left = text, max_values, max_values

    def skip(self, i: int) -> int:
        match = WHITESPACE.match(self.text, i)
        return match.end() if match else i

    def value(self, i: int, depth: int) -> tuple[Any, int]:
        self.left -= 1
        if self.left < 0:
            raise LimitExceeded(f"body holds more than {self.max_values} JSON values")
        opener = self.text[i : i + 1]
        if opener in ("[", "{"):
            if depth >= MAX_DEPTH:
                raise BadJson(f"nested deeper than {MAX_DEPTH} levels")
            return self.array(i + 1, depth + 1) if opener == "[" else self.object(i + 1, depth + 1)
        return self.scalar(i)

    def scalar(self, i: int) -> tuple[Any, int]:
        try:
            return SCALAR(self.text, i)
        except ValueError as e:  # JSONDecodeError, and integers over Python's digit limit
            raise BadJson(str(e)) from None

    def expect(self, i: int, allowed: str) -> str:
        found = self.text[i : i + 1]
        if not found or found not in allowed:
            raise BadJson(f"expected {' or '.join(allowed)} at char {i}, found {repr(found) if found else 'the end'}")
        return found

    def array(self, i: int, depth: int) -> tuple[list[Any], int]:
        items: list[Any] = []
        i = self.skip(i)
        if self.text[i : i + 1] == "]":
            return items, i + 1
        while True:
            try:
                item, i = self.value(self.skip(i), depth)
            except BadJson as e:
                e.path.insert(0, f"[{len(items)}]")
                raise
            items.append(item)
            i = self.skip(i)
            if self.expect(i, ",]") == "]":
                return items, i + 1
            i += 1

    def object(self, i: int, depth: int) -> tuple[dict[str, Any], int]:
        members: dict[str, Any] = {}
        i = self.skip(i)
        if self.text[i : i + 1] == "}":
            return members, i + 1
        while True:
            self.expect(i, '"')
            key, i = self.scalar(i)
            i = self.skip(i)
            self.expect(i, ":")
            try:
                members[key], i = self.value(self.skip(i + 1), depth)
            except BadJson as e:
                name = key if len(key) <= 64 else key[:64] + "..."
                e.path.insert(0, f".{name}" if depth > 1 else name)
                raise
            i = self.skip(i)
            if self.expect(i, ",}") == "}":
                return members, i + 1
            i = self.skip(i + 1)


def parse_body(data: bytes | bytearray, max_values: int) -> dict[str, Any]:
    """The body as a JSON object; InvalidRequest naming where it is wrong, LimitExceeded when too big."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidRequest(f"body is not valid UTF-8 (byte {e.start})") from None
    parser = Parser(text, max_values)
    start = parser.skip(0)
    if parser.text[start : start + 1] != "{":
        raise InvalidRequest("body must be a JSON object")
    try:
        body, end = parser.value(start, 0)
        if parser.skip(end) != len(text):
            raise BadJson(f"extra data after the object at char {end}")
    except BadJson as e:
        where = "".join(e.path)
        raise InvalidRequest(f"body is not valid JSON: {where + ': ' if where else ''}{e}") from None
    return body
