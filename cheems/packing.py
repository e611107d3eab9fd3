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

Packing is not free: a packed row needs a mask, and with a dense mask (SDPA) its attention costs
all L x L cells, where a sequence alone is causal (about half of them, on kernels that skip the
rest); with FlexAttention's block mask it costs about its visible cells. So a few long responses
to a short prompt (CheemsBench: 100 + 5 x 400 tokens) are cheaper apart under a dense mask, and
packed under a block mask. `plan_rows` packs a sequence into a row only when the estimated cost
(`Cost`: the model's shape, the attention kernel and the device, `KERNELS`) says the row is
cheaper than the sequence alone; a row of one sequence is that sequence unchanged.

    rows = plan_rows([[1, 2, 3, 4], [1, 2, 3, 5, 6]], Cost(linear=100.0, attention=1.0))
    # -> [Row(prefix=3, members=(0, 1))]: the row [1 2 3][4][5 6]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MAX_ROW_TOKENS = 4096  # a packed row's length; its attention is L x L cells


@dataclass(frozen=True)
class Kernel:
    """How one attention kernel on one kind of device prices a row's (query, key) cells, per `Cost.attention`.

    An unpacked row is causal: its L(L+1)/2 cells at `causal` each (fast kernels skip the rest). A packed row
    carries a mask: `sparse` kernels (FlexAttention's block mask) pay its visible cells at `packed` each, dense
    ones (SDPA, eager with a [rows, 1, L, L] mask) all L x L at `packed` each. `row`: a packed row's fixed
    cost, in tokens of linear work (its mask built, its blocks indexed)."""

    causal: float = 1.0
    packed: float = 2.0
    sparse: bool = False
    row: float = 0.0


# Per (device type, attention). Numbers are times relative to the multiply-adds `Cost.of` counts (1.0: an attention
# multiply-add costs what a linear one does). Sources:
#   cpu: measured here (2 cores, torch 2.13, fp32, a hidden 256 / 4 layer Qwen2 RM, forwards under no_grad):
#        `cd bench && python attention_bench.py`; each line fitted to its unshared and shared times on both shapes.
#        Measured unshared/shared, forward: sdpa 5.67x RLHF-like, 0.60x CheemsBench-like; eager 5.24x, 0.35x;
#        flex 3.10x, 2.89x (CPU flex is slow per cell and block-granular: its line is a rough fit). Forward +
#        backward (`--train`): sdpa 4.42x, 0.86x.
#   cuda: documented, NOT measured in this repository: the H200 figures of issue 30 (Qwen2.5-0.5B shape, bf16,
#        forward + backward, CheemsBench-like 150 + 5 x 400 and RLHF-like 1,000 + 8 x 40 tokens): unshared /
#        shared = 0.94x and 4.62x with SDPA's dense mask, 1.08x and 4.37x with FlexAttention, and a whole
#        training step 1.6x slower shared with the dense mask. On those, a masked SDPA cell costs ~1.6-4.3 causal
#        flash cells (3 keeps the CheemsBench shape apart), a FlexAttention cell ~6-7; to be measured on a GPU.
KERNELS: dict[tuple[str, str], Kernel] = {
    ("cpu", "sdpa"): Kernel(causal=4.0, packed=1.8),
    ("cpu", "eager"): Kernel(causal=11.0, packed=6.1),
    ("cpu", "flex_attention"): Kernel(causal=50.0, packed=40.0, sparse=True),
    ("cuda", "sdpa"): Kernel(causal=1.0, packed=3.0),
    ("cuda", "eager"): Kernel(causal=2.0, packed=1.0),  # a guess: eager computes all L x L cells, packed or not
    ("cuda", "flex_attention"): Kernel(causal=6.0, packed=6.0, sparse=True),
}


def kernel_for(attention: str, device: str = "cpu") -> Kernel:
    """The line of `KERNELS` for `attention` on `device` ("cuda:1" is cuda; any other device the CPU's); an
    attention without a line (flash_attention_2, which packs nothing) is priced as SDPA."""
    kind = "cuda" if device.startswith("cuda") else "cpu"
    return KERNELS.get((kind, attention)) or KERNELS[(kind, "sdpa")]


@dataclass(frozen=True)
class Cost:
    """Relative compute of a forward: `linear` per token and `attention` per (query, key) cell, per layer, with
    the cells priced by `kernel` (unpacked rows causal, packed rows by their mask)."""

    linear: float
    attention: float
    kernel: Kernel = KERNELS[("cpu", "sdpa")]

    @classmethod
    def of(cls, config: Any, attention: str | None = None, device: str = "cpu") -> Cost:
        """From a transformers config: projections and MLP per token, QK and AV per cell (multiply-adds); the
        kernel that of `attention` (default: the config's own) on `device`."""
        hidden = int(config.hidden_size)
        inner = int(getattr(config, "intermediate_size", None) or 4 * hidden)
        heads = int(getattr(config, "num_attention_heads", 1) or 1)
        head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
        kv = int(getattr(config, "num_key_value_heads", None) or heads) * head_dim
        per_token = 2 * hidden * heads * head_dim + 2 * hidden * kv + 3 * hidden * inner
        kernel = kernel_for(attention or getattr(config, "_attn_implementation", None) or "sdpa", device)
        return cls(linear=float(per_token), attention=float(2 * heads * head_dim), kernel=kernel)

    def alone(self, length: int) -> float:
        """One sequence in a row of its own (causal)."""
        return self.linear * length + self.attention * self.kernel.causal * length * (length + 1) / 2

    def packed(self, prefix: int, owns: Sequence[int]) -> float:
        """A packed row: `prefix` shared tokens, then members of `owns` tokens each."""
        length = prefix + sum(owns)
        if self.kernel.sparse:  # the prefix's triangle, each member's view of the prefix and its own triangle
            cells = prefix * (prefix + 1) / 2 + sum(n * prefix + n * (n + 1) / 2 for n in owns)
        else:
            cells = length * length
        return self.linear * (length + self.kernel.row) + self.attention * self.kernel.packed * cells

    def of_row(self, row: Row, sequences: Sequence[Sequence[int]]) -> float:
        if len(row.members) == 1:
            return self.alone(len(sequences[row.members[0]]))
        return self.packed(row.prefix, [len(sequences[i]) - row.prefix for i in row.members])


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
            apart = cost.of_row(current, sequences) + cost.alone(len(seq))
            size = joined.length(sequences)
            if prefix > 0 and size <= max_row_tokens and cost.of_row(joined, sequences) < apart:
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
