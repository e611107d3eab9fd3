"""Training data as token arrays: prompt groups encoded once, every kept response's ids end to end.

A `Dataset` holds its tokens as one uint32 array with offsets (`Examples`), so memory grows with the tokens
kept (4 bytes each), not with Python objects per token; the array may be memory-mapped from the token cache
(`trainer.data.cache`). Groups are encoded in chunks, each chunk's ids appended to a sink (a list in memory, or
the cache's file), so building holds one chunk's Python lists at a time.

Over-length responses follow the `LengthPolicy`: `drop` drops the response, its pairs, and then any response
left without a pair (the official behaviour); `left`/`right` truncate. Prompts left without pairs are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, overload

import numpy as np
from tqdm import tqdm

from cheems.chat import Encoded, Truncation, encode_many
from trainer.data.groups import LengthPolicy, PromptGroup

TOKEN_DTYPE = np.uint32  # Qwen's vocabulary (151k) and every other in use fits
CHUNK_GROUPS = 512  # prompt groups encoded per tokenizer call while building


@dataclass(frozen=True)
class Example:
    """One response to encode: its group, its index in the group, and its tokens."""

    group: int
    index: int
    input_ids: Sequence[int]


class Examples(Sequence[Example]):
    """Example x's tokens are ids[offsets[x]:offsets[x + 1]]; `group`/`response` say whose response it is."""

    def __init__(self, ids: np.ndarray, offsets: np.ndarray, group: np.ndarray, response: np.ndarray) -> None:
        self.ids, self.offsets, self.group, self.response = ids, offsets, group, response

    @classmethod
    def of(cls, examples: Iterable[Example]) -> Examples:
        """Arrays from Example objects (small data: tests, reports)."""
        items = list(examples)
        lengths = [len(e.input_ids) for e in items]
        ids = np.fromiter((t for e in items for t in e.input_ids), dtype=TOKEN_DTYPE, count=sum(lengths))
        offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
        group = np.array([e.group for e in items], dtype=np.int64)
        return cls(ids, offsets, group, np.array([e.index for e in items], dtype=np.int64))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, x: int) -> Example: ...
    @overload
    def __getitem__(self, x: slice) -> list[Example]: ...
    def __getitem__(self, x: int | slice) -> Example | list[Example]:
        if isinstance(x, slice):
            return [self[i] for i in range(*x.indices(len(self)))]
        if not -len(self) <= x < len(self):
            raise IndexError(x)
        x %= len(self)
        return Example(int(self.group[x]), int(self.response[x]), self.tokens(x))

    def array(self, x: int) -> np.ndarray:
        """Example x's ids as a view of the (memory-mapped) array: no copy."""
        return self.ids[self.offsets[x] : self.offsets[x + 1]]

    def tokens(self, x: int) -> list[int]:
        ids: list[int] = self.array(x).tolist()
        return ids

    @property
    def sequences(self) -> Sequence[np.ndarray]:
        """Example id -> its ids as an array view (what pure functions over sequences take), copying nothing."""
        return _Views(self)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])


class _Views(Sequence[np.ndarray]):
    def __init__(self, examples: Examples) -> None:
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    @overload
    def __getitem__(self, x: int) -> np.ndarray: ...
    @overload
    def __getitem__(self, x: slice) -> list[np.ndarray]: ...
    def __getitem__(self, x: int | slice) -> np.ndarray | list[np.ndarray]:
        if isinstance(x, slice):
            return [self.examples.array(i) for i in range(*x.indices(len(self)))]
        return self.examples.array(x)


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

    examples: Examples
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


@dataclass
class Layout:
    """Everything of a Dataset but its token ids, as arrays (what the token cache stores beside the ids)."""

    offsets: list[int] = field(default_factory=lambda: [0])
    group: list[int] = field(default_factory=list)  # example -> the source group it came from
    index: list[int] = field(default_factory=list)  # example -> its response index in that group
    group_starts: list[int] = field(default_factory=lambda: [0])  # kept group g: examples [starts[g], starts[g+1])
    pairs: list[tuple[int, int]] = field(default_factory=list)  # example ids, kept groups' pairs in order
    pair_starts: list[int] = field(default_factory=lambda: [0])
    stats: LengthStats = field(default_factory=LengthStats)

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "offsets": np.array(self.offsets, dtype=np.int64),
            "group": np.array(self.group, dtype=np.int64),
            "index": np.array(self.index, dtype=np.int64),
            "group_starts": np.array(self.group_starts, dtype=np.int64),
            "pairs": np.array(self.pairs, dtype=np.int64).reshape(-1, 2),
            "pair_starts": np.array(self.pair_starts, dtype=np.int64),
        }


