"""The annotation service's work, transport-free: tasks, annotations, resolution, rankings, in the store.

Every call runs in one transaction: a failure stores nothing. The gRPC adapter (`server.py`) only
decodes requests, calls these methods and maps errors to statuses. A submit that completes the last
open task of its prompt resolves the prompt (Algorithm 1) in the same transaction, so a prompt whose
tasks are all done always has its ranking.

A human annotation names a triple assigned to its annotator, once (`services.store.assignments`: the claim rule
both adapters share), handed out by one rule (`assign`, under `config.QueueConfig`); an AI annotation names an open
pair task (`kinds`); resolution counts a discarded response as its annotator's vote (`algorithm.discards`) and
leaves voided annotations out. An operator's `reassign` and `void` are recorded with their actor and reason.

Given a Publisher, every stored change is announced at-least-once (`events.py`, through the store's
outbox, so a broker outage never fails a submit): each newly stored annotation on
cheems.annotations.v1, each stored ranking on cheems.rankings.v1, keyed by prompt id.

    service = AnnotationService(engine, Publisher("localhost:9092"))
    [(task_id, keys), *_] = service.create_tasks(prompt_id)          # triples of the responses the rule filter
                                                                     # keeps (and copies: `config.TaskConfig`)
    [task, *_] = service.assign("张三")             # 张三's tasks (their ListTasks): held, topped up to max_held
    service.submit("a1", prompt_id, "张三", "human", {"order": [["r1"], ["r2", "r3"]]}, [], task.task_id)
    service.void("a1", "person:ops", "random orders")             # resolved again without it
    service.close()                                                  # stops the event relay
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from cheems.errors import FormatError
from cheems.formats.cheemsbench import BenchItem, write_bench
from cheems.formats.preference import write_preference
from cheems.formats.responses import Response
from services.annotation.algorithm.discards import kept_relations, vote_of
from services.annotation.algorithm.doubles import DoublingConfig, doubled
from services.annotation.algorithm.export import preference_items
from services.annotation.algorithm.filters import FilterConfig
from services.annotation.algorithm.filters import reason as filter_reason
from services.annotation.algorithm.protocol import triple_tasks
from services.annotation.algorithm.resolve import Resolution, resolve
from services.annotation.config import QueueConfig, TaskConfig
from services.annotation.events import annotation_event, queue, ranking_event
from services.annotation.exports import ExportConfig, export_path
from services.annotation.files.annotations import relations_of
from services.annotation.kinds import check_task, pair_task
from services.bus import topics
from services.bus.client import Publisher
from services.bus.relay import EventRelay, RelayConfig
from services.store import repository
from services.store import validate as v
from services.store.annotators import assign
from services.store.assignments import reassign, void
from services.store.db import session_scope
from services.store.errors import InvalidRecord, UnknownPrompt
from services.store.filtered import keep_passing
from services.store.models import Annotation, Prompt, Ranking, utcnow
from services.store.outbox import StoreOutbox
from services.store.tasks import QueuedTask, lock_prompt, open_count, open_tasks

log = logging.getLogger(__name__)
MAX_LISTED = 1000  # open tasks one listing returns at most
KIND_OF_SIZE = {3: "triple", 2: "pair"}


@dataclass(frozen=True)
class Resolved:
    rank: dict[str, int]
    conflicts: int
    merged_nodes: int


@dataclass(frozen=True)
class OpenTask:
    """An open task and what an annotator reads to judge it."""

    task_id: str
    prompt_id: str
    prompt: str
    system_prompt: str
    history: list[tuple[str, str]]  # earlier turns (role, content), oldest first
    category: list[str]
    source: str
    contents: dict[str, str]  # the task's response keys, in task order -> their contents
    created_at: datetime


def repository_rankings(session: Session) -> list[tuple[Prompt, dict[str, int]]]:
    """Every prompt with a stored ranking, in prompt-id order (deterministic exports)."""
    rows = session.execute(
        select(Prompt, Ranking.rank).join(Ranking, Ranking.prompt_id == Prompt.id).order_by(Prompt.id)
    )
    return [(prompt, {k: int(v) for k, v in rank.items()}) for prompt, rank in rows]


def responses_for_ranked(session: Session, prompt_id: str, rank: dict[str, int]) -> list[tuple[str, str]]:
    return [(k, c) for k, c in repository.responses_for(session, prompt_id).items() if k in rank]


def known_keys(session: Session, prompt_id: str) -> set[str]:
    keys = set(repository.responses_for(session, prompt_id))
    if not keys:
        raise UnknownPrompt(f"unknown prompt {prompt_id!r}")
    return keys


class AnnotationService:
    """`publisher`: announce stored changes (an `EventRelay` thread publishes them; `close()` stops it);
    `tasks`: how tasks are made: the rule filter first, then the share of triples doubled (`config.TaskConfig`);
    `exports`: the folder `export` writes its files in, each by name (`exports.ExportConfig`); `queue`: how work is
    handed out (`config.QueueConfig`)."""

    def __init__(
        self,
        engine: Engine,
        publisher: Publisher | None = None,
        relay: RelayConfig | None = None,
        tasks: TaskConfig | None = None,
        exports: ExportConfig | None = None,
        queue: QueueConfig | None = None,
    ) -> None:
        self.engine, self.tasks, self.queue = engine, tasks or TaskConfig(), queue or QueueConfig()
        self.exports = exports or ExportConfig()
        self.stored = dict.fromkeys(("human", "ai"), 0)  # annotations stored by this process, by kind (/metrics)
        self.relay: EventRelay | None = None
        if publisher is not None:
            self.relay = EventRelay(
                StoreOutbox(engine, topics.RELAYED_BY["annotation"]), publisher, relay or RelayConfig()
            ).start()

    def create_tasks(self, prompt_id: str, group_size: int = 3) -> list[tuple[str, list[str]]]:
        """(task id, response keys) for the prompt: circular triples (group_size 3) or all pairs (2)."""
        with session_scope(self.engine) as session:
            return _create_tasks(session, prompt_id, group_size, self.tasks)

    def take_sample(
        self,
        prompt_id: str,
        prompt: str,
        responses: Sequence[tuple[str, str]],
        category: Sequence[str],
        system_prompt: str | None,
        source: str,
        history: Sequence[tuple[str, str]],
        group_size: int,
    ) -> tuple[str, list[tuple[str, list[str]]]]:
        """Open a sample's tasks, storing the sample first unless `prompt_id` is known (a prompt's id is its
        content hash, so the same content is the same prompt); idempotent. Returns (prompt id, tasks)."""
        with session_scope(self.engine) as session:
            if not prompt_id or session.get(Prompt, prompt_id) is None:
                args = (prompt, responses, category, system_prompt, source, None, history)
                prompt_id, _ = repository.add_sample(session, *args)
            return prompt_id, _create_tasks(session, prompt_id, group_size, self.tasks)

    def submit(
        self,
        annotation_id: str,
        prompt_id: str,
        annotator: str,
        kind: str,
        result: dict[str, Any],
        discarded: list[str],
        task_id: str | None,
    ) -> bool:
        """Store a human or AI annotation (idempotent on annotation_id) and close its task; the prompt's last
        open task closed resolves the prompt. A replay (the same annotation again) changes and announces nothing.

        Each kind closes its own kind of task (`kinds.check_task`): a human annotation a triple assigned to
        `annotator`, once (no task_id InvalidRecord, an unknown one UnknownTask, another's NotAssigned or StaleTask,
        one annotated already TaskAnnotated); an AI annotation an open pair task (a triple is OtherKindsTask)."""
        with session_scope(self.engine) as session:
            lock_prompt(session, prompt_id)
            keys = known_keys(session, prompt_id)
            try:
                relations_of(result, keys, "request", 0, "annotation")
            except FormatError as e:
                raise InvalidRecord(e.message) from None
            if session.get(Annotation, annotation_id) is None:  # a replay is answered below
                check_task(session, kind, task_id, prompt_id, annotator)
            created = repository.add_annotation(
                session, annotation_id, prompt_id, annotator, kind, result, discarded, task_id
            )
            if created:
                event = annotation_event(annotation_id, prompt_id, annotator, kind, result, discarded, task_id)
                self._announce(session, topics.ANNOTATIONS, prompt_id, event)
                if task_id:
                    self._close(session, prompt_id, task_id)
        if created:
            self.stored[kind] = self.stored.get(kind, 0) + 1
            self._kick()
        return created

    def close_task(self, task_id: str, reason: str, actor: str = "") -> bool:
        """Close a pair task without an annotation (an AI judge that could not decide, `actor`, for `reason`);
        False if it was closed. Only a pair (`kinds.pair_task`: a triple is OtherKindsTask). The prompt's last
        open task closed resolves the prompt, as a submit does."""
        if not reason.strip():
            raise InvalidRecord("reason: required, why the pair is closed without a verdict")
        with session_scope(self.engine) as session:
            task = pair_task(session, task_id)
            lock_prompt(session, task.prompt_id)
            closed = task.status == "open" and self._close(session, task.prompt_id, task_id)
        if closed:
            log.info("task %s closed without an annotation by %s: %s", task_id, actor or "this process", reason)
            self._kick()
        return closed

    def resolve(self, prompt_id: str) -> Resolved:
        """Resolve every stored annotation of the prompt (Algorithm 1), store and announce the ranking."""
        with session_scope(self.engine) as session:
            lock_prompt(session, prompt_id)
            resolved = self._resolve(session, prompt_id)
        self._kick()
        return resolved

    def assign(
        self,
        annotator: str,
        prompt_id: str | None = None,
        group_size: int = 0,
        limit: int = 100,
        opening: bool = False,
        now: datetime | None = None,
    ) -> list[OpenTask]:
        """The open tasks `annotator` (an account) holds, topped up to `queue.max_held` (`annotators.assign`):
        what their own ListTasks answers (group_size 0 or 3: triples, a person's tasks; 2, the AI judge's pairs, is
        InvalidRecord), and, with limit 1 and `opening`, the page's next task (opened: its lease starts again)."""
        if (kind := self._kind(group_size, limit) or "triple") != "triple":
            raise InvalidRecord("group_size: a person is given triples (0 or 3); pairs (2) are the AI judge's")
        with session_scope(self.engine) as session:
            if prompt_id is not None:
                lock_prompt(session, prompt_id)
            queued = assign(session, annotator, now or utcnow(), self.queue, kind, prompt_id, limit, opening)
            return [open_task_of(q) for q in queued]

    def reassign(self, task_id: str, annotator: str, actor: str, reason: str) -> str | None:
        """Give an open task to `annotator`, recorded with `actor` and `reason`; returns its holder before."""
        with session_scope(self.engine) as session:
            return reassign(session, task_id, annotator, utcnow(), actor, reason, self.queue)

    def void(self, annotation_id: str, actor: str, reason: str) -> tuple[str, bool]:
        """Void an annotation (`assignments.void`), recorded with `actor` and `reason`, and resolve its prompt
        again without it, under the prompt's lock (taken first, as a submit does); returns (prompt id, False if it
        was void already)."""
        with session_scope(self.engine) as session:
            prompt_id, voided = void(session, annotation_id, utcnow(), actor, reason)
            if voided:
                self._resolve(session, prompt_id)
        self._kick()
        return prompt_id, voided

    def open_tasks(
        self,
        prompt_id: str | None = None,
        group_size: int = 0,
        limit: int = 100,
        created_before: datetime | None = None,
        annotator: str | None = None,
    ) -> list[OpenTask]:
        """Open tasks, oldest first: one prompt's or all, triples (3), pairs (2) or both (0), at most `limit`;
        with `annotator`, only tasks they may take (none of a prompt they did their share of: `QueueConfig`)."""
        kind = self._kind(group_size, limit)
        with session_scope(self.engine) as session:
            queued = open_tasks(session, prompt_id, kind, limit, created_before, annotator, self.queue)
            return [open_task_of(q) for q in queued]

    @staticmethod
    def _kind(group_size: int, limit: int) -> str | None:
        if group_size not in (0, *KIND_OF_SIZE):
            raise InvalidRecord(f"group_size must be 0, 2 or 3, got {group_size}")
        if not 1 <= limit <= MAX_LISTED:
            raise InvalidRecord(f"limit must be in 1..{MAX_LISTED}, got {limit}")
        return KIND_OF_SIZE.get(group_size)

    def close(self) -> None:
        """Stop the event relay (what it could not publish waits in the outbox for the next start)."""
        if self.relay is not None:
            self.relay.stop()

    def _close(self, session: Session, prompt_id: str, task_id: str) -> bool:
        closed = repository.complete_task(session, task_id)
        if closed and open_count(session, prompt_id) == 0:
            self._resolve(session, prompt_id)
        return closed

    def _resolve(self, session: Session, prompt_id: str) -> Resolved:
        keys = known_keys(session, prompt_id)
        votes = [  # a discard is its annotator's vote (`algorithm.discards`); voided annotations do not count
            vote_of(relations_of(a.result, keys, "store", 0, a.id), a.discarded or [])
            for a in repository.annotations_for(session, prompt_id)
        ]
        result: Resolution = resolve(kept_relations(votes))
        repository.save_ranking(session, prompt_id, result.rank, result.conflicts, result.merged_nodes)
        event = ranking_event(prompt_id, result.rank, result.conflicts, result.merged_nodes)
        self._announce(session, topics.RANKINGS, prompt_id, event)
        return Resolved(result.rank, result.conflicts, result.merged_nodes)

    def _announce(self, session: Session, topic: str, key: str, event: Any) -> None:
        if self.relay is not None:
            queue(session, topic, key, event)

    def _kick(self) -> None:
        if self.relay is not None:
            self.relay.kick()

    def export(self, kind: str, name: str, debias: bool = False, seed: int = 0) -> tuple[int, str]:
        """Write every resolved prompt (bench or preference layout) atomically to the file `name` of the export
        folder (`exports.export_path`: a name, never a path); returns (records, sha256)."""
        if kind not in ("bench", "preference"):
            raise InvalidRecord(f"kind must be bench or preference, got {kind!r}")
        path = export_path(self.exports, name)
        with session_scope(self.engine) as session:
            items = [
                BenchItem(
                    p.text,
                    tuple(Response(k, c) for k, c in responses_for_ranked(session, p.id, rank)),
                    rank,
                    tuple(p.category),
                    {"sys_prompt": p.system_prompt} if p.system_prompt else {},
                )
                for p, rank in repository_rankings(session)
            ]
            items = [i for i in items if len(set(i.rank.values())) >= 2]
            if kind == "bench":
                records = write_bench(path, items)
            else:
                preference, _ = preference_items(items, debias, seed)
                records = write_preference(path, preference)
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            repository.record_export(session, kind, str(path), records, digest)
            return records, digest

    def ranking(self, prompt_id: str) -> Resolved | None:
        with session_scope(self.engine) as session:
            row = repository.get_ranking(session, prompt_id)
            return None if row is None else Resolved(dict(row.rank), row.conflicts, row.merged_nodes)


