"""After the run: was any task given to two people? Read in the store, and in what the annotators were listed.

    checks = check(engine, [worked.listed for worked in results], people_per_prompt=0)
    checks["passed"]   # no task with two annotations that count, no person over their share of a prompt, no task
                       # listed to two annotators, each human annotation's task done

Under the paper's rule (people_per_prompt 0) a prompt's triples go to different people (section 3.2), so one person
with two annotations of a prompt is a task handed out against the rule; with N people a prompt, more than
`tasks.share` of its triples is. A task listed to two annotators was held by both: the run is shorter than the
lease, and each annotator submits what it listed at once, so no lease ran out in between.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from services.store.db import read_scope
from services.store.models import Annotation, AnnotationTask
from services.store.tasks import share

LIVE = (Annotation.voided_at.is_(None), Annotation.kind == "human")


def check(engine: Engine, listed: Iterable[set[str]], people_per_prompt: int = 0) -> dict[str, Any]:
    with read_scope(engine) as session:
        annotations = session.scalar(select(func.count()).select_from(Annotation).where(*LIVE)) or 0
        twice = select(Annotation.task_id).where(*LIVE, Annotation.task_id.is_not(None)).group_by(Annotation.task_id)
        twice = twice.having(func.count() > 1)
        by_one = select(Annotation.prompt_id, func.count()).where(*LIVE)
        by_one = by_one.group_by(Annotation.prompt_id, Annotation.annotator).having(func.count() > 1)
        triples = select(AnnotationTask.prompt_id, func.count()).where(AnnotationTask.kind == "triple")
        sizes = dict(session.execute(triples.group_by(AnnotationTask.prompt_id)).tuples().all())
        over = [pid for pid, n in session.execute(by_one) if n > share(sizes.get(pid, 1), people_per_prompt)]
        done = select(func.count()).select_from(AnnotationTask).where(AnnotationTask.status == "done")
        figures = {
            "annotations": int(annotations),
            "tasks_done": int(session.scalar(done) or 0),
            "tasks_annotated_twice": len(session.scalars(twice).all()),
            "prompts_over_ones_share": len(over),
        }
    seen = Counter(task for each in listed for task in each)
    figures["tasks_listed_to_two"] = sum(1 for n in seen.values() if n > 1)
    figures["passed"] = (
        figures["tasks_annotated_twice"] == figures["prompts_over_ones_share"] == figures["tasks_listed_to_two"] == 0
        and figures["tasks_done"] == figures["annotations"]
    )
    return figures
