"""What services do with the store: idempotent writes and plain reads, each a function taking a Session.

Writes are safe to repeat (Kafka redelivers, clients retry): prompts are keyed by content hash, responses by
(prompt, key), tasks by (prompt, keys), annotations by the caller's idempotency key, run scores by (run, item),
all inserted with ON CONFLICT DO NOTHING (racing writers cannot both insert). Values are checked before any SQL;
the caller's `session_scope` commits or rolls back the whole unit of work:
    with session_scope(engine) as s:
        pid, _ = add_sample(s, "什么是奖励模型？", [("r1", "……"), ("r2", "……")], ["知识", "AI"])
        add_annotation(s, "anno-1", pid, "alice", "human", {"better": "r1", "worse": "r2"})
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import func, insert, inspect, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.store import validate as v
from services.store.errors import (
    Conflict,
    InvalidRecord,
    TaskClosed,
    UnknownPrompt,
    UnknownResponse,
    UnknownRun,
    UnknownTask,
)
from services.store.models import (
    ANNOTATION_KINDS,
    EXPORT_KINDS,
    Annotation,
    AnnotationTask,
    Base,
    EvalRun,
    EvalScore,
    Export,
    Prompt,
    Ranking,
    Response,
    utcnow,
)
from services.store.validate import prompt_id_for, task_id_for

_MAX_REASON = 2000  # characters of a failed run's reason that are kept
_ANNOTATION_FIELDS = ("prompt_id", "task_id", "annotator", "kind", "result", "discarded")


def add_sample(
    session: Session,
    prompt: str,
    responses: Iterable[tuple[str, str]],
    category: Sequence[str],
    system_prompt: str | None = None,
    source: str = "",
    models: Mapping[str, str] | None = None,
    history: Sequence[tuple[str, str]] = (),
) -> tuple[str, bool]:
    """Store a prompt in context and its responses; returns (prompt id, whether anything new was stored).

    Adding the same sample again stores nothing. Known prompts gain only the response keys they lack
    (their category and source stay as first stored); a known key with other content raises Conflict.
    `models` names the model behind each response key, where known; `history` holds the earlier turns
    as (role, content), oldest first. Text the database cannot hold (NUL) raises InvalidRecord first.
    """
    pairs = v.response_pairs(responses)
    category = v.strings("category", category)
    turns = v.turns("history", history)
    row = {
        "text": v.text("prompt", prompt),
        "system_prompt": None if system_prompt is None else v.text("system_prompt", system_prompt),
        "category": category,
        "source": v.text("source", source),
        "history": turns or None,
    }
    pid = prompt_id_for(prompt, system_prompt, turns)
    stored = responses_for(session, pid)
    for rkey, content in pairs.items():
        if stored.get(rkey, content) != content:
            raise Conflict(f"prompt {pid}: response {rkey!r} is already stored with other content")
    created = _insert_new(session, Prompt, {"id": pid, **row})
    for rkey in (k for k in pairs if k not in stored):  # in the order given
        model = (models or {}).get(rkey)
        created |= _insert_new(
            session, Response, {"prompt_id": pid, "response_key": rkey, "content": pairs[rkey], "model": model}
        )
    return pid, created


def responses_for(session: Session, prompt_id: str) -> dict[str, str]:
    """{response key: content} of a prompt, in the order they were stored (empty for an unknown prompt)."""
    rows = session.execute(
        select(Response.response_key, Response.content).where(Response.prompt_id == prompt_id).order_by(Response.id)
    )
    return {rkey: content for rkey, content in rows}


def add_annotation(
    session: Session,
    annotation_id: str,
    prompt_id: str,
    annotator: str,
    kind: str,
    result: Mapping[str, Any],
    discarded: Iterable[str] = (),
    task_id: str | None = None,
) -> bool:
    """Store one raw annotation under the caller's idempotency key; False if it is already stored.

    Raises Conflict if the id is stored with other content, UnknownPrompt / UnknownResponse for keys
    the prompt lacks, UnknownTask / TaskClosed for a task of another prompt or one that is done.
    """
    record = {
        "id": v.key("annotation_id", annotation_id),
        "prompt_id": prompt_id,
        "task_id": task_id,
        "annotator": v.key("annotator", annotator),
        "kind": v.one_of("kind", kind, ANNOTATION_KINDS),
        "result": v.json_value("result", dict(result) if isinstance(result, Mapping) else result),
        "discarded": sorted(set(v.strings("discarded", list(discarded)))),
    }
    if not isinstance(record["result"], dict):
        raise InvalidRecord(f"result: expected an object, got {result!r}")
    existing = session.get(Annotation, annotation_id)
    if existing is not None:  # a replay: answer before the task checks, as the task may be done by now
        return _same_or_conflict(existing, record)
    keys = v.result_keys(record["result"]) + record["discarded"]
    _require_keys(session, prompt_id, keys)
    if task_id is not None:
        _require_open_task(session, task_id, prompt_id, keys)
    if _insert_new(session, Annotation, record):
        return True
    raced = session.get(Annotation, annotation_id, populate_existing=True)
    assert raced is not None  # the insert was skipped because this row exists
    return _same_or_conflict(raced, record)


def annotations_for(session: Session, prompt_id: str) -> list[Annotation]:
    """A prompt's annotations that count, oldest first (voided ones left out: `assignments.void`)."""
    _require_prompt(session, prompt_id)
    query = select(Annotation).where(Annotation.prompt_id == prompt_id, Annotation.voided_at.is_(None))
    query = query.order_by(Annotation.created_at, Annotation.id)
    return list(session.scalars(query))


