"""Reward models as standard `AutoModelForSequenceClassification` (num_labels=1) checkpoints.

Any Hugging Face decoder with a scalar, bias-free head read at the last token: saved in
safetensors so vLLM, other servers and our scorer load it as they load Skywork-style RMs.
Official CheemsRM checkpoints (a causal LM plus a `v_head`) are converted by `convert_v_head`.
Shared by the trainer and the scorer; the forward pass is in `cheems.forward`.
Weights are only ever read from safetensors (no pickle), and remote code is off unless asked.

Every checkpoint we write is self-describing (`describe_reward_model`), so standard tools score it as
`cheems score` does: `problem_type="regression"` (the text-classification pipeline returns the raw
reward, no sigmoid), the label "reward", and a chat template whose rendering ends at the token the
reward is read at (stripped, as `cheems.chat.render` does). Older checkpoints without these load as
before; `describe_checkpoint` rewrites one in place.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cheems.attention import resolve_attention
from cheems.errors import ModelError

log = logging.getLogger(__name__)

REWARD_LABEL = "reward"
# First in a template we made stripped, so wrapping twice is a no-op.
STRIPPED_MARK = "{#- cheems: rendered stripped; the reward is read at its last token -#}"


def quiet_transformers() -> None:
    """Our own progress bar and logs report training; transformers' per-file bars are noise here."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def head_of(model: nn.Module) -> nn.Linear:
    """The scalar head (`score` in Llama/Qwen/Mistral-style classes). Under peft's `modules_to_save` (a LoRA
    reward model trains its head whole) the head is a wrapper holding the original and a trained copy: the
    active copy, the one that runs, is returned."""
    head = getattr(model, "score", None) or getattr(model, "classifier", None)
    copies = getattr(head, "modules_to_save", None)  # peft's ModulesToSaveWrapper (duck-typed: no peft import)
    active = getattr(head, "active_adapters", None)
    if isinstance(copies, nn.ModuleDict) and active:
        head = copies[active[0]]
    if not isinstance(head, nn.Linear) or head.out_features != 1:
        raise ModelError(f"{type(model).__name__} has no scalar linear head (score/classifier with 1 output)")
    return head


