"""torchrun plumbing: process-group set-up and the gathers the loss and evaluation need.

Under `torchrun` (WORLD_SIZE > 1) the group uses NCCL on GPUs and gloo on CPU; a plain
`python -m trainer.train` runs as a world of one with no process group.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def rank_from_env() -> int:
    """This process's global rank as torchrun sets it (0 without torchrun); readable before `setup`."""
    return int(os.environ.get("RANK", "0"))


def setup() -> World:
    size = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = rank_from_env(), int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{local_rank}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    return World(rank, size, local_rank, device)


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def gather_with_grad(local: torch.Tensor, counts: list[int], world: World) -> torch.Tensor:
    """Concatenate every rank's 1-D `local` (rank r holds counts[r] values), keeping autograd.

    Each rank computes the same loss on the gathered tensor; the all_gather backward sums the
    ranks' gradients and DDP averages them, so the update equals a one-process run on the batch.
    """
    if not world.distributed:
        return local
    width = max(counts)
    padded = torch.cat([local, local.new_zeros(width - local.shape[0])])
    parts = _AllGather.apply(padded)
    return torch.cat([part[:n] for part, n in zip(parts, counts, strict=True)])


class _AllGather(torch.autograd.Function):
    """all_gather whose backward sums every rank's gradient and hands each rank its own slice.

    The backward uses all_reduce rather than reduce_scatter, which gloo (CPU) does not offer.
    """

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:
        parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, tensor.contiguous())
        return torch.stack(parts)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous()
        dist.all_reduce(grad)
        return grad[dist.get_rank()]


def gather_objects(obj: Any, world: World) -> list[Any]:
    if not world.distributed:
        return [obj]
    out: list[Any] = [None] * world.size
    dist.all_gather_object(out, obj)
    return out


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()
