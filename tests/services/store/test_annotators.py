"""The annotation queue's one claim rule in the store (SQLite and PostgreSQL): a person holds at most max_held tasks,
a listing renews no lease, an idle task goes to someone else, a prompt's triples go to as many different people as
the rule says, the scan passes what a person may never take once, and who holds what. The accounts: test_accounts.py;
claims at once on PostgreSQL: test_annotators_concurrent.py."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from services.annotation.algorithm.protocol import triple_tasks
from services.store import annotators as queue
from services.store import assignments as assign
from services.store import repository as repo
from services.store.accounts import add_annotator
from services.store.db import session_scope
from services.store.errors import InvalidRecord, StaleTask, UnknownAnnotator
from services.store.models import AnnotationTask, Annotator
from services.store.tasks import QueueConfig, open_tasks, people_needed, share

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
RULE = QueueConfig()  # 5 held at most, 30 minutes' lease, the paper's rule
LATER = NOW + RULE.lease + timedelta(seconds=1)
THREE = [("r1", "一"), ("r2", "二"), ("r3", "三")]
FOUR = [*THREE, ("r4", "四")]
SEVEN = [(f"r{i}", f"第{i}个回答") for i in range(1, 8)]


def people(s: Session, *names: str) -> None:
    for name in names:
        add_annotator(s, name)


def prompt(s: Session, text: str, responses: list[tuple[str, str]] = THREE, copies: bool = False) -> list[str]:
    """A stored prompt's triple-wise tasks (with a second copy of each, `copies`)."""
    pid = repo.add_sample(s, text, responses, ["测试"])[0]
    groups = triple_tasks([k for k, _ in responses])
    return repo.create_tasks(s, pid, groups, "triple") + (
        repo.create_tasks(s, pid, groups, "triple", 1) if copies else []
    )


def annotate(s: Session, task_id: str, name: str, kind: str = "human") -> None:
    task = s.get(AnnotationTask, task_id)
    assert task is not None
    order = {"order": [[k] for k in task.response_keys]}
    repo.add_annotation(s, f"{name}:{task_id}", task.prompt_id, name, kind, order, [], task_id)
    repo.complete_task(s, task_id)


def ids(engine: Engine, name: str, now: datetime = NOW, rule: QueueConfig = RULE, **kw: object) -> list[str]:
    """What `name`'s listing (or the page, limit=1 opening=True) gives them now, in its own transaction."""
    with session_scope(engine) as s:
        return [q.task.id for q in queue.assign(s, name, now, rule, **kw)]  # type: ignore[arg-type]


def test_one_listing_holds_max_held_and_three_more_annotators_then_get_work(engine: Engine) -> None:
    with session_scope(engine) as s:
        people(s, "甲", "乙", "丙", "丁")
        made = [t for n in range(20) for t in prompt(s, f"第{n}题")]  # 20 prompts, one triple each
    first = ids(engine, "甲")  # the default limit (100): held at most 5, oldest first
    assert first == made[:5]
    assert ids(engine, "甲") == first  # listing again: what they hold, nothing more
    assert [len(ids(engine, name)) for name in ("乙", "丙", "丁")] == [5, 5, 5]
    assert ids(engine, "甲", limit=2) == first[:2]  # limit narrows what is shown, never widens what is held
    with session_scope(engine) as s:
        assert {h.annotator: h.tasks for h in queue.holdings(s, NOW, RULE.lease)} == dict.fromkeys("甲乙丙丁", 5)
        assert queue.queue_size(s, NOW, RULE.lease) == (20, 0)
        annotate(s, first[0], "甲")
    assert ids(engine, "甲") == first[1:]  # one done: topped up again ... with nothing free left
    with session_scope(engine) as s, pytest.raises(UnknownAnnotator):
        queue.assign(s, "nobody", NOW, RULE)


