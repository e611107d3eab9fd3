"""The rule filter's verdicts in the store: responses.filter_reason, set before a prompt's tasks are made.

    keys = keep_passing(session, prompt_id, lambda content: reason(content, categories, config))
    filtered(session)          # [FilteredResponse(prompt_id, key, reason, content), ...], newest prompts first
    reason_counts(session)     # {"non_chinese<0.3": 12, ...}
    reasons_by_prompt(session) # {prompt id: {response key: reason}}, texts not read

A response whose `filter_reason` is NULL is kept (annotated); one with a reason is never put in a task. The
verdict is stored again each time tasks are made for the prompt (the same rules give the same verdict, so
making tasks stays idempotent).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.store.errors import UnknownPrompt
from services.store.models import Prompt, Response


@dataclass(frozen=True)
class FilteredResponse:
    prompt_id: str
    key: str
    reason: str
    content: str


def keep_passing(session: Session, prompt_id: str, verdict: Callable[[str], str | None]) -> list[str]:
    """Judge each of the prompt's responses (`verdict(content)`: a reason, or None to keep), store the verdicts,
    and return the kept keys in storing order; UnknownPrompt when the prompt has no response."""
    rows = list(session.scalars(select(Response).where(Response.prompt_id == prompt_id).order_by(Response.id)))
    if not rows:
        raise UnknownPrompt(f"unknown prompt {prompt_id!r}")
    kept = []
    for row in rows:
        row.filter_reason = verdict(row.content)
        if row.filter_reason is None:
            kept.append(row.response_key)
    session.flush()
    return kept


def filtered(session: Session, prompt_id: str | None = None, limit: int = 1000) -> list[FilteredResponse]:
    """The responses the rule filter kept out of annotation, of one prompt or all (newest prompts first)."""
    query = (
        select(Response.prompt_id, Response.response_key, Response.filter_reason, Response.content)
        .join(Prompt, Prompt.id == Response.prompt_id)
        .where(Response.filter_reason.is_not(None))
    )
    if prompt_id is not None:
        query = query.where(Response.prompt_id == prompt_id)
    query = query.order_by(Prompt.created_at.desc(), Response.prompt_id, Response.id).limit(limit)
    return [FilteredResponse(p, k, str(r), c) for p, k, r, c in session.execute(query)]


def reasons_by_prompt(session: Session) -> dict[str, dict[str, str]]:
    """{prompt id: {response key: reason}} of every response the rule filter kept out of annotation."""
    query = select(Response.prompt_id, Response.response_key, Response.filter_reason)
    out: dict[str, dict[str, str]] = {}
    for prompt_id, key, reason in session.execute(query.where(Response.filter_reason.is_not(None))):
        out.setdefault(prompt_id, {})[key] = str(reason)
    return out


def reason_counts(session: Session, prompt_ids: list[str] | None = None) -> dict[str, int]:
    """How many responses each reason kept out of annotation (of the given prompts, or of all)."""
    query = select(Response.filter_reason, func.count()).where(Response.filter_reason.is_not(None))
    if prompt_ids is not None:
        query = query.where(Response.prompt_id.in_(prompt_ids))
    return {
        str(r): int(n)
        for r, n in session.execute(query.group_by(Response.filter_reason).order_by(Response.filter_reason))
    }
