"""Which layout a bench file is in (CheemsBench or RewardBench), reading it as bench items either way, and a bench
file a request names under a service's bench root.

    items = read_bench_file("open.jsonl")                         # auto: detected from the file
    items = read_bench_file("rb.json", BenchFormat.REWARDBENCH)   # forced
    bench_file_under(root, "open.jsonl", "bench_files[0]")        # root/open.jsonl; InvalidInput naming the field

Detection: a `.json` or `.parquet` file is RewardBench (CheemsBench is jsonl only); any other is
RewardBench when its first record is an object holding both `chosen` and `rejected`, else
CheemsBench (whose reader then reports whatever is wrong with it).

A request (the evaluation service's StartRun, a training's `eval_files`) names bench files, never paths: a name is
taken only when it resolves (symlinks followed) to a regular file strictly under the root; a name that is empty,
holds a NUL, is too long for the file system or leaves the root (`..`, an absolute path, a symlink out) is refused
before anything outside the root is looked at, and the message shows at most 80 characters of it.
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


def bench_file_under(root: Path, name: str, field: str, error: type[InvalidInput] = InvalidInput) -> Path:
    """The resolved path of the bench file `name` under `root`; `error` (an InvalidInput) naming `field` otherwise."""
    base, shown = root.resolve(), repr(name[:80])
    try:
        path = (base / name).resolve()
    except (OSError, RuntimeError, ValueError):  # a NUL (ValueError), a name too long, a symlink loop
        raise error(f"{field}: {shown} is not a file name") from None
    if not name or path == base or not path.is_relative_to(base):
        raise error(f"{field}: {shown} is not a file under the bench root")
    try:
        regular = path.is_file()
    except (OSError, ValueError):
        raise error(f"{field}: {shown} is not a file name") from None
    if not regular:
        raise error(f"{field}: no file {shown} under the bench root")
    return path
