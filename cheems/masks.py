"""The attention masks of packed rows (`cheems.packing`), in the form each attention kernel takes.

A packed row is [prefix][member 1][member 2]...; each token has a segment (0: the prefix, k: member k, -1:
padding). A token sees, causally, the prefix and its own segment, so each member reads exactly what it reads in
its own unpacked sequence (`visible`).

    dense_mask(segments)                # bool [rows, 1, L, L] for SDPA (additive floats for eager: pass a dtype)
    block_mask(owners, segments)        # a FlexAttention BlockMask over rows laid end to end in one row

The dense mask costs all L x L cells on any kernel and keeps SDPA off its fast causal kernels; a BlockMask lets
FlexAttention skip the blocks nobody sees, so a packed row costs about its visible cells.
"""

from __future__ import annotations

from typing import Any

import torch

FLEX_BLOCK = 128  # FlexAttention's default block size


def visible(query: torch.Tensor, key: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Whether the token at `q` of segment `query` sees the one at `k` of segment `key`: causally, the prefix
    (segment 0) and its own segment. Padding (segment -1) sees earlier padding and itself: no query is empty."""
    return (k <= q) & (((key == 0) & (query >= 0)) | (key == query))


def dense_mask(segments: torch.Tensor, additive: torch.dtype | None = None) -> torch.Tensor:
    """The [rows, 1, L, L] mask of right-padded rows' `segments` [rows, L], built on their device: boolean (SDPA),
    or with `additive` a dtype, 0 where visible and that dtype's minimum elsewhere (eager adds it to the scores)."""
    index = torch.arange(segments.shape[1], device=segments.device)
    allowed = visible(segments[:, None, :, None], segments[:, None, None, :], index[:, None], index[None, :])
    if additive is None:
        return allowed
    return torch.zeros(allowed.shape, dtype=additive, device=allowed.device).masked_fill(
        ~allowed, torch.finfo(additive).min
    )


def block_mask(owners: torch.Tensor, segments: torch.Tensor) -> Any:
    """A FlexAttention BlockMask over one row [1, T] holding several packed rows end to end: token t belongs to
    row `owners[t]` and has segment `segments[t]` in it; a token sees what `visible` says within its own row."""
    from torch.nn.attention.flex_attention import create_block_mask

    length = owners.shape[0]
    # the kernel may ask about indices past T in the last block: padding to whole blocks keeps them in range
    # (owner -1 is no row's, so nothing sees them)
    extra = -length % FLEX_BLOCK
    owner = torch.nn.functional.pad(owners, (0, extra), value=-1)
    segment = torch.nn.functional.pad(segments, (0, extra), value=-1)

    def mask_mod(_b: torch.Tensor, _h: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return (owner[q] == owner[k]) & visible(segment[q], segment[k], q, k)

    return create_block_mask(mask_mod, 1, None, length, length, device=owners.device)
