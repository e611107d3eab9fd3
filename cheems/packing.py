"""Prefix sharing: responses to one prompt packed into one sequence, so the prompt is computed once.

A reward model reads each (prompt, response) sequence at its last token. When several sequences
begin with the same tokens (the rendered system prompt, history and question), a row

    [shared prefix][suffix 1][suffix 2]...[suffix N]

computes the prefix once. Each suffix attends to the prefix and, causally, to itself only, and its
position ids continue from the prefix, so every suffix token sees exactly what it sees in its own
unpacked sequence; its reward is read at its last token (`cheems.forward.packed_rewards`).

The prefix is found on the token ids of the full sequences (their longest common prefix), not by
tokenizing the prompt and the responses apart, so a row always holds exactly the ids of the full
rendered conversations: a chat template whose boundary merges tokens, or left truncation that cut
the sequences differently, only shortens (or removes) what is shared; nothing needs checking.

Packing is not free: a row of length L costs attention over L x L cells, so a few long responses
to a short prompt (CheemsBench: 100 + 5 x 400 tokens) are cheaper apart. `plan_rows` packs a
sequence into a row only when the model's estimated cost (`Cost`) says the row is cheaper than
the sequence alone; a row of one sequence is that sequence unchanged.

    rows = plan_rows([[1, 2, 3, 4], [1, 2, 3, 5, 6]], Cost(linear=100.0, attention=1.0))
    # -> [Row(prefix=3, members=(0, 1))]: the row [1 2 3][4][5 6]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MAX_ROW_TOKENS = 4096  # a packed row's length; its attention is L x L cells


@dataclass(frozen=True)
class Cost:
    """Relative compute of a forward: `linear` per token and `attention` per (query, key) cell, per layer."""

    linear: float
    attention: float

    @classmethod
    def of(cls, config: Any) -> Cost:
        """From a transformers config: projections and MLP per token, QK and AV per cell (multiply-adds)."""
        hidden = int(config.hidden_size)
        inner = int(getattr(config, "intermediate_size", None) or 4 * hidden)
        heads = int(getattr(config, "num_attention_heads", 1) or 1)
        head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
        kv = int(getattr(config, "num_key_value_heads", None) or heads) * head_dim
        per_token = 2 * hidden * heads * head_dim + 2 * hidden * kv + 3 * hidden * inner
        return cls(linear=float(per_token), attention=float(2 * heads * head_dim))

    def of_row(self, length: int) -> float:
        return self.linear * length + self.attention * length * length


@dataclass(frozen=True)
class Row:
    """Sequences `members` (indices into the input) sharing their first `prefix` tokens, in one row."""

    prefix: int
    members: tuple[int, ...]

    def length(self, sequences: Sequence[Sequence[int]]) -> int:
        return self.prefix + sum(len(sequences[i]) - self.prefix for i in self.members)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def plan_rows(sequences: Sequence[Sequence[int]], cost: Cost, max_row_tokens: int = MAX_ROW_TOKENS) -> list[Row]:
    """Every sequence in exactly one row; sequences with a common prefix share a row where it is cheaper.

    Sequences are visited in token order (so those sharing a prefix are neighbours) and each joins the
    current row when the row with it costs less than the row without it plus the sequence alone, and the
    row stays within `max_row_tokens`. Every member keeps at least its last token out of the prefix."""
    order = sorted(range(len(sequences)), key=lambda i: tuple(sequences[i]))
    rows: list[Row] = []
    current: Row | None = None
    for i in order:
        seq = sequences[i]
        if current is not None:
            last = sequences[current.members[-1]]
            prefix = min(current.prefix, common_prefix(last, seq), len(seq) - 1)
            if len(current.members) == 1:  # a single sequence shares all but its last token
                prefix = min(common_prefix(last, seq), len(last) - 1, len(seq) - 1)
            joined = Row(prefix, (*current.members, i))
            apart = cost.of_row(current.length(sequences)) + cost.of_row(len(seq))
            size = joined.length(sequences)
            if prefix > 0 and size <= max_row_tokens and cost.of_row(size) < apart:
                current = joined
                continue
            rows.append(current)
        current = Row(len(seq) - 1, (i,))
    if current is not None:
        rows.append(current)
    return rows


@dataclass(frozen=True)
class Packed:
    """One row laid out: ids, position ids, segment of each token (0 = prefix, k = member k, 1-based),
    and the index of each member's last token."""

    input_ids: list[int]
    positions: list[int]
    segments: list[int]
    reads: list[int]


def lay_out(row: Row, sequences: Sequence[Sequence[int]]) -> Packed:
    """The row's tokens: the shared prefix once, then each member's own tokens with their original positions."""
    first = sequences[row.members[0]]
    ids = list(first[: row.prefix])
    positions = list(range(row.prefix))
    segments = [0] * row.prefix
    reads = []
    for k, i in enumerate(row.members, start=1):
        own = sequences[i][row.prefix :]
        ids += own
        positions += range(row.prefix, row.prefix + len(own))
        segments += [k] * len(own)
        reads.append(len(ids) - 1)
    return Packed(ids, positions, segments, reads)
