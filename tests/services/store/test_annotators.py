"""Annotator accounts and task claims in the store (SQLite and PostgreSQL): tokens kept hashed, one holder per
task, the annotator's own task first, a lease after which a task may go to someone else."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine

from services.store import annotators as accounts
from services.store import repository as repo
from services.store.db import session_scope
from services.store.errors import Conflict, InvalidRecord, UnknownAnnotator
from services.store.models import Annotator

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
LEASE = timedelta(minutes=30)


def test_accounts_keep_only_the_token_hash(engine: Engine) -> None:
    with session_scope(engine) as s:
        token = accounts.add_annotator(s, "张三")
        admin = accounts.add_annotator(s, "组长", admin=True)
    with session_scope(engine) as s:
        stored = s.get(Annotator, "张三")
        assert stored is not None and stored.token_sha256 == accounts.hash_token(token) != token
        found = accounts.annotator_by_token(s, token)
        assert found is not None and (found.name, found.admin) == ("张三", False)
        boss = accounts.annotator_by_token(s, admin)
        assert boss is not None and boss.admin
        assert accounts.annotator_by_token(s, token + "x") is None
        with pytest.raises(Conflict, match="already exists"):
            accounts.add_annotator(s, "张三")
        with pytest.raises(InvalidRecord, match="name"):
            accounts.add_annotator(s, "")
    with session_scope(engine) as s:
        new = accounts.reset_token(s, "张三")
    with session_scope(engine) as s:
        assert accounts.annotator_by_token(s, token) is None and accounts.annotator_by_token(s, new) is not None
        accounts.disable(s, "张三")
    with session_scope(engine) as s:
        assert accounts.annotator_by_token(s, new) is None
        assert [p.name for p in accounts.list_annotators(s)] == ["张三", "组长"]
        with pytest.raises(UnknownAnnotator):
            accounts.reset_token(s, "nobody")


def test_claims_give_each_task_to_one_annotator_until_the_lease_ends(engine: Engine, prompt_id: str) -> None:
    with session_scope(engine) as s:
        for name in ("甲", "乙"):
            accounts.add_annotator(s, name)
        other = repo.add_sample(s, "第二个问题", [("a", "一"), ("b", "二"), ("c", "三")], ["测试"])[0]
        [first] = repo.create_tasks(s, prompt_id, [["r1", "r2", "r3"]], "triple")
        [second] = repo.create_tasks(s, other, [["a", "b", "c"]], "triple")
        repo.create_tasks(s, other, [["a", "b"]], "pair")  # pairs are the AI judge's, never claimed here
    with session_scope(engine) as s:
        mine = accounts.claim_next(s, "甲", NOW, LEASE)
        assert mine is not None and mine.task.id == first and mine.contents["r1"].startswith("奖励模型")
        theirs = accounts.claim_next(s, "乙", NOW, LEASE)
        assert theirs is not None and theirs.task.id == second
        assert accounts.claim_next(s, "乙", NOW, LEASE).task.id == second  # type: ignore[union-attr]  # theirs again
        assert accounts.queue_size(s, NOW, LEASE) == (2, 0)
        assert accounts.open_claims(s) == {"甲": 1, "乙": 1}
    with session_scope(engine) as s:
        repo.complete_task(s, second)
    with session_scope(engine) as s:
        assert accounts.claim_next(s, "乙", NOW + LEASE / 2, LEASE) is None  # 甲 still holds the other
        later = NOW + LEASE + timedelta(seconds=1)
        assert accounts.queue_size(s, later, LEASE) == (1, 1)
        taken = accounts.claim_next(s, "乙", later, LEASE)
        assert taken is not None and taken.task.id == first
        assert accounts.holder(s, first) == "乙" and accounts.ever_held(s, first, "甲")
        assert not accounts.ever_held(s, second, "甲")
        assert accounts.claim_next(s, "甲", later, LEASE) is None  # no longer theirs, nothing free
        assert accounts.open_claims(s) == {"乙": 1}
