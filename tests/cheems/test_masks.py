"""Packed rows' masks: what a token sees, densely and as a FlexAttention BlockMask that skips unseen blocks."""

from __future__ import annotations

import torch

from cheems.masks import block_mask, dense_mask


def test_a_member_sees_the_prefix_and_itself_causally_and_padding_only_padding() -> None:
    segments = torch.tensor([[0, 0, 1, 2, 2, -1]])
    allowed = dense_mask(segments)[0, 0].int().tolist()
    assert allowed == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],  # member 1: the prefix and itself
        [1, 1, 0, 1, 0, 0],  # member 2 does not see member 1
        [1, 1, 0, 1, 1, 0],
        [0, 0, 0, 0, 0, 1],  # padding: itself, so no query is empty
    ]
    additive = dense_mask(segments, torch.float32)[0, 0]
    assert additive[2, 2] == 0 and additive[3, 2] == torch.finfo(torch.float32).min


def test_the_block_mask_keeps_rows_apart_and_skips_what_nobody_sees() -> None:
    # two rows end to end: [prefix 128][member 256][member 256], then a row of 128 alone
    owners = torch.tensor([0] * 640 + [1] * 128)
    segments = torch.tensor([0] * 128 + [1] * 256 + [2] * 256 + [1] * 128)
    mask = block_mask(owners, segments)
    blocks = mask.to_dense()[0, 0].int()  # 6 x 6 blocks of 128
    assert blocks.shape == (6, 6)
    assert blocks[:, 0].tolist() == [1, 1, 1, 1, 1, 0]  # everyone in row 0 sees the prefix; row 1 does not
    assert blocks[3, 1] == 0 and blocks[3, 2] == 0  # member 2 skips member 1's blocks
    assert blocks[5].tolist() == [0, 0, 0, 0, 0, 1]
    assert blocks.sum() < 6 * 7 // 2  # fewer than a causal mask's blocks
