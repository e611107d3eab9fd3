"""A bench file's layout detected (or forced), and read as bench items either way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cheems.errors import FormatError, InvalidInput
from cheems.formats.benchfile import BenchFormat, bench_file_under, detect_format, read_bench_file

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


class Refused(InvalidInput):
    """A caller's own kind of InvalidInput (the evaluation service's BadRequest, a training's BadOverride)."""


def test_a_bench_file_is_a_name_of_a_file_under_the_root(tmp_path: Path) -> None:
    root = tmp_path / "bench"
    (root / "sub").mkdir(parents=True)
    (root / "open.jsonl").write_text("")
    (tmp_path / "secret.jsonl").write_text("")
    (root / "out.jsonl").symlink_to(tmp_path / "secret.jsonl")
    (root / "loop.jsonl").symlink_to(root / "loop.jsonl")
    assert bench_file_under(root, "sub/../open.jsonl", "f") == (root / "open.jsonl").resolve()
    refused = {
        "": "is not a file under the bench root",
        ".": "is not a file under the bench root",
        "../secret.jsonl": "is not a file under the bench root",
        str(tmp_path / "secret.jsonl"): "is not a file under the bench root",
        "out.jsonl": "is not a file under the bench root",  # a symlink out
        "sub": "no file 'sub' under the bench root",
        "absent.jsonl": "no file 'absent.jsonl' under the bench root",
        "a\x00b": "is not a file name",
        "a" * 300: "is not a file name",  # longer than a file name may be: was an OSError (INTERNAL)
        "loop.jsonl": "is not a file name",
    }
    for name, why in refused.items():
        with pytest.raises(Refused, match=rf"^bench_files\[2\]: .*{why}"):
            bench_file_under(root, name, "bench_files[2]", Refused)
    with pytest.raises(InvalidInput) as caught:
        bench_file_under(root, "x" * 10_000, "f")
    assert len(str(caught.value)) < 120  # a request's name is echoed short
