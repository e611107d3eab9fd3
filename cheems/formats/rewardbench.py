"""RewardBench rows read as bench items: one prompt, a chosen response ranked above a rejected one.

RewardBench publishes one row per comparison:
    {"prompt": str, "chosen": str, "rejected": str, "subset": str, "id": int|str (optional), ...}
as Parquet (the dataset hub's files), jsonl or a JSON array (`cheems.formats.datafile` reads all three;
a Parquet row's "line" is its number). Each row becomes a
`BenchItem` with two responses, ids "<id>/chosen" (rank 1) and "<id>/rejected" (rank 2), and the
row's `subset` as its category, so the metrics' per-category figures are RewardBench's per-subset
accuracy (one pair a prompt: exact match equals accuracy). A row without `id` is numbered by its
position (0, 1, ...). A prompt may recur (RewardBench repeats some); an id may not. Other fields
(`chosen_model`, ...) are kept in `extra`. Errors name the file and line (`FormatError`).

    items = read_rewardbench("rewardbench.jsonl")
    rewards file keys: ("<prompt>", "17/chosen"), ("<prompt>", "17/rejected")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cheems.errors import FormatError
from cheems.formats.cheemsbench import BenchItem
from cheems.formats.datafile import iter_file
from cheems.formats.jsonl import require
from cheems.formats.responses import Response

FIELDS = ("prompt", "chosen", "rejected", "subset")


def response_ids(row_id: str) -> tuple[str, str]:
    """The ids of a row's chosen and rejected responses (the keys of a rewards file)."""
    return f"{row_id}/chosen", f"{row_id}/rejected"


def parse_row(obj: dict[str, Any], index: int, path: str | Path, line: int) -> BenchItem:
    """One decoded row (the `index`-th of its file) as a bench item; FormatError names the field."""
    prompt, chosen, rejected, subset = (require(obj, key, str, path, line) for key in FIELDS)
    if not subset.strip():
        raise FormatError(path, line, "expected a non-empty string", field="subset")
    raw_id = obj.get("id", index)
    if isinstance(raw_id, bool) or not isinstance(raw_id, int | str) or raw_id == "":
        raise FormatError(path, line, f"expected an integer or a non-empty string, got {raw_id!r}", field="id")
    chosen_id, rejected_id = response_ids(str(raw_id))
    extra = {k: v for k, v in obj.items() if k not in (*FIELDS, "id")}
    return BenchItem(
        input=prompt,
        responses=(Response(chosen_id, chosen), Response(rejected_id, rejected)),
        rank={chosen_id: 1, rejected_id: 2},
        category=(subset,),
        extra={"id": raw_id, **extra},
        line=line,
    )


def read_rewardbench(path: str | Path) -> list[BenchItem]:
    """Every row of a RewardBench file; the first bad row, an empty file or a repeated id is an error."""
    items: list[BenchItem] = []
    first_line: dict[str, int] = {}
    for index, (line, record) in enumerate(iter_file(path)):
        if isinstance(record, FormatError):
            raise record
        item = parse_row(record, index, path, line)
        row_id = str(item.extra["id"])
        if row_id in first_line:
            raise FormatError(path, line, f"duplicate id {row_id!r}, first seen on line {first_line[row_id]}", "id")
        first_line[row_id] = line
        items.append(item)
    if not items:
        raise FormatError(path, 1, "no rows: a RewardBench file needs at least one {prompt, chosen, rejected, subset}")
    return items
