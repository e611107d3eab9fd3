"""`cheems resolve`: the file format, its errors, the bench output and STATS.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cheems.errors import FormatError
from cheems.formats.cheemsbench import read_bench
from services.annotation.files.resolve import resolve_file

RESPONSES = [{"id": f"r{i}", "content": f"回答{i}"} for i in range(1, 6)]


def line(annotations: list[object], **extra: object) -> str:
    return json.dumps(
        {"input": "问题", "responses": RESPONSES, "category": ["推理", "逻辑"], "annotations": annotations, **extra},
        ensure_ascii=False,
    )


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_resolves_to_the_official_bench_layout(tmp_path: Path) -> None:
    src = write(
        tmp_path / "raw.jsonl",
        [
            line([{"order": [["r1"], ["r2", "r3"]]}, {"better": "r3", "worse": "r4"}, {"equal": ["r4", "r5"]}]),
            line(
                [{"better": "r1", "worse": "r2"}, {"better": "r2", "worse": "r1"}, {"better": "r1", "worse": "r3"}],
                input="另一个问题",
            ),
        ],
    )
    stats = resolve_file(src, tmp_path / "bench.jsonl", tmp_path / "stats.json")
    [first, second] = read_bench(tmp_path / "bench.jsonl")
    assert dict(first.rank) == {"r1": 1, "r2": 2, "r3": 2, "r4": 3, "r5": 3}
    assert first.category == ("推理", "逻辑")
    assert dict(second.rank) == {"r1": 1, "r2": 1, "r3": 2} and [r.id for r in second.responses] == ["r1", "r2", "r3"]
    assert json.loads((tmp_path / "stats.json").read_text()) == {
        "prompts": 2,
        "annotations": 6,
        "conflict_ratio": 0.25,
        "merged_nodes": 3,
        "skipped_prompts": 0,
        "unranked_responses": 2,
    }  # 2 ties + 1 cycle merged; r4, r5 of the second prompt in no relation
    assert (stats.relations, stats.conflicts, stats.unranked_responses) == (8, 2, 2)


def test_discarded_responses_are_excluded(tmp_path: Path) -> None:
    src = write(
        tmp_path / "raw.jsonl",
        [line([{"order": [["r1"], ["r5"], ["r2"]]}, {"better": "r2", "worse": "r3"}], discarded=["r5"])],
    )
    resolve_file(src, tmp_path / "bench.jsonl")
    [item] = read_bench(tmp_path / "bench.jsonl")
    assert dict(item.rank) == {"r1": 1, "r2": 2, "r3": 3}


@pytest.mark.parametrize(
    ("annotation", "message"),
    [
        ({"better": "r1", "worse": "r9"}, "unknown response id 'r9'"),
        ({"better": "r1", "worse": "r1"}, "better than itself"),
        ({"equal": ["r1"]}, "two different response ids"),
        ({"order": [["r1"], []]}, "non-empty list of non-empty id lists"),
        ({"order": [["r1"], ["r2", "r1"]]}, "names a response twice"),
        ({"prefer": "r1"}, "expected"),
    ],
)
def test_bad_annotation_names_file_line_and_field_and_writes_nothing(
    tmp_path: Path, annotation: object, message: str
) -> None:
    src = write(tmp_path / "raw.jsonl", [line([{"better": "r1", "worse": "r2"}]), line([annotation], input="第二")])
    with pytest.raises(FormatError) as info:
        resolve_file(src, tmp_path / "bench.jsonl", tmp_path / "stats.json")
    assert (info.value.line, info.value.field) == (2, "annotations[0]") and message in str(info.value)
    assert not (tmp_path / "bench.jsonl").exists() and not (tmp_path / "stats.json").exists()


def test_cli(tmp_path: Path) -> None:
    src = write(tmp_path / "raw.jsonl", [line([{"order": [["r1"], ["r2"], ["r3"], ["r4"], ["r5"]]}])])
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "cheems_cli",
            "resolve",
            str(src),
            "--out",
            str(tmp_path / "b.jsonl"),
            "--stats",
            str(tmp_path / "s.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "conflict_ratio 0.0000" in run.stdout and "merged_nodes 0" in run.stdout
    bad = write(tmp_path / "bad.jsonl", ["{"])
    run = subprocess.run(
        [sys.executable, "-m", "cheems_cli", "resolve", str(bad), "--out", str(tmp_path / "x.jsonl")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2 and "bad.jsonl:1: invalid JSON" in run.stderr


def test_stats_count_skipped_prompts_and_unranked_responses(tmp_path: Path) -> None:
    src = write(
        tmp_path / "raw.jsonl",
        [
            line([{"better": "r1", "worse": "r2"}], discarded=["r3"]),  # r3, r4, r5 unranked
            line([{"equal": ["r1", "r2"]}], input="只有平局"),  # one rank only: skipped, r3-r5 unranked
        ],
    )
    resolve_file(src, tmp_path / "bench.jsonl", tmp_path / "stats.json")
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert (stats["prompts"], stats["skipped_prompts"], stats["unranked_responses"]) == (2, 1, 6)
    assert [item.input for item in read_bench(tmp_path / "bench.jsonl")] == ["问题"]


def test_lines_of_one_prompt_are_resolved_as_one_graph(tmp_path: Path) -> None:
    """Three annotators, three lines: one bench item that `cheems eval` reads, ranked from all of them."""
    src = write(
        tmp_path / "raw.jsonl",
        [
            line([{"better": "r1", "worse": "r2"}], sys_prompt="你是助手。"),
            line([{"better": "r2", "worse": "r3"}], input="另一个问题"),
            line([{"better": "r2", "worse": "r3"}], sys_prompt="你是助手。", discarded=["r5"]),
            line([{"better": "r3", "worse": "r4"}, {"better": "r4", "worse": "r5"}], sys_prompt="你是助手。"),
        ],
    )
    stats = resolve_file(src, tmp_path / "bench.jsonl", tmp_path / "stats.json")
    first, second = read_bench(tmp_path / "bench.jsonl")  # no duplicate prompt: eval takes it
    assert first.input == "问题" and dict(first.rank) == {"r1": 1, "r2": 2, "r3": 3, "r4": 4}
    assert first.extra == {"sys_prompt": "你是助手。"}  # kept for the scorer (r5: discarded by one annotator)
    assert dict(second.rank) == {"r2": 1, "r3": 2}
    assert (stats.prompts, stats.annotations, stats.relations, stats.unranked_responses) == (2, 5, 4, 4)


def test_lines_of_one_prompt_may_list_different_responses(tmp_path: Path) -> None:
    src = write(
        tmp_path / "raw.jsonl",
        [
            json.dumps(
                {
                    "input": "问题",
                    "responses": RESPONSES[:2],
                    "category": ["推理", "逻辑"],
                    "annotations": [{"better": "r1", "worse": "r2"}],
                },
                ensure_ascii=False,
            ),
            json.dumps(
                {
                    "input": "问题",
                    "responses": RESPONSES[1:3],
                    "category": ["推理", "逻辑"],
                    "annotations": [{"better": "r2", "worse": "r3"}],
                },
                ensure_ascii=False,
            ),
        ],
    )
    resolve_file(src, tmp_path / "bench.jsonl")
    [item] = read_bench(tmp_path / "bench.jsonl")
    assert [r.id for r in item.responses] == ["r1", "r2", "r3"] and dict(item.rank) == {"r1": 1, "r2": 2, "r3": 3}


@pytest.mark.parametrize(
    ("second", "field", "message"),
    [
        (
            {"responses": [*RESPONSES[:2], {"id": "r3", "content": "别的回答"}]},
            "responses[2].content",
            "response 'r3' has other content than on line 1",
        ),
        ({"category": ["推理"]}, "category", "another category than on line 1"),
        ({"sys_prompt": "你是猫。"}, "sys_prompt", "another system prompt than on line 1"),
    ],
)
def test_lines_of_one_prompt_must_agree(tmp_path: Path, second: dict[str, object], field: str, message: str) -> None:
    src = write(tmp_path / "raw.jsonl", [line([{"better": "r1", "worse": "r2"}]), line([], **second)])
    with pytest.raises(FormatError) as info:
        resolve_file(src, tmp_path / "bench.jsonl")
    assert (info.value.path, info.value.line, info.value.field) == (str(src), 2, field)
    assert message in str(info.value) and not (tmp_path / "bench.jsonl").exists()