def _create_tasks(session: Session, prompt_id: str, group_size: int, config: TaskConfig) -> list[tuple[str, list[str]]]:
    if group_size not in KIND_OF_SIZE:
        raise InvalidRecord(f"group_size must be 2 or 3, got {group_size}")
    keys = sorted(_passing(session, prompt_id, config.rule_filter))
    groups = triple_tasks(keys) if group_size == 3 else [[a, b] for i, a in enumerate(keys) for b in keys[i + 1 :]]
    groups = [g for g in groups if len(g) == group_size]
    ids = repository.create_tasks(session, prompt_id, groups, KIND_OF_SIZE[group_size])
    return _with_doubles(session, prompt_id, list(zip(ids, groups, strict=True)), group_size, config.doubling)


def _passing(session: Session, prompt_id: str, rule_filter: FilterConfig | None) -> list[str]:
    """The keys of the prompt's responses the rule filter keeps (all of them with no filter), verdicts stored."""
    prompt = session.get(Prompt, v.key("prompt_id", prompt_id))
    if prompt is None:
        raise UnknownPrompt(f"unknown prompt {prompt_id!r}")
    categories = list(prompt.category or [])
    if rule_filter is None:
        return keep_passing(session, prompt_id, lambda content: None)
    return keep_passing(session, prompt_id, lambda content: filter_reason(content, categories, rule_filter))


def _with_doubles(
    session: Session,
    prompt_id: str,
    tasks: list[tuple[str, list[str]]],
    group_size: int,
    doubling: DoublingConfig | None,
) -> list[tuple[str, list[str]]]:
    """The tasks, and a second copy (copy 1) of the triples `doubling` picks: double annotation."""
    if group_size != 3 or doubling is None:
        return tasks
    twice = [keys for tid, keys in tasks if doubled(tid, doubling)]
    return tasks + list(zip(repository.create_tasks(session, prompt_id, twice, "triple", copy=1), twice, strict=True))


def open_task_of(queued: QueuedTask) -> OpenTask:
    """An open task as the gRPC service and the annotator's page show it."""
    task, prompt = queued.task, queued.prompt
    history = [(t["role"], t["content"]) for t in prompt.history or []]
    return OpenTask(
        task.id,
        task.prompt_id,
        prompt.text,
        prompt.system_prompt or "",
        history,
        list(prompt.category or []),
        prompt.source,
        queued.contents,
        task.created_at,
    )
