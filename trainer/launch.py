"""How `cheems train` starts processes: in-process, torchrun on one machine, or torchrun across nodes.

    LaunchConfig(nproc=8, nnodes=4, rdzv_endpoint="cheems-train-0.cheems-train:29400")
    -> torchrun --nnodes=4 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=... --rdzv-id=cheems

Every node runs the same command; the c10d rendezvous (hosted by the node whose address is the
endpoint's host) hands out ranks, so Kubernetes pods need no rank of their own. Under Kubeflow Trainer v2
(a TrainJob on a torch runtime) the runtime gives each node PET_NNODES, PET_NPROC_PER_NODE, PET_MASTER_ADDR
and PET_MASTER_PORT; `cheems train` reads them (`kubeflow_endpoint`), so the same command runs there.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_RDZV_PORT = 29400


@dataclass(frozen=True)
class LaunchConfig:
    nproc: int = 1  # processes per node: one per GPU
    nnodes: int = 1
    rdzv_endpoint: str = ""  # host[:port]; required when nnodes > 1
    rdzv_id: str = "cheems"

    def __post_init__(self) -> None:
        if self.nproc < 1 or self.nnodes < 1:
            raise ValueError(f"nproc and nnodes must be >= 1, got {self.nproc} and {self.nnodes}")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError(f"--nnodes {self.nnodes} needs --rdzv-endpoint host:port (the rendezvous node)")
        host, sep, port = self.rdzv_endpoint.rpartition(":")
        if sep and (not host or not port.isdigit()):
            raise ValueError(f"--rdzv-endpoint must be host or host:port, got {self.rdzv_endpoint!r}")

    @property
    def distributed(self) -> bool:
        """Whether torchrun is needed at all (one process on one node trains in-process)."""
        return self.nproc > 1 or self.nnodes > 1 or bool(self.rdzv_endpoint)

    @property
    def endpoint(self) -> str:
        return self.rdzv_endpoint if ":" in self.rdzv_endpoint else f"{self.rdzv_endpoint}:{DEFAULT_RDZV_PORT}"


def kubeflow_endpoint(env: Mapping[str, str]) -> str:
    """host:port of the rendezvous a Kubeflow Trainer v2 torch runtime gives every node, or "" outside one."""
    host = env.get("PET_MASTER_ADDR", "").strip()
    return f"{host}:{env.get('PET_MASTER_PORT', '').strip() or DEFAULT_RDZV_PORT}" if host else ""


def torchrun_args(config: LaunchConfig) -> list[str]:
    """torchrun's own arguments (before `-m trainer.train ...`)."""
    if not config.rdzv_endpoint:
        return ["--standalone", f"--nproc-per-node={config.nproc}"]
    return [
        f"--nnodes={config.nnodes}",
        f"--nproc-per-node={config.nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={config.endpoint}",
        f"--rdzv-id={config.rdzv_id}",
        "--max-restarts=3",  # a failed worker restarts the group, which resumes from the last checkpoint
    ]


def launch(config: LaunchConfig, train_args: list[str]) -> int:
    """Train with `trainer.train`'s arguments: through torchrun when distributed, else in this process.

    Returns the exit status (torchrun's, or 0 in-process; an in-process failure raises).
    """
    if config.distributed:
        command = [sys.executable, "-m", "torch.distributed.run", *torchrun_args(config), "-m", "trainer.train"]
        return subprocess.call([*command, *train_args])
    from trainer.train import main

    main(train_args)
    return 0
