"""Turning Score requests into token sequences and scores into replies: pure, no I/O.

The chat template and tokenization are `cheems.chat`, the same function the trainer uses, so a
checkpoint scores here exactly as it scored during training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cheems.chat import Conversation, Encoded, Truncation, encode_many
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


def tokenize_job(tokenizer: Any, job: ScoreJob, max_length: int, truncation: Truncation) -> list[Encoded]:
    """Token ids per response; LimitExceeded when one is too long and the policy does not truncate."""
    encoded = encode_many(tokenizer, job.conversations(), max_length, truncation)
    for i, e in enumerate(encoded):
        if len(e.input_ids) > max_length:
            raise LimitExceeded(
                f"responses[{i}] is {e.full_length} tokens with its prompt, over max_length {max_length} "
                "(the server does not truncate)"
            )
    return encoded


def best_index(scores: Sequence[float]) -> int:
    return max(range(len(scores)), key=lambda i: scores[i])


def query_text(query: str, pad_token: str | None, eos_token: str) -> str:
    """An OpenRLHF query (prompt and response already templated): pads and eos stripped, one eos appended."""
    text = query.strip()
    for token in (pad_token, eos_token):
        while token and text.endswith(token):
            text = text[: -len(token)].rstrip()
    return text + eos_token
