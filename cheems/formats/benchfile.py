"""Which layout a bench file is in (CheemsBench or RewardBench), and reading it as bench items either way.

    items = read_bench_file("open.jsonl")                         # auto: detected from the file
    items = read_bench_file("rb.json", BenchFormat.REWARDBENCH)   # forced

Detection: a `.json` or `.parquet` file is RewardBench (CheemsBench is jsonl only); any other is
RewardBench when its first record is an object holding both `chosen` and `rejected`, else
CheemsBench (whose reader then reports whatever is wrong with it).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from cheems.errors import FormatError, InvalidInput
from cheems.formats.cheemsbench import BenchItem, read_bench
from cheems.formats.datafile import iter_file
from cheems.formats.rewardbench import read_rewardbench


class BenchFormat(StrEnum):
    AUTO = "auto"
    CHEEMSBENCH = "cheemsbench"
    REWARDBENCH = "rewardbench"


def bench_format(value: str) -> BenchFormat:
    """A format named by its value; InvalidInput listing the choices otherwise."""
    try:
        return BenchFormat(value)
    except ValueError:
        choices = ", ".join(f.value for f in BenchFormat)
        raise InvalidInput(f"format: expected one of {choices}, got {value!r}") from None


def detect_format(path: str | Path) -> BenchFormat:
    """CHEEMSBENCH or REWARDBENCH, from the file's suffix and first record."""
    if Path(path).suffix.lower() in (".json", ".parquet"):
        return BenchFormat.REWARDBENCH
    for _, record in iter_file(path):
        if isinstance(record, FormatError):
            break
        return BenchFormat.REWARDBENCH if {"chosen", "rejected"} <= record.keys() else BenchFormat.CHEEMSBENCH
    return BenchFormat.CHEEMSBENCH


def read_bench_file(path: str | Path, fmt: BenchFormat | str = BenchFormat.AUTO) -> list[BenchItem]:
    """Every item of a bench file in `fmt` (AUTO: detected)."""
    chosen = bench_format(fmt) if isinstance(fmt, str) else fmt
    if chosen is BenchFormat.AUTO:
        chosen = detect_format(path)
    return read_rewardbench(path) if chosen is BenchFormat.REWARDBENCH else read_bench(path)
