"""A bench file's layout detected (or forced), and read as bench items either way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cheems.errors import FormatError, InvalidInput
from cheems.formats.benchfile import BenchFormat, detect_format, read_bench_file

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample"
ROW = {"prompt": "你好", "chosen": "你好！", "rejected": "嗯", "subset": "chat"}


def test_layouts_are_detected(tmp_path: Path) -> None:
    rows = tmp_path / "rb.jsonl"
    rows.write_text("\n" + json.dumps(ROW) + "\n", encoding="utf-8")
    array = tmp_path / "rb.json"
    array.write_text(json.dumps([ROW]), encoding="utf-8")
    assert detect_format(SAMPLE / "open.jsonl") is BenchFormat.CHEEMSBENCH
    assert detect_format(rows) is BenchFormat.REWARDBENCH and detect_format(array) is BenchFormat.REWARDBENCH
    assert read_bench_file(rows)[0].ranks() == [1, 2]
    assert len(read_bench_file(SAMPLE / "open.jsonl", "auto")) == 18


def test_a_forced_layout_is_used_and_a_wrong_one_fails_naming_the_line(tmp_path: Path) -> None:
    rows = tmp_path / "rb.jsonl"
    rows.write_text(json.dumps(ROW) + "\n", encoding="utf-8")
    with pytest.raises(FormatError, match=r"rb\.jsonl:1: responses: missing field"):
        read_bench_file(rows, BenchFormat.CHEEMSBENCH)
    with pytest.raises(FormatError, match=r"open.jsonl:1: prompt: missing field"):
        read_bench_file(SAMPLE / "open.jsonl", BenchFormat.REWARDBENCH)


def test_an_unknown_format_lists_the_choices() -> None:
    with pytest.raises(InvalidInput, match="format: expected one of auto, cheemsbench, rewardbench"):
        read_bench_file(SAMPLE / "open.jsonl", "parquet")


def test_a_bad_first_line_goes_to_the_cheemsbench_reader(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"not json\n")
    assert detect_format(bad) is BenchFormat.CHEEMSBENCH
    with pytest.raises(FormatError, match=r"bad\.jsonl:1: invalid JSON"):
        read_bench_file(bad)
