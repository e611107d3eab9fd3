"""Training data: preference or bench files of any layout into tokenized prompt groups with pairs.

Files are read by `cheems.formats.layouts` (jsonl, JSON array or Parquet; CheemsBench, CheemsPreference,
TRL/OpenRLHF, UltraFeedback, HH-RLHF, LLaMA-Factory sharegpt/alpaca), the layout told by each
record's fields or forced with `layout`. Records of the same prompt in context merge into one group;
a ranking gives every two responses with different gold ranks as a pair, better first. System
prompts and earlier turns are honoured (the official code silently drops `sys_prompt`).

Over-length responses follow a policy: `drop` (the official behaviour: drop the response, its
pairs, and then any response left without a pair) or truncate `left`/`right`; counts are reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from cheems.chat import Conversation, Truncation, encode_many
from cheems.formats.layouts import read_records
from cheems.formats.preference import all_pairs, merge
from cheems.formats.responses import Response


class LengthPolicy(StrEnum):
    DROP = "drop"
    LEFT = "left"
    RIGHT = "right"


@dataclass(frozen=True)
class PromptGroup:
    """One prompt, its responses, and preference pairs as (chosen, rejected) response indices."""

    prompt: str
    responses: tuple[Response, ...]
    pairs: tuple[tuple[int, int], ...]
    system_prompt: str | None = None
    category: str | None = None
    history: tuple[tuple[str, str], ...] = ()

    def conversation(self, response: Response) -> Conversation:
        return Conversation(self.prompt, response.content, self.system_prompt, self.history)


def read_groups(path: str | Path, layout: str | None = None) -> list[PromptGroup]:
    """Prompt groups of one file, records of the same prompt merged; FormatError names a bad line."""
    groups = []
    for record in merge(read_records(path, layout), path):
        index = {r.id: n for n, r in enumerate(record.responses)}
        pairs = tuple((index[c], index[r]) for c, r in all_pairs(record))
        category = record.category[0] if record.category else None
        groups.append(
            PromptGroup(record.prompt, record.responses, pairs, record.system_prompt, category, record.history)
        )
    return groups


@dataclass(frozen=True)
class Example:
    """One response to encode: its group, its index in the group, and its tokens."""

    group: int
    index: int
    input_ids: tuple[int, ...]


@dataclass
class LengthStats:
    responses: int = 0
    dropped_responses: int = 0
    dropped_pairs: int = 0
    unpaired_dropped: int = 0
    truncated: int = 0
    dropped_prompts: int = 0


@dataclass
class Dataset:
    """Examples (one per kept response), per-prompt example ids and pairs of example ids."""

    examples: list[Example]
    groups: list[list[int]]
    pairs: list[list[tuple[int, int]]]
    stats: LengthStats = field(default_factory=LengthStats)

    @property
    def group_of(self) -> list[int]:
        """Example id -> index into `groups` and `pairs`."""
        owner = [0] * len(self.examples)
        for g, members in enumerate(self.groups):
            for x in members:
                owner[x] = g
        return owner

    @property
    def num_pairs(self) -> int:
        return sum(len(p) for p in self.pairs)


def tokenize_groups(
    groups: Sequence[PromptGroup],
    tokenizer: Any,
    max_length: int = 2048,
    policy: LengthPolicy = LengthPolicy.DROP,
    keep_unpaired: bool = False,
) -> Dataset:
    """Encode every response; apply the length policy; drop prompts left without pairs (unless kept)."""
    cut = Truncation.NONE if policy is LengthPolicy.DROP else Truncation(policy.value)
    conversations = [g.conversation(r) for g in groups for r in g.responses]
    encoded = iter(encode_many(tokenizer, conversations, max_length, cut))
    data = Dataset([], [], [])
    for gi, group in enumerate(groups):
        codes = [next(encoded) for _ in group.responses]
        data.stats.responses += len(codes)
        data.stats.truncated += sum(c.truncated for c in codes)
        fits = {i for i, c in enumerate(codes) if len(c.input_ids) <= max_length}
        pairs = [(a, b) for a, b in group.pairs if a in fits and b in fits]
        kept = fits if keep_unpaired else {i for pair in pairs for i in pair}
        data.stats.dropped_responses += len(codes) - len(fits)
        data.stats.dropped_pairs += len(group.pairs) - len(pairs)
        data.stats.unpaired_dropped += len(fits) - len(kept)
        if not kept:
            data.stats.dropped_prompts += 1
            continue
        ids = {}
        for i in sorted(kept):
            ids[i] = len(data.examples)
            data.examples.append(Example(gi, i, tuple(codes[i].input_ids)))
        data.groups.append(list(ids.values()))
        data.pairs.append([(ids[a], ids[b]) for a, b in pairs])
    return data
