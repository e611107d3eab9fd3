"""The reward model's forward pass over token sequences, shared by training, evaluation and serving.

    values = score_in_groups(model, [[151644, 872], [151644, 872, 198]], max_batch=64, device="cpu")

`forward_rewards` reads the scalar head at each sequence's last real token (right padding);
`score_in_groups` sorts sequences into length groups first so padding stays small. With
`share=True` sequences that begin alike are packed into rows that compute their common prefix
once (`cheems.packing`); `shared_rewards` is the same for a training forward (gradients flow).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from cheems.masks import block_mask, dense_mask
from cheems.model import head_of
from cheems.packing import Cost, Packed, Row, lay_out, plan_rows

MAX_BATCH_TOKENS = 32768  # padded tokens per forward in `score_in_groups`


@dataclass(frozen=True)
class ForwardTokens:
    """What one forward of `score_rows` held: the tokens of its sequences (`given`), of its rows (a shared prefix
    once: `rows`), and of its input tensor (`computed`, padding included)."""

    given: int
    rows: int
    computed: int

    @property
    def shared(self) -> int:
        """Tokens of common prefixes computed once instead of once per sequence."""
        return self.given - self.rows

    @property
    def padding(self) -> int:
        return self.computed - self.rows


class Interrupted(Exception):
    """`score_rows` stopped between forwards because its `stop` said so (nobody waits for the rewards)."""


def to_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """`tensor` on `device`; from the CPU to CUDA through pinned memory, non-blocking, so the copy is queued like
    a kernel and the host goes on preparing the next batch while the GPU works (on the CPU a plain `.to`)."""
    target = torch.device(device)
    if target.type != "cuda" or tensor.device.type != "cpu":
        return tensor.to(target)
    return tensor.pin_memory().to(target, non_blocking=True)


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded input_ids and attention_mask."""
    longest = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), longest), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
        mask[row, : len(seq)] = 1
    return ids, mask


