"""CheemsBench jsonl: round trips, FormatError naming file/line/field, all-or-nothing writes."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cheems.errors import FormatError
from cheems.formats.cheemsbench import BenchItem, read_bench, write_bench
from cheems.formats.responses import Response

GOOD: list[dict[str, Any]] = [
    {
        "input": "你好吗？",
        "responses": [{"id": "a", "content": "很好。"}, {"id": "b", "content": "不好。"}],
        "rank": {"a": 1, "b": 2},
        "category": ["闲聊", "问候"],
    },
    {
        "input": "今天天气怎么样？",
        "responses": [{"id": "x", "content": "晴天。"}, {"id": "y", "content": "下雨。"}],
        "rank": {"x": 1, "y": 1},
        "category": ["常识"],
    },
]


def item(text: str = "你好吗？", **changes: Any) -> BenchItem:
    fields: dict[str, Any] = {
        "input": text,
        "responses": (Response("a", "很好。"), Response("b", "不好。")),
        "rank": {"a": 1, "b": 2},
        "category": ("闲聊",),
    }
    fields.update(changes)
    return BenchItem(**fields)


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def with_change(**changes: Any) -> str:
    """A third record (distinct prompt) with fields replaced; a value of ... removes the field."""
    record: dict[str, Any] = {
        "input": "第三个问题？",
        "responses": [{"id": "a", "content": "很好。"}, {"id": "b", "content": "不好。"}],
        "rank": {"a": 1, "b": 2},
        "category": ["闲聊"],
    }
    for key, value in changes.items():
        if value is ...:
            del record[key]
        else:
            record[key] = value
    return dumps(record)


# --- round trips and accepted variants -------------------------------------------------------


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "bench.jsonl"
    items = [
        item(),
        item("今天天气怎么样？", rank={"a": 1, "b": 1}, category=("常识", "天气")),
    ]
    assert write_bench(path, items) == 2
    back = read_bench(path)
    assert back == items
    assert [i.line for i in back] == [1, 2]
    assert back[1].primary_category == "常识"
    assert back[0].ranks() == [1, 2]


def test_read_matches_official_layout(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "bench.jsonl", [dumps(r) for r in GOOD])
    items = read_bench(path)
    assert items[0] == BenchItem(
        "你好吗？",
        (Response("a", "很好。"), Response("b", "不好。")),
        {"a": 1, "b": 2},
        ("闲聊", "问候"),
    )
    assert [i.to_json() for i in items] == GOOD


def test_extra_fields_survive(tmp_path: Path) -> None:
    record = {**GOOD[0], "sys_prompt": "你是一个助手。", "meta": {"来源": "人工", "n": [1, 2]}}
    src = write_lines(tmp_path / "in.jsonl", [dumps(record)])
    [read] = read_bench(src)
    assert read.extra == {"sys_prompt": "你是一个助手。", "meta": {"来源": "人工", "n": [1, 2]}}

    out = tmp_path / "out.jsonl"
    write_bench(out, [read])
    assert json.loads(out.read_text(encoding="utf-8")) == record
    assert read_bench(out) == [read]


def test_blank_lines_skipped(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "bench.jsonl", ["", dumps(GOOD[0]), "   ", "", dumps(GOOD[1]), ""])
    items = read_bench(path)
    assert [i.input for i in items] == ["你好吗？", "今天天气怎么样？"]
    assert [i.line for i in items] == [2, 5]


def test_prompt_key_accepted_for_input(tmp_path: Path) -> None:
    record = dict(GOOD[0])
    record["prompt"] = record.pop("input")
    path = write_lines(tmp_path / "bench.jsonl", [dumps(record)])
    [read] = read_bench(path)
    assert read.input == "你好吗？"
    assert "prompt" not in read.extra
    assert read.to_json()["input"] == "你好吗？"


def test_integer_string_ranks_become_int(tmp_path: Path) -> None:
    record = {**GOOD[0], "rank": {"a": "2", "b": " 1 "}}
    path = write_lines(tmp_path / "bench.jsonl", [dumps(record)])
    [read] = read_bench(path)
    assert dict(read.rank) == {"a": 2, "b": 1}
    assert all(type(v) is int for v in read.rank.values())


# --- malformed records: the bad one is on line 3, after two good ones ---------------------------

MALFORMED = [
    pytest.param('{"input": "第三个问题？", "responses": [', None, "invalid JSON", id="invalid-json"),
    pytest.param(dumps([GOOD[0]]), None, "expected a JSON object", id="json-array"),
    pytest.param(with_change(input=...), "input", "missing", id="missing-input"),
    pytest.param(with_change(input=3), "input", "expected str", id="input-not-str"),
    pytest.param(with_change(responses=...), "responses", "missing", id="missing-responses"),
    pytest.param(with_change(responses=[], rank={}), "responses", "empty", id="empty-responses"),
    pytest.param(with_change(responses={"a": "很好。"}), "responses", "expected list", id="responses-not-list"),
    pytest.param(
        with_change(responses=["很好。"], rank={}),
        "responses[0]",
        "expected an object",
        id="response-not-object",
    ),
    pytest.param(
        with_change(responses=[{"id": "a", "content": "很好。"}, {"content": "不好。"}]),
        "responses[1].id",
        "missing",
        id="response-missing-id",
    ),
    pytest.param(
        with_change(responses=[{"id": "a"}, {"id": "b", "content": "不好。"}]),
        "responses[0].content",
        "missing",
        id="response-missing-content",
    ),
    pytest.param(
        with_change(responses=[{"id": "a", "content": 1}]),
        "responses[0].content",
        "expected str",
        id="content-int",
    ),
    pytest.param(
        with_change(responses=[{"id": "a", "content": "很好。"}, {"id": "a", "content": "不好。"}], rank={"a": 1}),
        "responses[1].id",
        "duplicate response id 'a'",
        id="duplicate-response-id",
    ),
    pytest.param(with_change(rank=...), "rank", "missing", id="missing-rank"),
    pytest.param(with_change(rank=[1, 2]), "rank", "expected dict", id="rank-not-dict"),
    pytest.param(with_change(rank={"a": 1, "b": 2, "c": 3}), "rank", "unknown response id 'c'", id="rank-unknown-id"),
    pytest.param(with_change(rank={"a": 1}), "rank", "'b' has no rank", id="response-without-rank"),
    pytest.param(with_change(rank={"a": 1, "b": 1.5}), "rank", "not an integer", id="rank-float"),
    pytest.param(with_change(rank={"a": 1, "b": 2.0}), "rank", "not an integer", id="rank-whole-float"),
    pytest.param(with_change(rank={"a": 1, "b": "a"}), "rank", "not an integer", id="rank-letter"),
    pytest.param(with_change(rank={"a": 1, "b": "1.5"}), "rank", "not an integer", id="rank-float-string"),
    pytest.param(with_change(rank={"a": 1, "b": ""}), "rank", "not an integer", id="rank-empty-string"),
    pytest.param(with_change(rank={"a": 1, "b": True}), "rank", "not an integer", id="rank-true"),
    pytest.param(with_change(rank={"a": 1, "b": None}), "rank", "not an integer", id="rank-null"),
    pytest.param(with_change(category=...), "category", "missing", id="missing-category"),
    pytest.param(with_change(category=[]), "category", "non-empty", id="empty-category"),
    pytest.param(with_change(category="闲聊"), "category", "expected list", id="category-not-list"),
    pytest.param(with_change(category=["闲聊", ""]), "category", "non-empty", id="category-empty-string"),
    pytest.param(with_change(category=["闲聊", 2]), "category", "non-empty", id="category-not-str"),
    pytest.param(dumps(GOOD[0]), "input", "first seen on line 1", id="duplicate-prompt"),
    pytest.param(
        dumps({**{k: v for k, v in GOOD[1].items() if k != "input"}, "prompt": GOOD[1]["input"]}),
        "input",
        "first seen on line 2",
        id="duplicate-prompt-via-prompt-key",
    ),
]


@pytest.mark.parametrize(("bad_line", "field", "fragment"), MALFORMED)
def test_malformed_record(tmp_path: Path, bad_line: str, field: str | None, fragment: str) -> None:
    path = write_lines(tmp_path / "bench.jsonl", [dumps(GOOD[0]), dumps(GOOD[1]), bad_line, dumps(GOOD[0])])
    with pytest.raises(FormatError) as info:
        read_bench(path)
    err = info.value
    assert err.path == str(path)
    assert err.line == 3
    assert err.field == field
    assert fragment in str(err)
    prefix = f"{path}:3: {field}: " if field else f"{path}:3: "
    assert str(err).startswith(prefix)


def test_malformed_line_number_counts_blank_lines(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "bench.jsonl", [dumps(GOOD[0]), "", "", with_change(rank=...)])
    with pytest.raises(FormatError) as info:
        read_bench(path)
    assert (info.value.line, info.value.field) == (4, "rank")


def test_format_error_is_value_error(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "bench.jsonl", ["[]"])
    with pytest.raises(ValueError):
        read_bench(path)


# --- nothing partially written ----------------------------------------------------------------

BAD_ITEMS = [item("一"), item("二"), item("三", extra={"score": float("nan")}), item("四")]


def test_failed_write_leaves_existing_file_untouched(tmp_path: Path) -> None:
    path = tmp_path / "bench.jsonl"
    write_bench(path, [item("原来的问题？")])
    before = path.read_bytes()

    with pytest.raises(ValueError):
        write_bench(path, BAD_ITEMS)

    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.jsonl"]
    assert read_bench(path) == [item("原来的问题？")]


def test_failed_write_creates_no_new_file(tmp_path: Path) -> None:
    path = tmp_path / "new.jsonl"
    with pytest.raises(ValueError):
        write_bench(path, BAD_ITEMS)
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_failed_write_error_is_from_the_nan(tmp_path: Path) -> None:
    # The fixture really is unserialisable only because of the nan, not for some other reason.
    assert math.isnan(BAD_ITEMS[2].extra["score"])
    assert write_bench(tmp_path / "ok.jsonl", [i for i in BAD_ITEMS if not i.extra]) == 3


# --- property: write/read is the identity -----------------------------------------------------

_chars = st.one_of(
    st.characters(min_codepoint=0x4E00, max_codepoint=0x9FA5),
    st.characters(min_codepoint=0x20, max_codepoint=0x7E),
    st.sampled_from("，。？！\n\t\u3000"),
)
_text = st.text(alphabet=_chars, max_size=12)
_json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), _text
)
_extra_value = st.recursive(
    _json_scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_text, inner, max_size=3)),
    max_leaves=6,
)
_KNOWN = {"input", "prompt", "responses", "rank", "category"}


@st.composite
def bench_items(draw: st.DrawFn) -> BenchItem:
    ids = draw(st.lists(_text, min_size=1, max_size=4, unique=True))
    responses = tuple(Response(rid, draw(_text)) for rid in ids)
    rank = {rid: draw(st.integers(min_value=-(2**40), max_value=2**40)) for rid in ids}
    category = tuple(draw(st.lists(_text.filter(bool), min_size=1, max_size=3)))
    extra = draw(st.dictionaries(_text.filter(lambda k: k not in _KNOWN), _extra_value, max_size=3))
    return BenchItem(draw(_text), responses, rank, category, extra)


@settings(max_examples=150, deadline=None)
@given(st.lists(bench_items(), max_size=4, unique_by=lambda i: i.input))
def test_round_trip_property(items: list[BenchItem]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.jsonl"
        assert write_bench(path, items) == len(items)
        assert read_bench(path) == items
