"""The rule filter's verdicts in the store (SQLite and PostgreSQL): stored per response, listed, counted."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from services.store import repository as repo
from services.store.db import session_scope
from services.store.errors import UnknownPrompt
from services.store.filtered import FilteredResponse, filtered, keep_passing, reason_counts, reasons_by_prompt


def verdict(content: str) -> str | None:
    return "too_long>4" if len(content) > 4 else None


def test_verdicts_are_stored_listed_and_counted(engine: Engine, prompt_id: str) -> None:
    with session_scope(engine) as session:
        other, _ = repo.add_sample(session, "你好", [("a", "你好呀"), ("b", "你好你好你好")], ["闲聊"])
    with session_scope(engine) as session:
        assert keep_passing(session, prompt_id, verdict) == ["r3"]  # r1 and r2 are longer than 4 characters
        assert keep_passing(session, other, verdict) == ["a"]
    with session_scope(engine) as session:
        assert keep_passing(session, other, verdict) == ["a"]  # judged again: the same verdict, nothing added
        shown = filtered(session, prompt_id)
        assert [(f.key, f.reason) for f in shown] == [("r1", "too_long>4"), ("r2", "too_long>4")]
        assert FilteredResponse(other, "b", "too_long>4", "你好你好你好") in filtered(session)
        assert reason_counts(session) == {"too_long>4": 3}
        assert reason_counts(session, [other]) == {"too_long>4": 1}
        assert reasons_by_prompt(session) == {
            prompt_id: {"r1": "too_long>4", "r2": "too_long>4"},
            other: {"b": "too_long>4"},
        }
        assert repo.responses_for(session, other) == {"a": "你好呀", "b": "你好你好你好"}  # kept in the store
    with session_scope(engine) as session:
        assert keep_passing(session, other, lambda content: None) == ["a", "b"]  # looser rules: kept again
        assert reason_counts(session, [other]) == {}


def test_an_unknown_prompt_is_refused(engine: Engine) -> None:
    with session_scope(engine) as session, pytest.raises(UnknownPrompt, match="unknown prompt 'nope'"):
        keep_passing(session, "nope", verdict)