def create_tasks(
    session: Session, prompt_id: str, groups: Iterable[Sequence[str]], kind: str, copy: int = 0
) -> list[str]:
    """Open one task per group of response keys (three for "triple", two for "pair"); returns their ids.

    A task's id is the hash of its prompt and key set (and `copy`, when > 0: a second, independent task of the
    same keys), so creating it again returns the same id and leaves its status alone.
    """
    keyed = [v.task_group(kind, group) for group in groups]
    copy = v.count("copy", copy)
    _require_keys(session, prompt_id, [k for group in keyed for k in group])
    ids = []
    for group in keyed:
        tid = task_id_for(prompt_id, group, copy)
        row = {"id": tid, "prompt_id": prompt_id, "response_keys": group, "kind": kind, "copy": copy}
        _insert_new(session, AnnotationTask, row)
        ids.append(tid)
    return ids


def tasks_for(session: Session, prompt_id: str, status: str | None = None) -> list[AnnotationTask]:
    """A prompt's tasks, oldest first, optionally only those with `status` ("open" or "done")."""
    query = select(AnnotationTask).where(AnnotationTask.prompt_id == prompt_id)
    if status is not None:
        query = query.where(AnnotationTask.status == v.one_of("status", status, ("open", "done")))
    return list(session.scalars(query.order_by(AnnotationTask.created_at, AnnotationTask.id)))


def complete_task(session: Session, task_id: str) -> bool:
    """Mark a task done; False if it already was."""
    task = session.get(AnnotationTask, task_id)
    if task is None:
        raise UnknownTask(f"no task {task_id!r}")
    if task.status == "done":
        return False
    task.status = "done"
    session.flush()
    return True


def save_ranking(
    session: Session, prompt_id: str, rank: Mapping[str, int], conflicts: int = 0, merged_nodes: int = 0
) -> None:
    """Store (or replace) a prompt's resolved ranking: {response key: rank}, 1 = best, ties share a rank."""
    clean = {v.key("rank.key", k): v.count(f"rank[{k!r}]", r, minimum=1) for k, r in rank.items()}
    values = {
        "rank": clean,
        "conflicts": v.count("conflicts", conflicts),
        "merged_nodes": v.count("merged_nodes", merged_nodes),
    }
    _require_keys(session, prompt_id, clean)
    row = session.get(Ranking, prompt_id)
    if row is None:
        session.add(Ranking(prompt_id=prompt_id, **values))
    else:
        row.rank, row.conflicts, row.merged_nodes, row.resolved_at = clean, conflicts, merged_nodes, utcnow()
    session.flush()


