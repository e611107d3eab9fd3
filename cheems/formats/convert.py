"""Any layout in, the official layouts out: `cheems convert prefs.json --out prefs.jsonl`.

Records of the same prompt in context merge into one line. A file whose every prompt has a full
ranking and a category is written as CheemsBench; anything else as CheemsPreference (annotation
lists, `sys_prompt` and `history` kept). Bad records are reported by line and left out; the good
ones are written all the same (atomically).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cheems.errors import FormatError
from cheems.formats.cheemsbench import BenchItem, write_bench
from cheems.formats.layouts import iter_records
from cheems.formats.preference import PreferenceItem, merge, write_preference
from cheems.formats.record import Record


@dataclass
class Converted:
    read: int = 0  # records read, good or bad
    written: int = 0  # lines written (one per prompt)
    layout: str = ""  # "cheemsbench" or "annotations"
    layouts_in: dict[str, int] = field(default_factory=dict)  # records per layout read
    errors: list[FormatError] = field(default_factory=list)


def convert(path: str | Path, out: str | Path, layout: str | None = None) -> Converted:
    """Rewrite `path` (any layout, or `layout` forced) in the official layout at `out`."""
    result, records = Converted(), []
    for _, record in iter_records(path, layout):
        result.read += 1
        if isinstance(record, FormatError):
            result.errors.append(record)
            continue
        result.layouts_in[record.layout] = result.layouts_in.get(record.layout, 0) + 1
        records.append(record)
    merged = merge(records, path, result.errors)
    if merged and all(_is_bench(r) for r in merged):
        result.layout = "cheemsbench"
        result.written = write_bench(out, (_bench_item(r) for r in merged))
    else:
        result.layout = "annotations"
        result.written = write_preference(out, (PreferenceItem.of(r) for r in merged))
    result.errors.sort(key=lambda e: e.line)
    return result


def _is_bench(record: Record) -> bool:
    return record.rank is not None and bool(record.category)


def _bench_item(record: Record) -> BenchItem:
    extra = dict(record.extra)
    if record.system_prompt:
        extra["sys_prompt"] = record.system_prompt
    if record.history:
        extra["history"] = [{"role": role, "content": content} for role, content in record.history]
    assert record.rank is not None
    return BenchItem(record.prompt, record.responses, record.rank, record.category, extra, record.line)
