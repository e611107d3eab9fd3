"""Claims at once on PostgreSQL: eight people listing together never get one task, and two tabs of one person never
get two triples of a prompt; then eight others take the idle tasks together, each to one of them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import Engine, select

from services.store import annotators as queue
from services.store import repository as repo
from services.store.accounts import add_annotator
from services.store.db import session_scope
from services.store.models import AnnotationTask, TaskClaim
from services.store.tasks import QueueConfig
from tests.services.store.test_annotators import NOW, THREE, prompt

RULE = QueueConfig()
PEOPLE = 8


def together(work: Callable[[int], list[str]], n: int) -> list[list[str]]:
    """`work(i)` in n threads started at once; what each returned."""
    start, out, errors = threading.Barrier(n), [list[str]() for _ in range(n)], list[BaseException]()

    def run(i: int) -> None:
        try:
            start.wait(30)
            out[i] = work(i)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and not any(t.is_alive() for t in threads)
    return out


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_people_listing_at_once_never_get_the_same_task(engine: Engine) -> None:
    team = [f"甲{n}" for n in range(PEOPLE)] + [f"乙{n}" for n in range(PEOPLE)]
    with session_scope(engine) as s:
        for name in team:
            add_annotator(s, name)
        for n in range(30):  # 30 prompts of three triples: 90 tasks, a prompt's triples to different people
            pid = repo.add_sample(s, f"第{n}题", [*THREE, ("r4", "四")], ["测试"])[0]
            repo.create_tasks(s, pid, [["r1", "r2", "r3"], ["r2", "r3", "r4"], ["r1", "r3", "r4"]], "triple")

    def listing(name: str, when: timedelta) -> list[str]:
        with session_scope(engine) as s:
            return [q.task.id for q in queue.assign(s, name, NOW + when, RULE)]

    first = together(lambda i: listing(team[i], timedelta(0)), PEOPLE)
    assert [len(got) for got in first] == [RULE.max_held] * PEOPLE
    assert len({t for got in first for t in got}) == PEOPLE * RULE.max_held  # no task given twice
    idle = RULE.lease + timedelta(seconds=1)  # the first eight walked away: the others take theirs, and free ones
    second = together(lambda i: listing(team[PEOPLE + i], idle), PEOPLE)
    given = [t for got in second for t in got]
    assert len(given) == len(set(given)) == PEOPLE * RULE.max_held
    with session_scope(engine) as s:
        query = select(AnnotationTask.id, AnnotationTask.held_by).where(AnnotationTask.id.in_(given))
        holders = {task: by for task, by in s.execute(query)}
        assert holders == {t: team[PEOPLE + i] for i, got in enumerate(second) for t in got}
        for got in first + second:  # one triple of a prompt each
            prompts = [s.get(AnnotationTask, t).prompt_id for t in got]  # type: ignore[union-attr]
            assert len(prompts) == len(set(prompts))


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_two_tabs_of_one_person_never_hold_two_triples_of_a_prompt(engine: Engine) -> None:
    with session_scope(engine) as s:
        add_annotator(s, "甲")
        tasks = prompt(s, "四个回答的题", [*THREE, ("r4", "四")])

    def page(_: int) -> list[str]:
        with session_scope(engine) as s:
            return [q.task.id for q in queue.assign(s, "甲", NOW, RULE, limit=1, opening=True)]

    tabs = together(page, 4)
    assert {t for got in tabs for t in got} == {tasks[0]}  # each tab shows the one task 甲 holds
    with session_scope(engine) as s:
        assert list(s.scalars(select(TaskClaim.task_id).where(TaskClaim.annotator == "甲"))) == [tasks[0]]
