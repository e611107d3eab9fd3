"""RewardBench rows (.jsonl and .json) read as two-response bench items; bad rows name their file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cheems.errors import FormatError
from cheems.formats.rewardbench import read_rewardbench

ROWS = [
    {"prompt": "你好吗？", "chosen": "我很好，谢谢。", "rejected": "不知道", "subset": "alpacaeval-easy", "id": 30},
    {"prompt": "1+1=?", "chosen": "2", "rejected": "3", "subset": "math-prm", "id": "m-1", "chosen_model": "human"},
]


def jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_rows_become_items_with_chosen_ranked_first(tmp_path: Path) -> None:
    items = read_rewardbench(jsonl(tmp_path / "rb.jsonl", ROWS))
    first, second = items
    assert first.input == "你好吗？" and first.category == ("alpacaeval-easy",) and first.line == 1
    assert [(r.id, r.content) for r in first.responses] == [("30/chosen", "我很好，谢谢。"), ("30/rejected", "不知道")]
    assert first.ranks() == [1, 2]
    assert second.primary_category == "math-prm" and second.responses[0].id == "m-1/chosen"
    assert second.extra == {"id": "m-1", "chosen_model": "human"}


def test_a_json_array_is_read_too_with_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "rb.json"
    path.write_text(json.dumps(ROWS, ensure_ascii=False, indent=2), encoding="utf-8")
    items = read_rewardbench(path)
    assert [i.input for i in items] == ["你好吗？", "1+1=?"]
    assert items[0].line == 2 and items[1].line > items[0].line


def test_rows_without_id_are_numbered_and_prompts_may_recur(tmp_path: Path) -> None:
    rows = [{k: v for k, v in ROWS[0].items() if k != "id"}] * 2
    items = read_rewardbench(jsonl(tmp_path / "rb.jsonl", rows))
    assert [i.responses[1].id for i in items] == ["0/rejected", "1/rejected"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"prompt": "p", "chosen": "a", "subset": "s"}\n', "rb.jsonl:1: rejected: missing field"),
        (
            b'{"prompt": "p", "chosen": "a", "rejected": 3, "subset": "s"}\n',
            "rb.jsonl:1: rejected: expected str, got int",
        ),
        (b'{"prompt": ["p"], "chosen": "a", "rejected": "b", "subset": "s"}\n', "rb.jsonl:1: prompt: expected str"),
        (
            b'{"prompt": "p", "chosen": "a", "rejected": "b", "subset": " "}\n',
            "rb.jsonl:1: subset: expected a non-empty",
        ),
        (b'{"prompt": "p", "chosen": "a", "rejected": "b", "subset": "s", "id": null}\n', "rb.jsonl:1: id: expected"),
        (
            b'\n{"prompt": "p", "chosen": "a", "rejected": "b", "subset": "s"}\n{"prompt": "\xff"}\n',
            "rb.jsonl:3: invalid UTF-8",
        ),
        (b"", "rb.jsonl:1: no rows"),
        (b"\n\n", "rb.jsonl:1: no rows"),
        (
            b'{"prompt": "p", "chosen": "a", "rejected": "b", "subset": "s", "id": 1}\n'
            b'{"prompt": "q", "chosen": "a", "rejected": "b", "subset": "s", "id": "1"}\n',
            "rb.jsonl:2: id: duplicate id '1', first seen on line 1",
        ),
    ],
)
def test_bad_jsonl_names_file_line_and_field(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "rb.jsonl"
    path.write_bytes(content)
    with pytest.raises(FormatError) as error:
        read_rewardbench(path)
    assert expected in str(error.value) and str(path) in str(error.value)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "rb.json:1: no rows"),
        (b"[]", "rb.json:1: no rows"),
        (
            b'[\n{"prompt": "p", "chosen": "a", "rejected": "b", "subset": "s"},\n3\n]',
            "rb.json:3: expected a JSON object",
        ),
        (b'[\n{"prompt": "p", "chosen": "a", "subset": "s"}\n]', "rb.json:2: rejected: missing field"),
        (b'[\n{"prompt": "p",\n "chosen": }\n]', "rb.json:2: invalid JSON (Expecting value at line 3"),
        (b'[\n{"prompt": "p", "chosen": "a", "rejected": "b", "subset": "s"}', "rb.json:2: invalid JSON (the array"),
        (b'[\n{"prompt": "p", "chosen": "a", "rejected": "b", "subset": "s"}\n]\nx', "rb.json:4: invalid JSON (text"),
        (b'[\n{"prompt": "p", "chosen": "\xe4\xbd", "rejected": "b", "subset": "s"}]', "rb.json:2: invalid UTF-8"),
        (b'[{"prompt": "p", "chosen": NaN, "rejected": "b", "subset": "s"}]', "rb.json:1: invalid JSON"),
    ],
)
def test_bad_json_names_file_and_line(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "rb.json"
    path.write_bytes(content)
    with pytest.raises(FormatError) as error:
        read_rewardbench(path)
    assert expected in str(error.value)


def test_parquet_rows_are_read(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    path = tmp_path / "rb.parquet"
    rows = [{**{k: v for k, v in r.items() if k != "chosen_model"}, "id": n} for n, r in enumerate(ROWS, start=7)]
    pq.write_table(pa.Table.from_pylist(rows), path)  # the hub's layout: an integer id column
    items = read_rewardbench(path)
    assert [(i.line, i.responses[0].id, i.input) for i in items] == [
        (1, "7/chosen", "你好吗？"),
        (2, "8/chosen", "1+1=?"),
    ]