def test_a_lease_is_renewed_by_work_on_that_task_never_by_listing(engine: Engine) -> None:
    with session_scope(engine) as s:
        people(s, "甲", "乙")
        made = [t for n in range(3) for t in prompt(s, f"第{n}题")]
    assert ids(engine, "甲", limit=2) == made[:2]
    assert ids(engine, "甲", NOW + timedelta(minutes=20)) == made  # listed again: nothing renewed, one more held
    assert ids(engine, "甲", NOW + timedelta(minutes=25), limit=1, opening=True) == made[:1]  # the page opens one
    later = NOW + timedelta(minutes=31)  # the first two were claimed 31 minutes ago, the first opened 6 ago
    assert ids(engine, "乙", later) == [made[1]]  # idle: anyone's; the opened one, and the third, are 甲's still
    with session_scope(engine) as s:
        assert queue.holder(s, made[1]) == "乙"
        with pytest.raises(StaleTask):
            assign.check_assigned(s, made[1], s.get(AnnotationTask, made[1]).prompt_id, "甲")  # type: ignore[union-attr]
        assert assign.check_assigned(s, made[0], s.get(AnnotationTask, made[0]).prompt_id, "甲").id == made[0]  # type: ignore[union-attr]
        [held] = [h for h in queue.holdings(s, later + timedelta(minutes=30), RULE.lease) if h.annotator == "甲"]
        assert (held.tasks, held.idle) == (2, 2)  # idle, nobody took them: still 甲's, who may submit them
        assert held.oldest == NOW + timedelta(minutes=20)  # the third, claimed then; the first was opened at 25
    assert ids(engine, "甲", later) == [made[0], made[2]]


def test_the_page_opens_the_oldest_task_held_and_listing_tops_up_the_rest(engine: Engine) -> None:
    with session_scope(engine) as s:
        people(s, "甲")
        made = [t for n in range(7) for t in prompt(s, f"第{n}题")]
    page = {"limit": 1, "opening": True}
    assert ids(engine, "甲", **page) == made[:1]  # the page takes one at a time
    assert ids(engine, "甲") == made[:5]  # the listing: the page's task and four more
    assert ids(engine, "甲", NOW + timedelta(minutes=1), **page) == made[:1]  # the same task until it is done
    with session_scope(engine) as s:
        annotate(s, made[0], "甲")
    assert ids(engine, "甲", NOW + timedelta(minutes=2), **page) == made[1:2]  # the oldest they hold, not a new one
    assert ids(engine, "甲") == made[1:6]


def test_a_prompts_triples_go_to_different_people_under_the_papers_rule(engine: Engine) -> None:
    with session_scope(engine) as s:
        people(s, "甲", "乙", "丙")
        tasks = prompt(s, "四个回答的题", FOUR)  # four triples
    [first] = ids(engine, "甲")
    with session_scope(engine) as s:
        assert queue.withheld(s, NOW, RULE.lease) == 3  # 甲 was given none of the prompt's other triples
        assert open_tasks(s, annotator="甲") == []  # holds one: none listed either
        assert len(open_tasks(s, annotator="乙")) == 4 and len(open_tasks(s)) == 4
        annotate(s, first, "甲")
        other = prompt(s, "后来的题")[0]
    assert ids(engine, "甲") == [other]  # not the older prompt's
    with session_scope(engine) as s:
        annotate(s, other, "甲")
    [second] = ids(engine, "乙")
    assert second in tasks and second != first
    assert ids(engine, "丙", LATER) == [second]  # 乙 left it idle and 丙 took it: 乙 holds none of the prompt now
    [third] = ids(engine, "乙", LATER)
    assert third in tasks and third not in (first, second)
    with session_scope(engine) as s:
        annotate(s, third, "丁", kind="ai")  # an AI judgment under a name binds nobody
        assert {q.task.id for q in open_tasks(s, annotator="丁")} == set(tasks) - {first, third}
        with pytest.raises(InvalidRecord, match="annotator"):
            open_tasks(s, annotator="x" * 200)


def test_the_team_size_setting_lets_eight_people_finish_a_seven_response_prompt(engine: Engine) -> None:
    team = [f"标注员{n}" for n in range(8)]
    with session_scope(engine) as s:
        people(s, *team)
        tasks = prompt(s, "七个回答的题", SEVEN)
    assert len(tasks) == 11 and (share(11, 0), people_needed(11, 0)) == (1, 11)
    assert (share(11, 8), people_needed(11, 8)) == (2, 6)
    with session_scope(engine) as s:  # the paper's rule: 11 people needed, 8 accounts annotate
        assert queue.unfinishable(s, 0) == queue.Unfinishable(1, 11, 8, 0)
        assert queue.unfinishable(s, 8) == queue.Unfinishable(0, 0, 8, 8)
    done = work(engine, team, RULE)
    assert len(done) == 8  # one triple each, then nothing for anyone: three left open for good
    with session_scope(engine) as s:
        assert queue.unfinishable(s, 0).prompts == 1
    eight = QueueConfig(people_per_prompt=8)
    done += work(engine, team, eight)
    assert sorted(t for t, _ in done) == sorted(tasks)  # finished: 8 people, at most 2 triples each
    assert max(sum(name == n for _, n in done) for name in team) == 2
    with session_scope(engine) as s:
        assert queue.unfinishable(s, 0).prompts == 0  # nothing open is left to finish


