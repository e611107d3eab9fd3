"""The body parser (pure): it reads what json.loads reads, and names where a body is wrong."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.scorer.errors import InvalidRequest, LimitExceeded
from services.scorer.http.body import parse_body

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=30)


@given(st.dictionaries(st.text(), VALUES), st.sampled_from([None, 0, 2]))
def test_parse_body_reads_what_json_loads_reads(body: dict[str, Any], indent: int | None) -> None:
    data = json.dumps(body, indent=indent, ensure_ascii=indent == 0).encode()
    assert parse_body(data, 10_000) == json.loads(data)


def test_parse_body_limits() -> None:
    with pytest.raises(LimitExceeded, match="more than 5 JSON values"):
        parse_body(b'{"query": [1, 2, 3, 4, 5]}', 5)
    with pytest.raises(InvalidRequest, match=r"query\[1\]\.a(\[0\])+: nested deeper than 32 levels"):
        parse_body(b'{"query": [0, {"a": [' + b"[" * 40 + b"]" * 40 + b"]}]}", 10_000)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff{}", "not valid UTF-8"),
        (b"[1]", "must be a JSON object"),
        (b'{"query": [1, 2', "expected , or ]"),
        (b'{"query": ["a"]} x', "extra data"),
        (b'{"labels": [' + b"9" * 5000 + b"]}", r"labels\[0\]: Exceeds the limit"),
    ],
)
def test_bad_bodies_name_the_problem(data: bytes, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        parse_body(data, 10_000)
