"""How the benchmark's scorers are configured: the --vllm-* options and the scorer config of (c)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from services.scorer.config import ScorerConfig


def add_vllm_options(parser: argparse.ArgumentParser) -> None:
    """--vllm-python, --vllm-memory-fraction, --vllm-quick-start: how the vLLM backend's engine runs."""
    parser.add_argument("--vllm-python", default="", help="Python of vLLM's environment (default .venv-vllm's)")
    parser.add_argument(
        "--vllm-memory-fraction",
        type=float,
        help="vLLM's share of the GPU's memory, or on the CPU the share of the host's free memory, less the weights, "
        "its KV caches take (default 0.15 on the CPU, 0.5 on CUDA: the torch backend's scorer holds the card too)",
    )
    parser.add_argument(
        "--vllm-quick-start", action="store_true", help="vLLM without compiling or CUDA graphs: ready sooner, slower"
    )


def server_config(
    args: argparse.Namespace,
    directory: Path,
    backend: str | None = None,
    dtype: str | None = None,
    **changes: Any,
) -> ScorerConfig:
    """The scorer of (c): the options' backend, device and dtype (unless given); Triton's batch of 64 within 5 ms
    (vLLM's: 64 sequences a step), vLLM's engine as the --vllm-* options say; `changes`, other fields."""
    backend = backend or args.backend
    engine: dict[str, Any] = {}
    if backend == "vllm":
        cuda = torch.device(args.device).type == "cuda"
        fraction = args.vllm_memory_fraction or (0.5 if cuda else 0.15)
        engine = {
            "vllm_python": args.vllm_python,
            "vllm_memory_fraction": fraction,
            "vllm_quick_start": args.vllm_quick_start,
        }
    fields: dict[str, Any] = {"host": "127.0.0.1", "grpc_port": 0, "http_port": -1, "max_batch_size": 64}
    fields |= {"queue_delay_us": 5000, **engine, **changes}
    return ScorerConfig(model=str(directory), backend=backend, device=args.device, dtype=dtype or args.dtype, **fields)
