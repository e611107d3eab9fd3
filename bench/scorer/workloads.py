"""The calls the scorer benchmarks send: Chinese texts of the paper's lengths, CheemsBench-like and RLHF-like calls,
and what is measured of them (their token sequences, the prefix they share, the largest reward difference)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from cheems.chat import Conversation, encode_many
from services.scorer.client import RewardClient

POOL = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发"
    "年动同工也能下过子说产种面而方后多定行学法所民得经"
)
Call = tuple[str, str, list[str]]  # (system prompt, question, responses)


def text(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(POOL, k=n))


def workload(count: int, seed: int = 0) -> list[tuple[str, list[str]]]:
    """CheemsBench-like: a prompt of ~190 characters with 5 responses of 400-500 (the paper's Table 1 lengths)."""
    rng = random.Random(seed)
    return [(text(rng, 190), [text(rng, rng.randint(400, 500)) for _ in range(5)]) for _ in range(count)]


def responses_of(item: tuple[Any, ...]) -> int:
    """How many responses a request holds: its last element, as in (prompt, responses) or (system, question,
    responses)."""
    return len(item[-1])


def rlhf_workload(count: int, seed: int = 0) -> list[Call]:
    """GRPO's group: a ~1,040-character system prompt and a 40-character question, 8 completions of 110-220."""
    rng = random.Random(seed)
    return [
        (text(rng, 1040), text(rng, 40), [text(rng, rng.randint(110, 220)) for _ in range(8)]) for _ in range(count)
    ]


VLLM_SHAPES: dict[str, Callable[[int, int], list[Call]]] = {  # label: calls(count, seed)
    "CheemsBench-like": lambda count, seed: [("", prompt, responses) for prompt, responses in workload(count, seed)],
    "RLHF-like": rlhf_workload,
}


def sequences_of(tokenizer: Any, calls: Sequence[Call]) -> list[list[list[int]]]:
    """Each call's token ids, per response, as the scorer encodes them (its chat template)."""
    return [
        [e.input_ids for e in encode_many(tokenizer, [Conversation(q, r, s or None) for r in rs])] for s, q, rs in calls
    ]


def scorer(client: RewardClient) -> Callable[..., list[float]]:
    """Score a (system prompt, question, responses) call through `client`."""

    def score(system: str, question: str, responses: list[str]) -> list[float]:
        return client.score(question, responses, system_prompt=system)

    return score


def shared_prefix(call: Sequence[Sequence[int]]) -> int:
    """Tokens all of one call's sequences begin with."""
    first = call[0]
    return min(next((k for k, (a, b) in enumerate(zip(first, s, strict=False)) if a != b), len(s)) for s in call)


def largest_difference(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> float:
    return max(abs(x - y) for p, q in zip(a, b, strict=True) for x, y in zip(p, q, strict=True))
