"""Turning Score requests into token sequences and scores into replies: pure, no I/O.

The chat template and tokenization are `cheems.chat`, the same functions the trainer uses, so a
checkpoint scores here exactly as it scored during training.

Length is checked before tokenizing: no token of the vocabulary spans more than `longest_token`
characters, so a text of more than `max_length * longest_token` characters is over length for
certain. Such a text is rejected at once (truncation "error") or clipped to that many characters on
the side truncation would drop anyway, so one 60 MB response costs what a max-length one costs.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cheems.chat import Conversation, Encoded, Truncation, cut, render, token_ids
from services.scorer.errors import InvalidRequest, LimitExceeded


@dataclass(frozen=True)
class ScoreJob:
    """One prompt with N responses, validated."""

    prompt: str
    responses: tuple[str, ...]
    system_prompt: str | None = None
    history: tuple[tuple[str, str], ...] = ()

    def conversations(self) -> list[Conversation]:
        return [Conversation(self.prompt, r, self.system_prompt, self.history) for r in self.responses]


ROLES = {"user", "assistant", "system"}


def make_job(
    prompt: str,
    responses: Sequence[str],
    system_prompt: str = "",
    history: Sequence[tuple[str, str]] = (),
    max_responses: int = 64,
) -> ScoreJob:
    """Validate a request: InvalidRequest for an empty prompt or no responses, LimitExceeded for too many."""
    if not prompt.strip():
        raise InvalidRequest("prompt is empty")
    if not responses:
        raise InvalidRequest("responses is empty: send at least one response to score")
    if len(responses) > max_responses:
        raise LimitExceeded(f"{len(responses)} responses exceed the limit of {max_responses} per call")
    for i, (role, _) in enumerate(history):
        if role not in ROLES:
            raise InvalidRequest(f"history[{i}].role must be one of {sorted(ROLES)}, got {role!r}")
    return ScoreJob(prompt, tuple(responses), system_prompt or None, tuple(history))


# per tokenizer object (a weak key: a tokenizer gone takes its entry along), with its vocabulary's size then
_LONGEST: weakref.WeakKeyDictionary[Any, tuple[int | None, int]] = weakref.WeakKeyDictionary()
_LONGEST_LOCK = threading.Lock()


def longest_token(tokenizer: Any) -> int:
    """Characters in the vocabulary's longest token string (an upper bound of characters per token).

    Remembered per tokenizer: building Qwen's 151k-entry vocabulary takes ~0.1 s, so it is built once per
    tokenizer, not once per request; a tokenizer whose size changed since (tokens added) is measured again."""
    size = len(tokenizer) if hasattr(tokenizer, "__len__") else None
    with _LONGEST_LOCK, contextlib.suppress(TypeError):  # TypeError: no weak reference to it (never remembered)
        known = _LONGEST.get(tokenizer)
        if known is not None and known[0] == size:
            return known[1]
    longest = max((len(t) for t in tokenizer.get_vocab()), default=1)
    with _LONGEST_LOCK, contextlib.suppress(TypeError):
        _LONGEST[tokenizer] = (size, longest)
    return longest


def clip(text: str, budget: int, truncation: Truncation) -> str:
    """At most `budget` characters, kept from the side the truncation policy keeps."""
    if len(text) <= budget or truncation is Truncation.NONE:
        return text
    return text[-budget:] if truncation is Truncation.LEFT else text[:budget]


def tokenize_texts(
    tokenizer: Any, texts: Sequence[str], max_length: int, truncation: Truncation, budget: int, field: str
) -> list[Encoded]:
    """Token ids per text; LimitExceeded (naming `field[i]`) when one is too long and the policy does not cut."""
    for i, text in enumerate(texts):
        if len(text) > budget and truncation is Truncation.NONE:
            raise LimitExceeded(
                f"{field}[{i}] is {len(text)} characters with its prompt, more than max_length {max_length} "
                "tokens can hold (the server does not truncate)"
            )
    clipped = [clip(t, budget, truncation) for t in texts]
    ids = token_ids(tokenizer, clipped)  # a common beginning (the prompt) tokenized once
    encoded = []
    for i, (text, row) in enumerate(zip(texts, ids, strict=True)):
        e = cut(row, max_length, truncation)
        if len(text) > budget:  # clipped before tokenizing: it was over length, whatever is left
            e = Encoded(e.input_ids, max(e.full_length, max_length + 1))
        if len(e.input_ids) > max_length:
            raise LimitExceeded(
                f"{field}[{i}] is {e.full_length} tokens with its prompt, over max_length {max_length} "
                "(the server does not truncate)"
            )
        encoded.append(e)
    return encoded


def bounded(job: ScoreJob, budget: int, truncation: Truncation, max_length: int) -> ScoreJob:
    """The job with every text field clipped to `budget` characters on the side truncation keeps.

    Before the chat template copies them: a field longer than the budget makes the whole text over
    length for certain (rejected here under truncation "error"), and clipping each field from the
    kept side leaves the kept window of the rendered text exactly as it was."""
    fields = [("prompt", job.prompt), ("system_prompt", job.system_prompt or "")]
    fields += [(f"responses[{i}]", r) for i, r in enumerate(job.responses)]
    fields += [(f"history[{i}].content", c) for i, (_, c) in enumerate(job.history)]
    long = [(name, len(text)) for name, text in fields if len(text) > budget]
    if not long:
        return job
    if truncation is Truncation.NONE:
        name, size = long[0]
        raise LimitExceeded(
            f"{name} is {size} characters, more than max_length {max_length} tokens can hold "
            "(the server does not truncate)"
        )
    return ScoreJob(
        clip(job.prompt, budget, truncation),
        tuple(clip(r, budget, truncation) for r in job.responses),
        clip(job.system_prompt, budget, truncation) if job.system_prompt else job.system_prompt,
        tuple((role, clip(c, budget, truncation)) for role, c in job.history),
    )


def tokenize_job(
    tokenizer: Any, job: ScoreJob, max_length: int, truncation: Truncation, budget: int | None = None
) -> list[Encoded]:
    """Token ids per response of a job, through the shared chat template."""
    budget = budget if budget is not None else max_length * longest_token(tokenizer)
    job = bounded(job, budget, truncation, max_length)
    texts = [render(tokenizer, c) for c in job.conversations()]
    return tokenize_texts(tokenizer, texts, max_length, truncation, budget, "responses")


def best_index(scores: Sequence[float]) -> int:
    return max(range(len(scores)), key=lambda i: scores[i])


def query_text(query: str, pad_token: str | None, eos_token: str) -> str:
    """An OpenRLHF query (prompt and response already templated): pads and eos stripped from both
    ends (left-padded batches carry leading pads), one eos appended."""
    text = query.strip()
    tokens = [t for t in (pad_token, eos_token) if t]
    changed = True
    while changed:
        changed = False
        for token in tokens:
            if text.endswith(token):
                text, changed = text[: -len(token)].rstrip(), True
            if text.startswith(token):
                text, changed = text[len(token) :].lstrip(), True
    return text + eos_token
