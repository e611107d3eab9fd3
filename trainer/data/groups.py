"""Training data as prompt groups: preference or bench files of any layout, records of one prompt merged.

Files are read by `cheems.formats.layouts` (jsonl, JSON array or Parquet; CheemsBench, CheemsPreference,
TRL/OpenRLHF, UltraFeedback, HH-RLHF, LLaMA-Factory sharegpt/alpaca), the layout told by each
record's fields or forced with `layout`. Records of the same prompt in context merge into one group;
a ranking gives every two responses with different gold ranks as a pair, better first. System
prompts and earlier turns are honoured (the official code silently drops `sys_prompt`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from cheems.chat import Conversation
from cheems.formats.layouts import read_records
from cheems.formats.preference import all_pairs, merge
from cheems.formats.responses import Response


class LengthPolicy(StrEnum):
    """What happens to a response over max_length: `drop` (the official behaviour: drop the response, its pairs,
    and then any response left without a pair) or truncate `left`/`right`; counts are reported."""

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
