"""The attention kernel a model runs: a name from the settings resolved for the device it runs on.

    resolve_attention("auto", "cuda")                        # "flex_attention" where torch has it, else "sdpa"
    resolve_attention("auto", "cpu")                         # "sdpa"
    resolve_attention("flex_attention", "cpu", training=True)  # ConfigError: no backward on the CPU
    resolve_attention("flash_attention_2", "cpu")            # ConfigError: needs CUDA (and the flash_attn package)

The names are transformers' `attn_implementation`s. What each does with prefix sharing (`cheems.packing`), whose
packed rows need a mask that is neither causal nor padding:

  sdpa               takes the rows' dense boolean mask [rows, 1, L, L]; with a mask it leaves the fast causal
                     kernels (on an H200 a packed training step was 1.6x slower than unpacked rows)
  flex_attention     takes a BlockMask built from the rows' segments and skips the blocks nobody sees, so a
                     packed row costs about what its visible cells cost; the first call compiles (seconds)
  eager              takes the dense mask as additive floats; the slowest, for checking
  flash_attention_2  cannot take a packed row's mask: prefix sharing is off with it (`cheems.forward.can_share`)

`auto` is FlexAttention on a CUDA device (when torch has it and Triton to compile it), SDPA elsewhere: on the CPU
FlexAttention has no backward, and its forward was several times slower than SDPA's there
(`bench/attention_bench.py`). A name the device cannot run is
refused before anything loads, with one line naming it.
"""

from __future__ import annotations

import importlib.util
from typing import Literal, get_args

from cheems.errors import ConfigError

AttentionName = Literal["auto", "sdpa", "flex_attention", "eager", "flash_attention_2"]  # settings' type
ATTENTIONS: tuple[str, ...] = get_args(AttentionName)


def has_flex_attention(device_type: str) -> bool:
    """Whether torch here has FlexAttention for `device_type` (on CUDA it compiles with Triton)."""
    if importlib.util.find_spec("torch.nn.attention.flex_attention") is None:
        return False
    return device_type != "cuda" or importlib.util.find_spec("triton") is not None


def has_flash_attention() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def check_name(name: str) -> None:
    if name not in ATTENTIONS:
        raise ConfigError(f"attn_implementation {name!r} is not one of {', '.join(ATTENTIONS)}")


def resolve_attention(name: str, device: str, training: bool = False) -> str:
    """The transformers `attn_implementation` `name` means on `device` (`training`: with gradients); ConfigError
    naming it and the device when the device cannot run it."""
    import torch  # here, not at import: the settings that name a kernel (`AttentionName`) stay light to import

    check_name(name)
    kind = torch.device(device).type
    if kind == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {device}: CUDA is not available here (torch {torch.__version__})")
    if name == "auto":
        return "flex_attention" if kind == "cuda" and has_flex_attention(kind) else "sdpa"
    if name == "flex_attention":
        _check_flex(device, kind, training)
    if name == "flash_attention_2":
        _check_flash(device, kind)
    return name


def _check_flex(device: str, kind: str, training: bool) -> None:
    import torch

    if not has_flex_attention(kind):
        what = "Triton, which compiles it there, is not installed" if kind == "cuda" else "torch has no FlexAttention"
        raise ConfigError(
            f"attn_implementation flex_attention cannot run on {device}: {what} (torch {torch.__version__})"
        )
    if training and kind == "cpu":
        raise ConfigError(
            f"attn_implementation flex_attention cannot train on {device}: FlexAttention has no backward on the CPU "
            f"in torch {torch.__version__} (sdpa trains there)"
        )


def _check_flash(device: str, kind: str) -> None:
    if not has_flash_attention():
        raise ConfigError(
            "attn_implementation flash_attention_2 cannot run here: the flash_attn package is not installed"
        )
    if kind != "cuda":
        raise ConfigError(f"attn_implementation flash_attention_2 cannot run on {device}: it needs a CUDA device")