def init_head(model: nn.Module, seed: int = 0) -> None:
    """Head weights ~ N(0, std = 1/(hidden+1)), as the official code initialises its v_head."""
    head = head_of(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        weight = torch.randn(head.weight.shape, generator=generator) / (head.in_features + 1)
        head.weight.copy_(weight.to(head.weight.dtype))
        if head.bias is not None:
            head.bias.zero_()


def load_model(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    trust_remote_code: bool = False,
    tokenizer: Any = None,
    strict: bool = False,
    attn_implementation: str = "auto",
    device: str = "cpu",
    training: bool = False,
    quantization: Any = None,
) -> tuple[Any, Any]:
    """(model, tokenizer) from a sequence-classification checkpoint directory, safetensors only (a Hugging Face
    Hub id is resolved to one by `cheems.hub.resolve_model` where the command starts).

    `tokenizer`: the checkpoint's tokenizer when the caller has it already (loading one holds the GIL for
    seconds, which a serving process's calls feel). `strict`: refuse a checkpoint that lacks weights the model
    needs (a chat model's directory has no reward head: transformers would make one up at random, N(0,
    initializer_range) from torch's generator, as `fresh_head` does). `attn_implementation`: a name
    `cheems.attention.resolve_attention` takes, resolved for `device` (where the caller will run the model; it is
    loaded on the CPU) and `training` (gradients): one the device cannot run is refused (ConfigError) before
    anything loads. `quantization`: a transformers quantization config (QLoRA's 4-bit base): the model is then
    quantised while it loads, straight onto `device`."""
    from transformers import AutoModelForSequenceClassification

    quiet_transformers()
    directory, attention = _checked(path, attn_implementation, device, training)
    placed = {} if quantization is None else {"quantization_config": quantization, "device_map": {"": device}}
    model, info = AutoModelForSequenceClassification.from_pretrained(
        directory,
        dtype=dtype,
        attn_implementation=attention,
        use_safetensors=True,
        trust_remote_code=trust_remote_code,
        num_labels=1,
        output_loading_info=True,
        **placed,
    )
    absent = sorted({*info.get("missing_keys", ()), *(str(k[0]) for k in info.get("mismatched_keys", ()))})
    if strict and absent:
        raise ModelError(
            f"{directory}: not a trained reward model: weights missing from it would be random "
            f"({', '.join(absent[:4])}{', ...' if len(absent) > 4 else ''})"
        )
    return model, _finish(model, directory, tokenizer, trust_remote_code)


def empty_model(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    trust_remote_code: bool = False,
    attn_implementation: str = "auto",
    device: str = "cpu",
    training: bool = False,
    tokenizer: Any = None,
) -> tuple[Any, Any]:
    """(model, tokenizer) as `load_model` gives them, but the model built on the meta device from the
    checkpoint's config: no memory, no weights read (the trainer's sharded loader fills it)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    quiet_transformers()
    directory, attention = _checked(path, attn_implementation, device, training)
    config = AutoConfig.from_pretrained(directory, num_labels=1, trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        model = AutoModelForSequenceClassification.from_config(
            config, dtype=dtype, attn_implementation=attention, trust_remote_code=trust_remote_code
        )
    return model, _finish(model, directory, tokenizer, trust_remote_code)


def fresh_head(model: nn.Module, seed: int) -> torch.Tensor:
    """The head a checkpoint without one (a chat model's) gets: transformers' initialisation of a missing
    linear, N(0, initializer_range), drawn first from a generator seeded `seed` (what `load_model` gives after
    `torch.manual_seed(seed)`), as a full CPU tensor."""
    head = head_of(model)
    generator = torch.Generator().manual_seed(seed)
    std = float(getattr(model.config, "initializer_range", 0.02))
    return torch.empty(head.weight.shape, dtype=torch.float32).normal_(0.0, std, generator=generator)


def _checked(path: str | Path, attn_implementation: str, device: str, training: bool) -> tuple[Path, str]:
    """The checkpoint directory (refused without safetensors) and the attention kernel resolved for `device`."""
    attention = resolve_attention(attn_implementation, device, training)
    directory = Path(path)
    if not directory.is_dir():  # a Hub id is resolved once, where the command starts (`cheems.hub.resolve_model`)
        raise ModelError(f"{directory}: not a directory (a Hugging Face Hub id goes through cheems.hub.resolve_model)")
    if not any(directory.glob("*.safetensors")):
        raise ModelError(f"{directory}: no *.safetensors weights (pickled .bin checkpoints are refused)")
    return directory, attention


def _finish(model: Any, directory: Path, tokenizer: Any, trust_remote_code: bool) -> Any:
    """The tokenizer (loaded unless given); the model's pad token set from it; its scalar head checked."""
    from transformers import AutoTokenizer

    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(directory, trust_remote_code=trust_remote_code)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    head_of(model)
    return tokenizer


def save_model(
    model: Any,
    tokenizer: Any,
    out: str | Path,
    metadata: dict[str, Any] | None = None,
    state_dict: dict[str, Any] | None = None,
) -> Path:
    """Save weights (safetensors), config, tokenizer and chat template; `metadata` -> cheems_metadata.json.

    The config and tokenizer are made self-describing first (in place; see `describe_reward_model`).

    `state_dict` overrides the model's own (a full state dict gathered from DDP/FSDP ranks).
    """
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    describe_reward_model(model.config, tokenizer)
    model.save_pretrained(directory, state_dict=state_dict, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    if metadata is not None:
        write_metadata(directory, metadata)
    return directory


def write_metadata(directory: Path, metadata: dict[str, Any]) -> None:
    """DIR/cheems_metadata.json: how the model was made (training config, data digest, final evaluation)."""
    text = json.dumps(metadata, ensure_ascii=False, indent=2, default=str)
    (directory / "cheems_metadata.json").write_text(text + "\n", encoding="utf-8")


def describe_reward_model(config: Any, tokenizer: Any) -> None:
    """Make `config` and `tokenizer` tell standard Hugging Face paths how we score (in place, idempotent).

    problem_type "regression" makes `pipeline("text-classification")` return the raw head value (with
    num_labels=1 and no problem_type it applies a sigmoid); the chat template renders exactly the text
    `cheems.chat.render` tokenizes, so `apply_chat_template(messages)` feeds the reward's token last.
    """
    config.problem_type = "regression"
    config.id2label = {0: REWARD_LABEL}
    config.label2id = {REWARD_LABEL: 0}
    if config.pad_token_id is None:
        config.pad_token_id = tokenizer.pad_token_id
    template = tokenizer.chat_template
    if isinstance(template, dict):
        tokenizer.chat_template = {name: stripped_template(t) for name, t in template.items()}
    elif template is not None:
        tokenizer.chat_template = stripped_template(template)


def stripped_template(template: str) -> str:
    """`template` rendering stripped of surrounding whitespace unless a generation prompt is asked for.

    Jinja's `trim` is Python's `str.strip`, so for any conversation the rendering equals
    `cheems.chat.render` of the old template (training and scoring are unchanged); e.g. ChatML's
    trailing newline after the final `<|im_end|>` goes. The `{{ '' }}` guards keep the original's
    leading and trailing whitespace away from trim_blocks/lstrip_blocks.
    """
    if template.startswith(STRIPPED_MARK):
        return template
    return (
        STRIPPED_MARK
        + "{%- set cheems_rendered %}{{ '' }}"
        + template
        + "{{ '' }}{% endset -%}"
        + "{%- if add_generation_prompt %}{{ cheems_rendered }}{% else %}{{ cheems_rendered | trim }}{% endif -%}"
    )


def describe_checkpoint(path: str | Path) -> Path:
    """Rewrite an existing checkpoint directory's config and tokenizer self-describing; weights untouched."""
    from transformers import AutoConfig, AutoTokenizer

    quiet_transformers()
    directory = Path(path)
    config = AutoConfig.from_pretrained(directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    describe_reward_model(config, tokenizer)
    config.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def convert_v_head(source: str | Path, out: str | Path) -> Path:
    """Convert an official CheemsRM-style checkpoint (causal LM + `v_head.weight`) to sequence classification."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    src = Path(source)
    files = sorted(src.glob("*.safetensors"))
    if not files:
        raise ModelError(f"{src}: no *.safetensors weights (pickled .bin checkpoints are refused)")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(file))
    v_head = state.pop("v_head.weight", None)
    if v_head is None:
        raise ModelError(f"{src}: no v_head.weight; not a CheemsRM-style checkpoint")
    config = AutoConfig.from_pretrained(src, num_labels=1)
    model = AutoModelForSequenceClassification.from_config(config)
    prefix = model.base_model_prefix
    backbone = {k.removeprefix(f"{prefix}."): v for k, v in state.items() if k.startswith(f"{prefix}.")}
    missing, unexpected = model.base_model.load_state_dict(backbone, strict=False)
    if missing or unexpected:
        raise ModelError(
            f"{src}: backbone weights do not match the config (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    with torch.no_grad():
        head_of(model).weight.copy_(v_head.reshape(1, -1))
    tokenizer = AutoTokenizer.from_pretrained(src)
    model.config.pad_token_id = model.config.pad_token_id or tokenizer.pad_token_id
    return save_model(model, tokenizer, out, {"converted_from": str(src), "format": "cheemsrm-v_head"})