def get_ranking(session: Session, prompt_id: str) -> Ranking | None:
    """A prompt's ranking, or None if it has not been resolved yet."""
    return session.get(Ranking, v.key("prompt_id", prompt_id))


def record_export(session: Session, kind: str, path: str, records: int, sha256: str) -> int:
    """Note a written export file ("bench" or "preference" jsonl) and its checksum; returns the export id."""
    row = Export(
        kind=v.one_of("kind", kind, EXPORT_KINDS),
        path=str(path),
        records=v.count("records", records),
        sha256=v.sha256_hex("sha256", sha256),
    )
    session.add(row)
    session.flush()
    return row.id


def create_run(
    session: Session,
    bench_files: Sequence[str],
    scorer_url: str,
    semantics: str,
    ece_bins: int,
    items_total: int,
    model_id: str | None = None,
) -> str:
    """Record a new evaluation run, state "running"; returns its id. `model_id`: the registered model it evaluates."""
    values: dict[str, Any] = {"bench_files": v.strings("bench_files", [str(f) for f in bench_files])}
    values |= {"scorer_url": scorer_url, "semantics": semantics, "ece_bins": v.count("ece_bins", ece_bins, minimum=1)}
    values["model_id"] = model_id or None
    session.add(run := EvalRun(id=uuid.uuid4().hex, items_total=v.count("items_total", items_total), **values))
    return run.id


def get_run(session: Session, run_id: str) -> EvalRun:
    """The run; UnknownRun if this store holds none with that id."""
    if (run := session.get(EvalRun, run_id)) is None:
        raise UnknownRun(f"no run {run_id!r}")
    return run


def runs_of_model(session: Session, model_id: str) -> list[EvalRun]:
    """The evaluation runs of a registered model, oldest first (none before its first run)."""
    return list(session.scalars(select(EvalRun).where(EvalRun.model_id == model_id).order_by(EvalRun.created_at)))


def record_scores(session: Session, run_id: str, item: str, scores: Mapping[str, float]) -> bool:
    """Store {response id: score} of a run's item ("<subset>:<index>"); False if stored already (a replay)."""
    get_run(session, run_id)
    values = {"response_ids": list(scores), "scores": list(scores.values())}
    return _insert_new(session, EvalScore, {"run_id": run_id, "item": v.key("item", item), **values})


def runs_by_id(session: Session, run_ids: Iterable[str]) -> dict[str, EvalRun]:
    """The runs this store holds among `run_ids`, by id (ids it does not hold are left out)."""
    ids = sorted(set(run_ids))
    return {run.id: run for run in session.scalars(select(EvalRun).where(EvalRun.id.in_(ids)))} if ids else {}


def record_many_scores(session: Session, rows: Iterable[tuple[str, str, Mapping[str, float]]]) -> int:
    """Store (run id, item, {response id: score}) rows in few statements, as `record_scores` does one by one;
    returns how many were new (replays, and an item repeated in `rows`, are skipped). UnknownRun first if a
    run is not in the store; InvalidRecord first for a bad item."""
    unique: dict[tuple[str, str], dict[str, Any]] = {}
    for run_id, item, scores in rows:
        values = {"response_ids": list(scores), "scores": list(scores.values())}
        unique.setdefault((run_id, v.key("item", item)), {"run_id": run_id, "item": item, **values})
    missing = {run_id for run_id, _ in unique} - set(runs_by_id(session, (run_id for run_id, _ in unique)))
    if missing:
        raise UnknownRun(f"no run {min(missing)!r}")
    return _insert_many_new(session, EvalScore, list(unique.values()))


def count_scored(session: Session, run_id: str) -> int:
    """How many of the run's items have their scores stored."""
    return int(session.scalar(select(func.count()).select_from(EvalScore).where(EvalScore.run_id == run_id)) or 0)


def run_scores(session: Session, run_id: str) -> dict[str, dict[str, float]]:
    """{item: {response id: score}} of every scored item of the run."""
    rows = session.scalars(select(EvalScore).where(EvalScore.run_id == run_id))
    return {r.item: dict(zip(r.response_ids, r.scores, strict=True)) for r in rows}