def forward_rewards(model: Any, sequences: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> torch.Tensor:
    """Scalar reward of each token sequence: the head at its last token, as float32. DDP-wrapped models work.

    Under FlexAttention the sequences go end to end in one row (`packed_rewards`): transformers' own flex path
    compiles again for each new batch shape (5-10 s a forward on the CPU here) and pads."""
    if attention_of(model) == "flex_attention":
        return packed_rewards(model, sequences, single_rows(sequences), device)
    ids, mask = pad_batch(sequences, unwrapped(model).config.pad_token_id)
    # no KV cache: a reward is one forward, and the cache of every layer would be written for nothing
    logits = model(input_ids=to_device(ids, device), attention_mask=to_device(mask, device), use_cache=False).logits
    return logits[:, 0].float()


def length_groups(lengths: Sequence[int], max_batch: int, max_tokens: int) -> list[list[int]]:
    """Indices grouped shortest first; a group holds at most max_batch items and max_tokens padded tokens."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    current: list[int] = []
    for i in order:
        padded = (len(current) + 1) * lengths[i]  # sorted, so this item is the group's longest
        if current and (len(current) == max_batch or padded > max_tokens):
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


def score_in_groups(
    model: Any,
    sequences: Sequence[Sequence[int]],
    max_batch: int,
    device: str,
    share: bool = False,
    max_tokens: int = MAX_BATCH_TOKENS,
) -> list[float]:
    """Run `model` over length-grouped batches; results in input order.

    `share`: sequences with a common prefix worth sharing go in packed rows (`cheems.packing`); the
    rest, and everything when the model cannot take a packed row's mask, as they are."""
    return score_rows(model, sequences, plan(model, sequences, share, device), max_batch, device, max_tokens)


def plan(model: Any, sequences: Sequence[Sequence[int]], share: bool, device: torch.device | str = "cpu") -> list[Row]:
    """The rows `score_rows` runs on `device`: packed where sharing pays (`share` and a model that takes the mask;
    priced for its attention kernel there), else every sequence a row of its own."""
    if share and can_share(model):
        return plan_rows(sequences, cost_of(model, device))
    return single_rows(sequences)


def single_rows(sequences: Sequence[Sequence[int]]) -> list[Row]:
    """Every sequence a row of its own (nothing shared)."""
    return [Row(len(s) - 1, (i,)) for i, s in enumerate(sequences)]


def score_rows(
    model: Any,
    sequences: Sequence[Sequence[int]],
    rows: Sequence[Row],
    max_batch: int,
    device: str,
    max_tokens: int = MAX_BATCH_TOKENS,
    stop: Callable[[], bool] | None = None,
    done: Callable[[int], object] | None = None,
    measure: Callable[[ForwardTokens], object] | None = None,
) -> list[float]:
    """Rewards of `sequences` laid out as `rows` (every index in exactly one), in input order: packed rows in
    length groups of their own (their mask), single sequences in plain right-padded length groups (under
    FlexAttention with the packed rows, end to end); a group
    holds at most `max_batch` rows and `max_tokens` padded tokens. `stop()` is asked before each forward; when
    it says so, `Interrupted` is raised (the caller has gone: the forwards left are not run). `done(n)` is told
    after each forward how many sequences it scored (a progress bar); `measure(tokens)` what it held (metrics)."""
    out = [0.0] * len(sequences)
    flat = attention_of(model) == "flex_attention"  # every row goes end to end with the others (`forward_rewards`)
    packs = [r for r in rows if len(r.members) > 1 or flat]
    alone = [r.members[0] for r in rows if len(r.members) == 1 and not flat]

    def check() -> None:
        if stop is not None and stop():
            raise Interrupted("stopped between forwards")

    with torch.no_grad():
        for group in length_groups([r.length(sequences) for r in packs], max_batch, max_tokens):
            check()
            chosen = [packs[g] for g in group]
            values = packed_rewards(model, sequences, chosen, device).tolist()
            if measure is not None:
                lengths = [r.length(sequences) for r in chosen]
                given = sum(len(sequences[i]) for r in chosen for i in r.members)
                measure(ForwardTokens(given, sum(lengths), sum(lengths) if flat else len(lengths) * max(lengths)))
            for i, v in zip([i for r in chosen for i in r.members], values, strict=True):
                out[i] = v
            if done is not None:
                done(len(values))
        for group in length_groups([len(sequences[i]) for i in alone], max_batch, max_tokens):
            check()
            members = [alone[g] for g in group]
            values = forward_rewards(model, [sequences[i] for i in members], device).tolist()
            if measure is not None:
                lengths = [len(sequences[i]) for i in members]
                measure(ForwardTokens(sum(lengths), sum(lengths), len(lengths) * max(lengths)))
            for i, v in zip(members, values, strict=True):
                out[i] = v
            if done is not None:
                done(len(values))
    return out


def side_by_side(
    calls: Sequence[tuple[Sequence[Sequence[int]], Sequence[Row]]],
) -> tuple[list[Sequence[int]], list[Row]]:
    """Several calls' (sequences, rows) as one list of sequences and its rows, each call's rows moved to where its
    sequences now are, so `score_rows` runs them in shared forwards (nothing packed across calls)."""
    sequences: list[Sequence[int]] = []
    rows: list[Row] = []
    for own, planned in calls:
        offset = len(sequences)
        rows += [Row(r.prefix, tuple(i + offset for i in r.members)) for r in planned]
        sequences += own
    return sequences, rows


def split(values: Sequence[float], sizes: Sequence[int]) -> list[list[float]]:
    """`values` cut back into consecutive lists of `sizes` (the calls `side_by_side` joined)."""
    out, start = [], 0
    for size in sizes:
        out.append(list(values[start : start + size]))
        start += size
    return out


def unwrapped(model: Any) -> Any:
    """The transformers model inside a DDP wrapper (FSDP2 modules are the model itself)."""
    return getattr(model, "module", model)


# take a packed row's mask (a dense 4D one, or flex's BlockMask); flash_attention_2 takes none, so its rows are
# never packed (packing for it would need its varlen interface, which this does not implement)
SHARING_ATTENTION = {"sdpa", "eager", "flex_attention"}


def attention_of(model: Any) -> str:
    """The transformers attention implementation `model` runs ("sdpa", "flex_attention", ...)."""
    return str(getattr(unwrapped(model).config, "_attn_implementation", None) or "sdpa")


def can_share(model: Any) -> bool:
    """Whether `model` takes the packed rows' attention mask and position ids."""
    return attention_of(model) in SHARING_ATTENTION


def cost_of(model: Any, device: torch.device | str) -> Cost:
    """The packing cost of `model` on `device`: its shape, priced for its attention kernel there."""
    return Cost.of(unwrapped(model).config, attention_of(model), torch.device(device).type)


def shared_rewards(model: Any, sequences: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> torch.Tensor:
    """`forward_rewards` with common prefixes packed, in one forward (DDP takes one per backward); rewards in
    input order, with gradients."""
    if not can_share(model):
        return forward_rewards(model, sequences, device)
    rows = plan_rows(sequences, cost_of(model, device))
    if all(len(r.members) == 1 for r in rows):  # nothing worth sharing: the plain forward, not a 4D mask
        return forward_rewards(model, sequences, device)
    values = packed_rewards(model, sequences, rows, device)
    order = torch.as_tensor([i for r in rows for i in r.members], dtype=torch.long)
    return torch.empty_like(values).scatter(0, order.to(values.device), values)


def packed_rewards(
    model: Any, sequences: Sequence[Sequence[int]], rows: Sequence[Row], device: torch.device | str
) -> torch.Tensor:
    """Rewards of the rows' members, row by row and member by member, from one forward over the rows.

    Each row is right-padded; its mask (`row_mask`, in the form the model's attention takes) lets a member's
    tokens see the prefix and, causally, their own segment; padding sees earlier padding and itself. The model
    runs through its own forward (so DDP and FSDP hooks run) and the head's per-token output is taken on its
    way out."""
    packed = [lay_out(r, sequences) for r in rows]
    inner = unwrapped(model)
    if attention_of(model) == "flex_attention":
        ids, positions, mask, rows_index, reads = _end_to_end(packed, device)
    else:
        ids, positions, segments = _row_tensors(packed, inner.config.pad_token_id, device)
        mask = dense_mask(segments, next(inner.parameters()).dtype if attention_of(model) == "eager" else None)
        rows_index = torch.as_tensor([r for r, p in enumerate(packed) for _ in p.reads], dtype=torch.long)
        reads = torch.as_tensor([i for p in packed for i in p.reads], dtype=torch.long)
    per_token: list[torch.Tensor] = []
    hook = head_of(inner).register_forward_hook(lambda _m, _i, output: per_token.append(output))
    try:
        model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False)
    finally:
        hook.remove()
    return per_token[-1][rows_index.to(device), reads.to(device), 0].float()


def _end_to_end(
    packed: Sequence[Packed], device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor, Any, torch.Tensor, torch.Tensor]:
    """For FlexAttention: the rows one after another in a single row (no padding; a block mask keeps each row to
    itself), so every forward has a batch of one (torch 2.13's CPU FlexAttention fails to compile when the batch
    size changes between calls). input_ids, position_ids, BlockMask, and the (row 0, token) of each read."""
    ids = torch.as_tensor([t for p in packed for t in p.input_ids], dtype=torch.long, device=device)[None]
    positions = torch.as_tensor([t for p in packed for t in p.positions], dtype=torch.long, device=device)[None]
    owners = torch.as_tensor([r for r, p in enumerate(packed) for _ in p.input_ids], dtype=torch.long)
    segments = torch.as_tensor([s for p in packed for s in p.segments], dtype=torch.long)
    starts = [0]
    for p in packed[:-1]:
        starts.append(starts[-1] + len(p.input_ids))
    reads = torch.as_tensor([start + i for start, p in zip(starts, packed, strict=True) for i in p.reads])
    mask = block_mask(owners.to(device), segments.to(device))
    return ids, positions, mask, torch.zeros_like(reads), reads


def _row_tensors(
    packed: Sequence[Packed], pad_id: int, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded input_ids, position_ids and segments (-1: padding) [rows, L], on `device`."""
    longest = max(len(p.input_ids) for p in packed)
    ids = torch.full((len(packed), longest), pad_id, dtype=torch.long)
    positions = torch.zeros((len(packed), longest), dtype=torch.long)
    segments = torch.full((len(packed), longest), -1, dtype=torch.long)  # -1: padding
    for row, p in enumerate(packed):
        n = len(p.input_ids)
        ids[row, :n] = torch.as_tensor(p.input_ids)
        positions[row, :n] = torch.as_tensor(p.positions)
        segments[row, :n] = torch.as_tensor(p.segments)
    return ids.to(device), positions.to(device), segments.to(device)
