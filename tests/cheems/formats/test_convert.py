"""`cheems convert`: any layout in, the official layouts out, every record accounted for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from cheems.formats.cheemsbench import read_bench
from cheems.formats.convert import convert
from cheems.formats.preference import read_preference
from tests.cheems.formats.test_layouts import MULTI_TURN, SINGLE_TURN

ROOT = Path(__file__).resolve().parents[3]


def write(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def test_community_layouts_become_official_preference_lines_that_read_back_the_same(tmp_path: Path) -> None:
    source = write(tmp_path / "in.jsonl", [*MULTI_TURN.values(), *SINGLE_TURN.values()])
    result = convert(source, tmp_path / "out.jsonl")
    assert (result.read, result.errors, result.layout) == (10, [], "annotations")
    assert result.layouts_in == {"alpaca": 2, "annotations": 1, "hh-rlhf": 1, "pairwise": 1, "sharegpt": 1, "trl": 4}
    before, after = read_preference(source), read_preference(tmp_path / "out.jsonl")
    assert after == before
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(lines) == result.written == len(before)
    multi = next(line for line in lines if "history" in line)
    assert multi["sys_prompt"] == "你是一个乐于助人的助手。"
    assert multi["history"] == [
        {"role": "user", "content": "你好！"},
        {"role": "assistant", "content": "你好，有什么可以帮你？"},
    ]


def test_a_bench_file_stays_a_bench_file(tmp_path: Path) -> None:
    result = convert(ROOT / "data" / "sample" / "open.jsonl", tmp_path / "bench.jsonl")
    assert result.layout == "cheemsbench"
    assert read_bench(tmp_path / "bench.jsonl") == read_bench(ROOT / "data" / "sample" / "open.jsonl")


def test_cli_writes_the_good_records_reports_the_bad_and_exits_1(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    good = json.dumps(SINGLE_TURN["trl-standard"], ensure_ascii=False).encode()
    source.write_bytes(b"\n".join([good, b'{"prompt": "\xff"}', b'{"instruction": "x"}', good]) + b"\n")
    out = tmp_path / "out.jsonl"
    run = subprocess.run(
        [sys.executable, "-m", "cheems_cli", "convert", str(source), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 1, run.stderr
    assert f"{source}:2: invalid UTF-8" in run.stderr
    assert f"{source}:3: chosen: missing field" in run.stderr
    assert "read 4 records (2 trl), rejected 2; wrote 1 prompts" in run.stdout
    assert len(read_preference(out)) == 1


def test_cli_forced_format_and_unknown_format(tmp_path: Path) -> None:
    source = write(tmp_path / "in.json", [SINGLE_TURN["alpaca-input"]])
    for args, code in ((["--format", "alpaca"], 0), (["--format", "trl"], 1), (["--format", "csv"], 2)):
        run = subprocess.run(
            [sys.executable, "-m", "cheems_cli", "convert", str(source), "--out", str(tmp_path / "o.jsonl"), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert run.returncode == code, (args, run.stderr)
        assert "Traceback" not in run.stderr