def end_run(session: Session, run_id: str, result: Mapping[str, Any] | None) -> bool:
    """A running run ends: "succeeded" with its result, or "failed" (result None); False if it had ended already."""
    if (run := get_run(session, run_id)).state != "running":
        return False
    run.result, run.state = (None, "failed") if result is None else (v.json_value("result", dict(result)), "succeeded")
    return True


def fail_run(session: Session, run_id: str, reason: str) -> bool:
    """A running run ends "failed", `reason` kept as its result {"error": reason}; False if it had ended already."""
    if (run := get_run(session, run_id)).state != "running":
        return False
    # the reason may quote bad input: no lone surrogate may reach the database (it could not encode it)
    text = reason.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")[:_MAX_REASON]
    run.result, run.state = {"error": text}, "failed"
    return True


def run_failure(run: EvalRun) -> str | None:
    """Why a failed run failed, as `fail_run` stored it (None for a run that did not fail, or failed without one)."""
    if run.state != "failed" or not isinstance(run.result, dict):
        return None
    return str(run.result.get("error") or "") or None


def _insert_new(session: Session, model: type[Base], values: dict[str, Any]) -> bool:
    """INSERT unless the primary or a unique key is taken; True if this call inserted the row."""
    dialect = session.get_bind().dialect.name
    if dialect in ("postgresql", "sqlite"):
        dialect_insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        # RETURNING, not rowcount: ORM-enabled inserts report rowcount -1 on some drivers.
        stmt = dialect_insert(model).values(**values).on_conflict_do_nothing().returning(*inspect(model).primary_key)
        return session.execute(stmt).first() is not None
    try:  # other backends: a savepoint keeps the outer transaction usable after a duplicate
        with session.begin_nested():
            session.execute(insert(model).values(**values))
    except IntegrityError:
        return False
    return True


def _insert_many_new(session: Session, model: type[Base], rows: list[dict[str, Any]], chunk: int = 500) -> int:
    """`_insert_new` for many rows, one multi-row INSERT per `chunk` rows; how many rows were inserted."""
    if session.get_bind().dialect.name not in ("postgresql", "sqlite"):
        return sum(_insert_new(session, model, row) for row in rows)
    dialect_insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    keys, inserted = inspect(model).primary_key, 0
    for start in range(0, len(rows), chunk):
        stmt = dialect_insert(model).values(rows[start : start + chunk]).on_conflict_do_nothing().returning(*keys)
        inserted += len(session.execute(stmt).all())
    return inserted


def _same_or_conflict(existing: Annotation, record: Mapping[str, Any]) -> bool:
    differs = [f for f in _ANNOTATION_FIELDS if getattr(existing, f) != record[f]]
    if differs:
        raise Conflict(f"annotation {existing.id!r} is already stored with other content ({', '.join(differs)})")
    return False


def _require_prompt(session: Session, prompt_id: str) -> None:
    if session.get(Prompt, v.key("prompt_id", prompt_id)) is None:
        raise UnknownPrompt(f"no prompt {prompt_id!r}")


def _require_keys(session: Session, prompt_id: str, keys: Iterable[str]) -> None:
    _require_prompt(session, prompt_id)
    known = set(session.scalars(select(Response.response_key).where(Response.prompt_id == prompt_id)))
    for rkey in keys:
        if rkey not in known:
            raise UnknownResponse(f"prompt {prompt_id}: no response {rkey!r}")


def _require_open_task(session: Session, task_id: str, prompt_id: str, keys: Iterable[str]) -> None:
    task = session.get(AnnotationTask, task_id)
    if task is None or task.prompt_id != prompt_id:
        raise UnknownTask(f"prompt {prompt_id}: no task {task_id!r}")
    if task.status != "open":
        raise TaskClosed(f"task {task_id!r} is {task.status}: it takes no new annotations")
    outside = [k for k in keys if k not in task.response_keys]
    if outside:
        raise InvalidRecord(f"result: response {outside[0]!r} is not part of task {task_id!r}")
