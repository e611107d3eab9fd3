"""jsonl primitives: line numbers, UTF-8 writes, typed field access."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from cheems.errors import FormatError
from cheems.formats.jsonl import iter_objects, require, write_objects


def test_iter_objects_line_numbers_count_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text('\n{"n": 1}\n   \n\n{"n": 2}\n\t\n{"n": 3}', encoding="utf-8")
    assert list(iter_objects(path)) == [(2, {"n": 1}), (5, {"n": 2}), (7, {"n": 3})]


def test_iter_objects_error_line_counts_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text('{"n": 1}\n\n\n{"n": \n', encoding="utf-8")
    with pytest.raises(FormatError) as info:
        list(iter_objects(path))
    assert info.value.line == 4
    assert f"{path}:4" in str(info.value)


def test_iter_objects_rejects_non_object(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text('{"n": 1}\n"你好吗？"\n', encoding="utf-8")
    with pytest.raises(FormatError) as info:
        list(iter_objects(path))
    assert info.value.line == 2
    assert "str" in str(info.value)


def test_write_objects_writes_unescaped_utf8_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "out.jsonl"
    objects = [{"input": "你好吗？", "reply": "很好。"}, {"input": "谢谢"}]
    assert write_objects(path, iter(objects)) == 2
    raw = path.read_bytes()
    assert "你好吗？".encode() in raw
    assert "很好。".encode() in raw
    assert b"\\u" not in raw
    lines = raw.decode("utf-8").splitlines()
    assert [json.loads(line) for line in lines] == objects


def test_write_objects_empty_gives_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    assert write_objects(path, []) == 0
    assert path.read_bytes() == b""


def test_require_returns_value_of_right_type() -> None:
    assert require({"n": 3}, "n", int, "f.jsonl", 7) == 3
    assert require({"flag": True}, "flag", bool, "f.jsonl", 7) is True
    assert require({"flag": False}, "flag", (int, bool), "f.jsonl", 7) is False


@pytest.mark.parametrize("value", [True, False])
def test_require_rejects_bool_for_int(value: bool) -> None:
    with pytest.raises(FormatError) as info:
        require({"n": value}, "n", int, "f.jsonl", 7)
    err = info.value
    assert (err.path, err.line, err.field) == ("f.jsonl", 7, "n")
    assert "expected int, got bool" in str(err)


def test_require_missing_and_wrong_type() -> None:
    with pytest.raises(FormatError) as info:
        require({}, "n", int, "f.jsonl", 2)
    assert (info.value.line, info.value.field) == (2, "n")
    assert str(info.value) == "f.jsonl:2: n: missing field"

    with pytest.raises(FormatError) as info:
        require({"n": "1"}, "n", (int, float), "f.jsonl", 2)
    assert info.value.field == "n"
    assert "expected int or float, got str" in str(info.value)


def test_written_files_follow_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_objects(tmp_path / "out.jsonl", [{"a": 1}])
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out.jsonl").stat().st_mode) == 0o644