def dataset_of(ids: np.ndarray, arrays: dict[str, np.ndarray], stats: LengthStats) -> Dataset:
    """A Dataset over `ids` (in memory or memory-mapped) and the layout's arrays."""
    examples = Examples(ids, arrays["offsets"], arrays["group"], arrays["index"])
    starts, pair_starts = arrays["group_starts"].tolist(), arrays["pair_starts"].tolist()
    flat = [(int(a), int(b)) for a, b in arrays["pairs"].tolist()]
    groups = [list(range(a, b)) for a, b in pairwise(starts)]
    pairs = [flat[a:b] for a, b in pairwise(pair_starts)]
    return Dataset(examples, groups, pairs, stats)


def encode_groups(
    groups: Sequence[PromptGroup],
    tokenizer: Any,
    max_length: int,
    policy: LengthPolicy,
    keep_unpaired: bool,
    sink: Callable[[np.ndarray], None],
    progress: bool = False,
) -> Layout:
    """Encode every response, apply the length policy, hand each chunk's kept ids to `sink`; the layout."""
    layout = Layout()
    cut = Truncation.NONE if policy is LengthPolicy.DROP else Truncation(policy.value)
    with tqdm(total=len(groups), desc="tokenize", unit="prompt", disable=not progress, mininterval=2) as bar:
        for start in range(0, len(groups), CHUNK_GROUPS):
            chunk = groups[start : start + CHUNK_GROUPS]
            conversations = [g.conversation(r) for g in chunk for r in g.responses]
            encoded = iter(encode_many(tokenizer, conversations, max_length, cut))
            kept: list[list[int]] = []
            for gi, group in enumerate(chunk, start):
                codes = [next(encoded) for _ in group.responses]
                kept += _keep(layout, gi, group, codes, max_length, keep_unpaired)
            sink(np.fromiter((t for ids in kept for t in ids), dtype=TOKEN_DTYPE, count=sum(map(len, kept))))
            bar.update(len(chunk))
    return layout


def _keep(
    layout: Layout, gi: int, group: PromptGroup, codes: list[Encoded], max_length: int, keep_unpaired: bool
) -> list[list[int]]:
    """Record one group's kept responses and pairs in `layout`; their ids, in example order."""
    stats = layout.stats
    stats.responses += len(codes)
    stats.truncated += sum(c.truncated for c in codes)
    fits = {i for i, c in enumerate(codes) if len(c.input_ids) <= max_length}
    pairs = [(a, b) for a, b in group.pairs if a in fits and b in fits]
    kept = fits if keep_unpaired else {i for pair in pairs for i in pair}
    stats.dropped_responses += len(codes) - len(fits)
    stats.dropped_pairs += len(group.pairs) - len(pairs)
    stats.unpaired_dropped += len(fits) - len(kept)
    if not kept:
        stats.dropped_prompts += 1
        return []
    first = len(layout.group)
    ids = {i: first + n for n, i in enumerate(sorted(kept))}
    for i in sorted(kept):
        layout.offsets.append(layout.offsets[-1] + len(codes[i].input_ids))
        layout.group.append(gi)
        layout.index.append(i)
    layout.group_starts.append(len(layout.group))
    layout.pairs += [(ids[a], ids[b]) for a, b in pairs]
    layout.pair_starts.append(len(layout.pairs))
    return [codes[i].input_ids for i in sorted(kept)]


def tokenize_groups(
    groups: Sequence[PromptGroup],
    tokenizer: Any,
    max_length: int = 2048,
    policy: LengthPolicy = LengthPolicy.DROP,
    keep_unpaired: bool = False,
    progress: bool = False,
) -> Dataset:
    """Encode every response in memory; apply the length policy; drop prompts left without pairs (unless kept)."""
    chunks: list[np.ndarray] = []
    layout = encode_groups(groups, tokenizer, max_length, policy, keep_unpaired, chunks.append, progress)
    ids = np.concatenate(chunks) if chunks else np.zeros(0, dtype=TOKEN_DTYPE)
    return dataset_of(ids, layout.arrays(), layout.stats)
