"""The annotation service's work, transport-free: tasks, annotations, resolution, rankings, in the store.

Every call runs in one transaction: a failure stores nothing. The gRPC adapter (`server.py`) only
decodes requests, calls these methods and maps errors to statuses.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from cheems.cheemsbench import BenchItem, write_bench
from cheems.errors import FormatError
from cheems.preference import write_preference
from cheems.responses import Response
from services.annotation.annotation_file import relations_of
from services.annotation.export import preference_items
from services.annotation.protocol import triple_tasks
from services.annotation.resolve import Relation, Resolution, resolve
from services.store import repository
from services.store.db import session_scope
from services.store.errors import InvalidRecord, UnknownPrompt
from services.store.models import Prompt, Ranking


@dataclass(frozen=True)
class Resolved:
    rank: dict[str, int]
    conflicts: int
    merged_nodes: int


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
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create_tasks(self, prompt_id: str, group_size: int = 3) -> list[tuple[str, list[str]]]:
        """(task id, response keys) for the prompt: circular triples (group_size 3) or all pairs (2)."""
        if group_size not in (2, 3):
            raise InvalidRecord(f"group_size must be 2 or 3, got {group_size}")
        with session_scope(self.engine) as session:
            keys = sorted(known_keys(session, prompt_id))
            groups = (
                triple_tasks(keys) if group_size == 3 else [[a, b] for i, a in enumerate(keys) for b in keys[i + 1 :]]
            )
            kind = "triple" if group_size == 3 else "pair"
            groups = [g for g in groups if len(g) == group_size]
            ids = repository.create_tasks(session, prompt_id, groups, kind)
            return list(zip(ids, groups, strict=True))

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
        """Store a human or AI annotation (idempotent on annotation_id) and close its task."""
        with session_scope(self.engine) as session:
            keys = known_keys(session, prompt_id)
            try:
                relations_of(result, keys, "request", 0, "annotation")
            except FormatError as e:
                raise InvalidRecord(e.message) from None
            created = repository.add_annotation(
                session, annotation_id, prompt_id, annotator, kind, result, discarded, task_id
            )
            if created and task_id:
                repository.complete_task(session, task_id)
            return created

    def resolve(self, prompt_id: str) -> Resolved:
        """Resolve every stored annotation of the prompt (Algorithm 1) and store the ranking."""
        with session_scope(self.engine) as session:
            keys = known_keys(session, prompt_id)
            relations: list[Relation] = []
            discarded: set[str] = set()
            for annotation in repository.annotations_for(session, prompt_id):
                relations += relations_of(annotation.result, keys, "store", 0, annotation.id)
                discarded |= set(annotation.discarded or [])
            kept = [r for r in relations if r.better not in discarded and r.worse not in discarded]
            result: Resolution = resolve(kept)
            repository.save_ranking(session, prompt_id, result.rank, result.conflicts, result.merged_nodes)
            return Resolved(result.rank, result.conflicts, result.merged_nodes)

    def export(self, kind: str, path: str, debias: bool = False, seed: int = 0) -> tuple[int, str]:
        """Write every resolved prompt (bench or preference layout) atomically; returns (records, sha256)."""
        if kind not in ("bench", "preference"):
            raise InvalidRecord(f"kind must be bench or preference, got {kind!r}")
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
            digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            repository.record_export(session, kind, path, records, digest)
            return records, digest

    def ranking(self, prompt_id: str) -> Resolved | None:
        with session_scope(self.engine) as session:
            row = repository.get_ranking(session, prompt_id)
            return None if row is None else Resolved(dict(row.rank), row.conflicts, row.merged_nodes)