def test_prompts_of_different_sizes_that_need_as_many_people_all_count_as_unfinishable(engine: Engine) -> None:
    with session_scope(engine) as s:
        people(s, "甲")
        sizes = [len(prompt(s, "四个回答的题", FOUR)), len(prompt(s, "七个回答的题", SEVEN))]
    assert sizes[0] != sizes[1] and people_needed(sizes[0], 2) == people_needed(sizes[1], 2) == 2
    with session_scope(engine) as s:  # two people needed by each, one account annotates
        assert queue.unfinishable(s, 2) == queue.Unfinishable(2, 2, 1, 2)


def work(engine: Engine, team: list[str], rule: QueueConfig) -> list[tuple[str, str]]:
    """Each person lists and annotates what they hold, in turn, until nobody is given anything."""
    done: list[tuple[str, str]] = []
    while given := [(t, name) for name in team for t in ids(engine, name, rule=rule)]:
        with session_scope(engine) as s:
            for task_id, name in given:
                annotate(s, task_id, name)
        done += given
    return done


def test_one_person_never_takes_both_copies_of_a_doubled_triple(engine: Engine) -> None:
    with session_scope(engine) as s:
        people(s, "甲", "乙")
        original, copy = prompt(s, "双份的题", copies=True)
    alone = QueueConfig(people_per_prompt=1)  # one person may take every task of a prompt ... but one copy each
    assert ids(engine, "甲", rule=alone) == [original]
    assert ids(engine, "乙", rule=alone) == [copy]
    with session_scope(engine) as s:
        annotate(s, original, "甲")
    assert ids(engine, "甲", LATER, rule=alone) == []  # 乙's copy went idle: 甲 annotated its twin


@pytest.fixture
def soon() -> Iterator[datetime]:
    """A clock an hour ahead of the tasks' creation times (the scan's start stays `GRACE` behind it)."""
    yield datetime.now(UTC) + timedelta(hours=1)


def test_a_scan_passes_triples_a_person_may_never_take_once_and_a_void_brings_one_back(
    engine: Engine, soon: datetime
) -> None:
    with session_scope(engine) as s:
        people(s, "甲", "乙")
        dead = prompt(s, "甲做过的题", FOUR)  # 甲 annotated one: its three others are never 甲's
        annotate(s, dead[0], "甲")
        done = prompt(s, "乙做完的题")[0]
        later = prompt(s, "后来的题")[0]
        done_prompt = s.get(AnnotationTask, done).prompt_id  # type: ignore[union-attr]
    assert ids(engine, "乙", soon, prompt_id=done_prompt) == [done]
    with session_scope(engine) as s:
        annotate(s, done, "乙")
    assert ids(engine, "甲", soon) == [later]
    with session_scope(engine) as s:  # 甲's next scan starts at `later`: past the dead three and the done one
        me, task = s.get(Annotator, "甲"), s.get(AnnotationTask, later)
        assert me is not None and task is not None and me.queue_rule == 0
        assert queue.utc(me.queue_from) == queue.utc(task.created_at)  # type: ignore[arg-type]
        assign.void(s, f"乙:{done}", soon, "person:ops", "random orders")  # open and free again, behind the scan
        back = s.get(AnnotationTask, done)
        s.refresh(me)
        assert back is not None and queue.utc(me.queue_from) == queue.utc(back.created_at)  # type: ignore[arg-type]
    assert ids(engine, "甲", soon) == [done, later]
    with session_scope(engine) as s:  # with now close behind the tasks, no scan starts later than now - GRACE
        now = datetime.now(UTC)
        queue.assign(s, "乙", now, RULE)
        start = s.get(Annotator, "乙").queue_from  # type: ignore[union-attr]
        assert start is None or queue.utc(start) <= now - queue.GRACE
