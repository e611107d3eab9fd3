"""A look at a serialized request before parsing it: which text field is too long to score, if any.

Parsing a 50 MB ScoreRequest and turning its response into a Python string holds the GIL for about
0.1 s (measured here), which every other call waits out. A text of B bytes has at least B/4
characters, so under truncation "error" a field over `4 x budget` bytes is over length for certain.
This walks the protobuf wire format (tags and lengths only, no decoding, no copies) and names such a
field, so the request is refused before it is parsed. Pure.

Field numbers follow protos/cheems/v1/reward.proto and common.proto (a test checks them).
"""

from __future__ import annotations

from collections.abc import Iterator

LENGTH_DELIMITED = 2
# message -> {field number: (name, nested message or None for a text field)}
SCORE_REQUEST = {1: ("prompt", None), 2: ("responses", None), 3: ("system_prompt", None), 4: ("history", "Message")}
LAYOUTS: dict[str, dict[int, tuple[str, str | None]]] = {
    "ScoreRequest": SCORE_REQUEST,
    "ScoreBatchRequest": {1: ("items", "ScoreRequest")},
    "Message": {1: ("role", None), 2: ("content", None)},
}
REPEATED = {"responses", "history", "items"}


class WireError(ValueError):
    """The bytes are not a well-formed message (the parser will say exactly why)."""


def _varint(data: memoryview, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if i >= len(data) or shift > 63:
            raise WireError("truncated or overlong varint")
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not byte & 0x80:
            return value, i


def _fields(data: memoryview) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, start, end) of each field; the span is the payload of a
    length-delimited field and empty for the others."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, kind = key >> 3, key & 7
        if kind == 0:
            _, i = _varint(data, i)
            yield number, kind, i, i
        elif kind == LENGTH_DELIMITED:
            size, i = _varint(data, i)
            if i + size > len(data):
                raise WireError("length past the end")
            yield number, kind, i, i + size
            i += size
        elif kind in (1, 5):
            i += 8 if kind == 1 else 4
            yield number, kind, i, i
        else:
            raise WireError(f"unsupported wire type {kind}")


def oversized_text(data: bytes | memoryview, message: str, max_bytes: int) -> tuple[str, int] | None:
    """(path, bytes) of the first text field of `message` longer than `max_bytes`, or None.

    Bytes malformed before such a field give None: the real parser then rejects them with its own message."""
    try:
        return _walk(memoryview(data), message, max_bytes, "")
    except WireError:
        return None


def _walk(data: memoryview, message: str, max_bytes: int, prefix: str) -> tuple[str, int] | None:
    layout = LAYOUTS[message]
    counts: dict[int, int] = {}
    for number, kind, start, end in _fields(data):
        if kind != LENGTH_DELIMITED or number not in layout:
            continue
        name, nested = layout[number]
        index = counts.get(number, 0)
        counts[number] = index + 1
        path = f"{prefix}{name}[{index}]" if name in REPEATED else f"{prefix}{name}"
        if nested is None:
            if end - start > max_bytes:
                return path, end - start
        elif found := _walk(data[start:end], nested, max_bytes, path + "."):
            return found
    return None
