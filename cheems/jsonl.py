"""Reading and writing jsonl files: errors name the line, writes are all-or-nothing."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from cheems.errors import FormatError


def iter_objects(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line; FormatError for bad JSON or a non-object."""
    with open(path, encoding="utf-8") as f:
        for lineno, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise FormatError(path, lineno, f"invalid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(obj, dict):
                raise FormatError(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


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
