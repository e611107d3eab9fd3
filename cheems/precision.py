"""The dtype a model runs in: a name from the command line resolved for the device it runs on.

    resolve_dtype("auto", "cuda")      # torch.bfloat16 on a GPU that has it (Ampere and later)
    resolve_dtype("auto", "cpu")       # torch.float32
    resolve_dtype("bfloat16", "cuda")  # ConfigError on a card without bf16, or with no CUDA at all

`auto` is what RLHF frameworks serve and train reward models in: bfloat16 on a CUDA device that supports it
(4.5-5.8x the float32 throughput on an H200, measured), float16 on an older CUDA card (as vLLM falls back),
float32 on the CPU, where half precision is emulated and slower. Whatever the dtype, rewards leave the
forward as float32 (`cheems.forward`). A dtype the device cannot run is refused before anything loads.

The names are checked in one place, `check_dtype` (the scorer's options, the training service's supervision
dtype): importing this module does not import torch, so a config that only names a dtype stays light to import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

from cheems.errors import ConfigError

if TYPE_CHECKING:
    import torch

DtypeName = Literal["auto", "bfloat16", "float16", "float32"]
DTYPES: tuple[str, ...] = get_args(DtypeName)  # torch's names (torch.bfloat16 ...), and auto


def check_dtype(name: str, field: str = "dtype") -> str:
    """`name` when it is one of DTYPES; else ConfigError (a ValueError) naming `field` and the choices."""
    if name not in DTYPES:
        raise ConfigError(f"{field} must be one of {', '.join(DTYPES)}, got {name!r}")
    return name


def dtype_name(dtype: torch.dtype) -> str:
    """ "bfloat16" for torch.bfloat16 (the names `resolve_dtype` takes and GetModelInfo reports)."""
    return str(dtype).removeprefix("torch.")


def resolve_dtype(name: str, device: str) -> torch.dtype:
    """The torch dtype `name` means on `device`; ConfigError naming the dtype and device when it cannot run."""
    import torch  # here, not at import (`check_dtype`)

    check_dtype(name)
    kind = torch.device(device).type
    if kind == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {device}: CUDA is not available here (torch {torch.__version__})")
    if name == "auto":
        if kind != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    dtype: torch.dtype = getattr(torch, name)
    if kind == "cuda" and dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported():
        card = torch.cuda.get_device_name(torch.device(device))
        raise ConfigError(f"dtype bfloat16 cannot run on {device} ({card}): use --dtype float16 or float32")
    _probe(dtype, device)
    return dtype


def planned_dtype(name: str, device: str) -> str:
    """The dtype name `name` will mean on `device`, decided without that device at hand (an export for another
    machine): `auto` is bfloat16 for CUDA (Ampere and later) and float32 otherwise; the device checks it when
    it loads the model (`resolve_dtype`)."""
    import torch

    if check_dtype(name) != "auto":
        return name
    return "bfloat16" if torch.device(device).type == "cuda" else "float32"


def _probe(dtype: torch.dtype, device: str) -> None:
    """A matrix product and attention in `dtype` on `device`, the operations a forward needs."""
    import torch

    try:
        x = torch.ones((1, 1, 4, 8), dtype=dtype, device=device)
        torch.nn.functional.scaled_dot_product_attention(x, x, x) @ x.transpose(-1, -2)
    except (RuntimeError, TypeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"dtype {dtype_name(dtype)} cannot run on {device}: {first}") from None
