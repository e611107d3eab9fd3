"""Host-to-device copies that do not stop the host: pinned memory and `non_blocking` on CUDA.

A copy from ordinary (pageable) memory makes the host wait until the GPU has it; from pinned memory the copy
is queued like a kernel, so the host goes on preparing the next batch while the GPU works. On the CPU (and for
a tensor already on the device) this is a plain `.to`.

    ids = to_device(ids, "cuda")   # pinned, queued, returns at once
"""

from __future__ import annotations

import torch


def to_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    target = torch.device(device)
    if target.type != "cuda" or tensor.device.type != "cpu":
        return tensor.to(target)
    return tensor.pin_memory().to(target, non_blocking=True)
