"""The objects of a data file, whatever its kind: jsonl, a JSON array, or Parquet; bad ones reported, never raised.

    for line, obj in iter_file("prefs.json"):      # obj is a dict, or the FormatError of that record
        ...

- jsonl (any other name): one object per line, read by `cheems.formats.jsonl.iter_lines`.
- a JSON array (`[{...}, {...}]`, as LLaMA-Factory ships its `.json` files): told by its first
  character, whatever the name; each element's number is the line it starts on. An element that
  cannot be parsed ends the file (JSON cannot be re-synchronised inside an array): it is reported,
  and so is the rest.
- Parquet (`.parquet`, what dataset hubs serve): each row an object, numbered from 1 (reported as
  the "line"). Needs pyarrow (`pip install 'cheems[parquet]'`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cheems.errors import FormatError, InvalidInput
from cheems.formats.jsonl import check_text, iter_lines, parse_json, value_problem

Item = tuple[int, "dict[str, Any] | FormatError"]
_WHITESPACE = " \t\r\n"


def iter_file(path: str | Path) -> Iterator[Item]:
    """(line or row number, object or its FormatError) for each record of the file, in order."""
    path = Path(path)
    if path.suffix.lower() == ".parquet":
        yield from _parquet(path)
    elif _starts_with_bracket(path):
        yield from _json_array(path)
    else:
        yield from iter_lines(path)


def _starts_with_bracket(path: Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(4096).removeprefix(b"\xef\xbb\xbf").lstrip()
    return head.startswith(b"[")


def _json_array(path: Path) -> Iterator[Item]:
    raw = path.read_bytes().removeprefix(b"\xef\xbb\xbf")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        yield line, FormatError(path, line, "invalid UTF-8 (a JSON array file must be valid UTF-8 throughout)")
        return
    decoder, lines = json.JSONDecoder(), _Lines(text)
    at = _skip(text, text.index("[") + 1)
    if text.startswith("]", at):
        yield from _after_close(path, text, at, lines)
        return
    while at < len(text):
        line = lines.at(at)
        end = _element_end(decoder, text, at)
        if isinstance(end, str):
            yield line, FormatError(path, line, f"invalid JSON ({end}); the rest of the file cannot be read")
            return
        try:
            obj = parse_json(text[at:end], path, line)  # the same checks as a jsonl line
        except FormatError as e:
            yield line, e
        else:
            yield line, obj if isinstance(obj, dict) else _not_object(path, line, obj)
        at = _skip(text, end)
        if text.startswith(",", at):
            at = _skip(text, at + 1)
        elif text.startswith("]", at):
            yield from _after_close(path, text, at, lines)
            return
        else:
            break
    problem = "expected , or ] after an element" if at < len(text) else "the array is not closed with ]"
    yield lines.at(at), FormatError(path, lines.at(at), f"invalid JSON ({problem})")


class _Lines:
    """Line numbers of increasing offsets into one text, counted once."""

    def __init__(self, text: str) -> None:
        self.text, self.offset, self.line = text, 0, 1

    def at(self, offset: int) -> int:
        self.line += self.text.count("\n", self.offset, offset)
        self.offset = offset
        return self.line


def _after_close(path: Path, text: str, at: int, lines: _Lines) -> Iterator[Item]:
    rest = _skip(text, at + 1)
    if rest < len(text):
        yield lines.at(rest), FormatError(path, lines.at(rest), "invalid JSON (text after the closing ])")


def _not_object(path: Path, line: int, obj: Any) -> FormatError:
    return FormatError(path, line, f"expected a JSON object, got {type(obj).__name__}")


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WHITESPACE:
        at += 1
    return at


def _element_end(decoder: json.JSONDecoder, text: str, start: int) -> int | str:
    """Where the element starting at `start` ends, or why it cannot be read."""
    try:
        return decoder.raw_decode(text, start)[1]
    except json.JSONDecodeError as e:
        return f"{e.msg} at line {e.lineno} column {e.colno}"
    except RecursionError:
        return "nested too deeply"
    except ValueError as e:  # an integer of more than 4300 digits
        return value_problem(e)


def _parquet(path: Path) -> Iterator[Item]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InvalidInput(f"{path}: reading Parquet needs pyarrow: pip install 'cheems[parquet]'") from None
    try:
        table = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises ArrowInvalid / OSError for a file that is not Parquet
        raise InvalidInput(f"{path}: not a readable Parquet file ({e})") from None
    row = 0
    for batch in table.iter_batches(batch_size=1024):
        for obj in batch.to_pylist():
            row += 1
            try:
                check_text(obj, path, row)
            except FormatError as e:
                yield row, e
            else:
                yield row, obj
