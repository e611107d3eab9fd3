"""AnnotationService on the store (SQLite and PostgreSQL), without a server: double annotation, where a share of
a prompt's triples gets a second task (copy 1) and the prompt is resolved only once both copies are done."""

from __future__ import annotations

from sqlalchemy import Engine, select

from services.annotation.algorithm.doubles import DoublingConfig, doubled
from services.annotation.service import AnnotationService
from services.store import repository
from services.store.db import session_scope
from services.store.models import AnnotationTask

RESPONSES = [(f"r{i}", f"第{i}个回答") for i in range(1, 6)]


def test_a_share_of_the_triples_gets_a_second_task_and_resolution_waits_for_it(engine: Engine) -> None:
    with session_scope(engine) as session:
        prompt, _ = repository.add_sample(session, "比较这五个回答", RESPONSES, ["推理"])
    assert len(AnnotationService(engine).create_tasks(prompt)) == 5  # no doubling by default
    config = DoublingConfig(share=0.5, seed=3)
    service = AnnotationService(engine, doubling=config)
    tasks = service.create_tasks(prompt)
    originals, copies = tasks[:5], tasks[5:]
    assert [keys for tid, keys in originals if doubled(tid, config)] == [keys for _, keys in copies]
    assert 0 < len(copies) < 5  # this seed doubles some, not all (a share of 0.5 of five)
    assert not {tid for tid, _ in copies} & {tid for tid, _ in originals}
    assert service.create_tasks(prompt) == tasks  # idempotent: the same ids, nothing new
    with session_scope(engine) as session:
        stored = {
            t.id: t.copy for t in session.scalars(select(AnnotationTask).where(AnnotationTask.prompt_id == prompt))
        }
    assert stored == {tid: 0 for tid, _ in originals} | {tid: 1 for tid, _ in copies}
    for n, (tid, keys) in enumerate(tasks):
        assert service.ranking(prompt) is None  # resolved only when the last task, a copy or not, is done
        service.submit(f"a{n}", prompt, f"annotator-{n}", "human", {"order": [[k] for k in sorted(keys)]}, [], tid)
    resolved = service.ranking(prompt)
    assert resolved is not None and resolved.rank == {f"r{i}": i for i in range(1, 6)}


def test_pairs_for_the_ai_judge_are_never_doubled(engine: Engine) -> None:
    with session_scope(engine) as session:
        prompt, _ = repository.add_sample(session, "两两比较", RESPONSES[:3], ["推理"])
    assert len(AnnotationService(engine, doubling=DoublingConfig(share=1.0)).create_tasks(prompt, 2)) == 3
