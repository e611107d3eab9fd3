"""Reading and writing jsonl files: every line accounted for, errors name the line, writes are all-or-nothing.

A line is read as bytes and split on `\\n` only (U+2028/U+2029 are legal inside a JSON string), then
decoded here, so a bad line is a `FormatError` naming its line and never an exception that ends the
file: invalid UTF-8, a lone surrogate (`"\\ud800"`), NaN/Infinity, a number too long to convert
(Python refuses integers over 4300 digits), nesting deeper than `MAX_DEPTH`, or not an object.

    for line, record in iter_lines("data.jsonl"):      # every record, good or bad, in order
        if isinstance(record, FormatError): report(record) else: use(record)
    for line, obj in iter_objects("bench.jsonl"):       # all or nothing: the first bad line raises
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Iterator
from itertools import accumulate
from pathlib import Path
from typing import Any

from cheems.errors import FormatError

MAX_DEPTH = 100  # no layout we read nests deeper than 5; 100 leaves room and stays far from Python's stack
_BOM = b"\xef\xbb\xbf"
_DIGITS = re.compile(r"value has (\d+) digits")
_SURROGATE = re.compile("[\ud800-\udfff]")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]")


def decode_object(raw: bytes | str, path: str | Path, line: int) -> dict[str, Any]:
    """One JSON object from one line's bytes (or text); FormatError saying what is wrong otherwise."""
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise FormatError(path, line, f"invalid UTF-8 at byte {e.start + 1} of the line") from None
    else:
        text = raw
    obj = parse_json(text, path, line)
    if not isinstance(obj, dict):
        raise FormatError(path, line, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def parse_json(text: str, path: str | Path, line: int) -> Any:
    """`json.loads` for untrusted text: strict JSON, bounded depth, valid Unicode; FormatError otherwise."""
    _check_depth(text, path, line)
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except json.JSONDecodeError as e:
        raise FormatError(path, line, f"invalid JSON ({e.msg} at column {e.colno})") from None
    except ValueError as e:  # integers over sys.get_int_max_str_digits(), NaN/Infinity, 1e400
        raise FormatError(path, line, f"invalid JSON ({value_problem(e)})") from None
    except RecursionError:
        raise FormatError(path, line, "invalid JSON (nested too deeply)") from None
    check_text(value, path, line)
    return value


def check_text(value: Any, path: str | Path, line: int) -> None:
    """FormatError naming the field of the first string (key or value) with a lone surrogate, which no
    UTF-8 file, database or protobuf message can hold."""
    where = _lone_surrogate(value)
    if where is not None:
        raise FormatError(path, line, "a lone surrogate (not valid Unicode text)", field=where or None)


def iter_lines(path: str | Path) -> Iterator[tuple[int, dict[str, Any] | FormatError]]:
    """(line number, object or the FormatError of that line) for each non-blank line, in order."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):  # binary files split on b"\n" only
            if number == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            if not raw.strip():
                continue
            try:
                yield number, decode_object(raw, path, number)
            except FormatError as e:
                yield number, e


def iter_objects(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line; the first bad line raises its FormatError."""
    for number, record in iter_lines(path):
        if isinstance(record, FormatError):
            raise record
        yield number, record


def write_objects(path: str | Path, objects: Iterable[dict[str, Any]]) -> int:
    """Write objects as UTF-8 jsonl atomically: on any error the target is left untouched."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for obj in objects:
                f.write(json.dumps(obj, ensure_ascii=False, allow_nan=False) + "\n")
                count += 1
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes owner-only files; honour the umask
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    return count


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def require(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], path: str | Path, line: int) -> Any:
    """Return obj[key] if present and of `kind`, else a FormatError naming the field."""
    if key not in obj:
        raise FormatError(path, line, "missing field", field=key)
    value = obj[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        want = " or ".join(t.__name__ for t in _as_tuple(kind))
        raise FormatError(path, line, f"expected {want}, got {type(value).__name__}", field=key)
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:20]} is out of a float's range")
    return value


def value_problem(error: ValueError) -> str:
    """What json's ValueError (not a syntax error) says, in a few words."""
    digits = _DIGITS.search(str(error))
    if digits:
        return f"a number of {digits.group(1)} digits; at most {sys.get_int_max_str_digits()} are read"
    return str(error).split(";")[0]


def _check_depth(text: str, path: str | Path, line: int) -> None:
    """Refuse nesting deeper than MAX_DEPTH before parsing it (brackets inside strings do not count)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return  # the common case: too few brackets to nest that deep
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if max(accumulate(1 if c in "[{" else -1 for c in brackets), default=0) > MAX_DEPTH:
        raise FormatError(path, line, f"invalid JSON (nested deeper than {MAX_DEPTH} levels)")


def _lone_surrogate(value: Any) -> str | None:
    """The field path of the first string (key or value) holding a lone surrogate; "" for the top; None if none."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return where
        elif isinstance(item, dict):
            for key, child in item.items():
                name = f"{where}.{key}" if where else str(key)
                if _SURROGATE.search(key):
                    return where or ""
                stack.append((name, child))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", child) for i, child in enumerate(item))
    return None
