"""Copies to the device: a plain copy on the CPU; pinned and queued on CUDA (where a GPU is present)."""

from __future__ import annotations

import pytest
import torch

from cheems.transfer import to_device


def test_on_the_cpu_the_tensor_comes_back_unchanged() -> None:
    ids = torch.arange(6).reshape(2, 3)
    out = to_device(ids, "cpu")
    assert out.device.type == "cpu" and torch.equal(out, ids)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the GPU host's check)")
def test_on_cuda_the_copy_arrives_intact() -> None:
    ids = torch.arange(1000).reshape(10, 100)
    out = to_device(ids, "cuda")
    assert out.device.type == "cuda" and torch.equal(out.cpu(), ids)
