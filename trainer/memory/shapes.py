"""Where a model's config comes from for a plan: a directory's `config.json`, else a known Qwen2.5 shape.

    model_config("Qwen/Qwen2.5-72B-Instruct")            # no hub here: the known shape
    model_config("out/models/tiny")                     # the directory's config.json
    model_config("Qwen/Qwen2.5-72B-Instruct", resolved)  # a directory a hub resolver found (its config wins)

Only `config.json` is read; no weights, no tokenizer. The known shapes are the public configs of the Qwen2.5
sizes the paper uses (Instruct and base models share them); any other hub id needs a directory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cheems.errors import ConfigError


@dataclass(frozen=True)
class KnownShape:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    tie_word_embeddings: bool


# Qwen2.5 sizes (billions) -> the shape fields of their published config.json
QWEN25: dict[str, KnownShape] = {
    "0.5": KnownShape(896, 4864, 24, 14, 2, 151936, True),
    "1.5": KnownShape(1536, 8960, 28, 12, 2, 151936, True),
    "3": KnownShape(2048, 11008, 36, 16, 2, 151936, True),
    "7": KnownShape(3584, 18944, 28, 28, 4, 152064, False),
    "14": KnownShape(5120, 13824, 48, 40, 8, 152064, False),
    "32": KnownShape(5120, 27648, 64, 40, 8, 152064, False),
    "72": KnownShape(8192, 29568, 80, 64, 8, 152064, False),
}
_QWEN25_ID = re.compile(r"^(?:qwen/)?qwen2\.5-(\d+(?:\.\d+)?)b(?:-instruct)?$", re.IGNORECASE)


def known_shape(model: str) -> tuple[str, KnownShape] | None:
    """(name, shape) of a Qwen2.5 hub id ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-7b"), else None."""
    match = _QWEN25_ID.match(model.strip())
    if match is None or match.group(1) not in QWEN25:
        return None
    return f"Qwen2.5-{match.group(1)}B", QWEN25[match.group(1)]


def model_config(model: str, resolved: str | Path | None = None, trust_remote_code: bool = False) -> tuple[Any, str]:
    """(a transformers config with num_labels=1, where it came from) for `model`.

    `resolved`: a directory a hub resolver found for `model`; its config.json wins. Then `model` itself when it is
    a directory, then the known shapes. Raises ConfigError (naming `model`) when none applies."""
    for directory in (resolved, model):
        if directory is not None and (Path(directory) / "config.json").is_file():
            return _read_config(Path(directory), trust_remote_code), str(Path(directory) / "config.json")
    known = known_shape(model)
    if known is not None:
        name, shape = known
        return _qwen2_config(shape), f"known shape {name}"
    if Path(model).is_dir():
        raise ConfigError(f"model {model!r}: the directory has no config.json to plan from")
    raise ConfigError(
        f"model {model!r}: no config.json to plan from (not a directory, not a known Qwen2.5 size); "
        "pass a checkpoint directory (--set model=DIR)"
    )


def _read_config(directory: Path, trust_remote_code: bool) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(directory, num_labels=1, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:
        raise ConfigError(f"model {str(directory)!r}: config.json cannot be read: {e}") from None


def _qwen2_config(shape: KnownShape) -> Any:
    from transformers import Qwen2Config

    labels: dict[str, Any] = {"num_labels": 1}  # a PretrainedConfig keyword (not in Qwen2Config's signature)
    return Qwen2Config(
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        vocab_size=shape.vocab_size,
        tie_word_embeddings=shape.tie_word_embeddings,
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        **labels,
    )
