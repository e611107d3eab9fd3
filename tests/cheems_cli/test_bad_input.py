"""Hostile input to `cheems eval` and `cheems resolve`, run as users run them (a subprocess): every bad line
is one `error: FILE:LINE: field: reason` on stderr and exit code 2, never a traceback, and nothing is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

RESPONSES = [{"id": "r1", "content": "甲最矮。"}, {"id": "r2", "content": "丙最矮。"}]
BENCH = {
    "input": "甲比乙高，乙比丙高，谁最矮？",
    "responses": RESPONSES,
    "rank": {"r1": 2, "r2": 1},
    "category": ["推理"],
}
RAW = {
    "input": "写一句春天的诗。",
    "responses": RESPONSES,
    "category": ["创作"],
    "annotations": [{"better": "r2", "worse": "r1"}],
}
DEEP = b"[" * 100_000 + b"]" * 100_000
BIG = b"1" * 5000


def cheems(*args: str | Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "cheems_cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def encode(obj: dict[str, object]) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


def with_field(obj: dict[str, object], name: str, raw: bytes) -> bytes:
    """The object's JSON with `name` set to raw JSON text (what json.dumps cannot write: 10**400, a lone surrogate)."""
    return encode({**obj, name: None}).replace(f'"{name}": null'.encode(), f'"{name}": '.encode() + raw)


def write_lines(path: Path, *lines: bytes) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def assert_one_error_line(run: subprocess.CompletedProcess[str], expected: str) -> None:
    assert run.returncode == 2, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    assert run.stderr.startswith("error: ") and run.stderr.count("\n") == 1, run.stderr[-2000:]
    assert expected in run.stderr, run.stderr


BAD_BENCH_LINES = {
    "a 5000-digit rank": (with_field(BENCH, "rank", b'{"r1": ' + BIG + b', "r2": 1}'), "invalid JSON"),
    "a 5000-digit rank string": (
        with_field(BENCH, "rank", b'{"r1": "' + BIG + b'", "r2": 1}'),
        "rank: rank of 'r1' is too long",
    ),
    "invalid UTF-8": (encode(BENCH).replace("谁".encode(), b"\xff\xfe"), "invalid UTF-8"),
    "100k-deep nesting": (with_field(BENCH, "extra", DEEP), "invalid JSON (nested deeper than"),
    "a lone surrogate in a category": (with_field(BENCH, "category", b'["\\ud800"]'), "category[0]: a lone surrogate"),
}


@pytest.mark.parametrize("case", BAD_BENCH_LINES)
def test_eval_a_bad_bench_line_is_one_error_line(tmp_path: Path, case: str) -> None:
    bad, expected = BAD_BENCH_LINES[case]
    good = dict(BENCH, input="另一个问题")
    bench = write_lines(tmp_path / "bench.jsonl", encode(good), bad)
    rewards = write_lines(tmp_path / "rewards.jsonl", *[encode({"input": "x", "id": "r1", "reward": 0.5})])
    run = cheems("eval", bench, "--rewards", rewards, "--json", tmp_path / "out.json")
    assert_one_error_line(run, f"bench.jsonl:2: {expected}")
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize(
    ("reward", "expected"),
    [
        (b"1" + b"0" * 400, "rewards.jsonl:2: reward: reward must be a finite number"),  # 10**400: a float overflows
        (b"-" + b"9" * 400, "rewards.jsonl:2: reward: reward must be a finite number"),
        (BIG, "rewards.jsonl:2: invalid JSON"),
        (b"1e400", "rewards.jsonl:2: invalid JSON"),
    ],
)
def test_eval_a_reward_out_of_range_is_one_error_line(tmp_path: Path, reward: bytes, expected: str) -> None:
    bench = write_lines(tmp_path / "bench.jsonl", encode(BENCH))
    first = {"input": BENCH["input"], "id": "r1", "reward": 0.5}
    rewards = write_lines(
        tmp_path / "rewards.jsonl", encode(first), with_field({**first, "id": "r2"}, "reward", reward)
    )
    assert_one_error_line(cheems("eval", bench, "--rewards", rewards), expected)


BAD_RAW_LINES = {
    "a 5000-digit number": (with_field(RAW, "weight", BIG), "raw.jsonl:2: invalid JSON"),
    "invalid UTF-8": (encode(RAW).replace("春".encode(), b"\xc3\x28"), "raw.jsonl:2: invalid UTF-8"),
    "100k-deep nesting": (with_field(RAW, "annotations", DEEP), "raw.jsonl:2: invalid JSON (nested deeper than"),
    "a lone surrogate in a category": (
        with_field(RAW, "category", b'["\\udc80"]'),
        "raw.jsonl:2: category[0]: a lone surrogate",
    ),
    "a list among the discarded ids": (
        encode({**RAW, "discarded": [["r1"]]}),
        "raw.jsonl:2: discarded: expected a list of this prompt's response ids",
    ),
    "an object among the discarded ids": (encode({**RAW, "discarded": [{"id": "r1"}]}), "raw.jsonl:2: discarded: "),
}


@pytest.mark.parametrize("case", BAD_RAW_LINES)
def test_resolve_a_bad_annotation_line_is_one_error_line(tmp_path: Path, case: str) -> None:
    bad, expected = BAD_RAW_LINES[case]
    raw = write_lines(tmp_path / "raw.jsonl", encode(dict(RAW, input="另一个问题")), bad)
    run = cheems("resolve", raw, "--out", tmp_path / "bench.jsonl", "--stats", tmp_path / "stats.json")
    assert_one_error_line(run, expected)
    assert not (tmp_path / "bench.jsonl").exists() and not (tmp_path / "stats.json").exists()
