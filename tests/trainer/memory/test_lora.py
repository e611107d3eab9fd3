"""The plan's LoRA and QLoRA rows against real tensors: peft's adapters on a tiny Qwen2 RM (trainable count, the
fp32 states after an AdamW step, the frozen base), the adapters' activations against what autograd saves, the
NF4 arithmetic and transformers' rule for what 4-bit loading leaves unquantised; the 72B figures."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from cheems.errors import ConfigError
from trainer.memory.count import count_shape
from trainer.memory.estimate import PlanSetup, estimate, layer_activation_bytes
from trainer.memory.lora import adapter_activation_bytes, lora_counts, nf4_bytes, qlora_base_bytes
from trainer.memory.shapes import QWEN25, _qwen2_config

RANK = 4


def tiny_config() -> Any:
    from transformers import Qwen2Config

    config = Qwen2Config(
        hidden_size=128, intermediate_size=352, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=2
    )
    config.vocab_size, config.num_labels, config.pad_token_id = 1000, 1, 0
    config._attn_implementation = "sdpa"
    return config


def with_lora(config: Any, targets: list[str], dropout: float = 0.0, rank: int = RANK) -> Any:
    """The bf16 RM with peft's LoRA on `targets` (the plan's rule: empty = every linear of the decoder), the head
    in modules_to_save, the trainable parameters in fp32."""
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(config).to(torch.bfloat16)
    decoder = [f"model.{n}" for n, m in model.model.named_modules() if isinstance(m, torch.nn.Linear)]
    lora = LoraConfig(
        task_type=TaskType.SEQ_CLS,
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=dropout,
        target_modules=targets or decoder,
        modules_to_save=["score"],
    )
    model = get_peft_model(model, lora)
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    return model


def size(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.parametrize("targets", [[], ["q_proj", "v_proj"], ["mlp.down_proj"]])
def test_the_adapter_rows_equal_peft_tensors_after_a_step(targets: list[str]) -> None:
    config = tiny_config()
    shape = count_shape(config)
    model = with_lora(config, targets)
    trainable = [p for p in model.parameters() if p.requires_grad]
    frozen = [p for p in model.parameters() if not p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-3)
    with torch.autocast("cpu", torch.bfloat16):  # a bf16 base and fp32 trainables: the one-process path
        model(input_ids=torch.tensor([[1, 2, 3, 4]])).logits.sum().backward()
    optimizer.step()

    adapters = lora_counts(shape, RANK, targets)
    assert adapters.trainable == sum(p.numel() for p in trainable)
    assert adapters.tensors == len(trainable)
    plan = estimate(shape, PlanSetup(1, False, True, False, False, 8, lora_rank=RANK, lora_targets=tuple(targets)))
    assert plan.row("frozen base") == size(frozen)  # the whole bf16 model, the head's frozen original included
    assert plan.row("parameters") == size(trainable)
    assert plan.row("gradients") == size([p.grad for p in trainable])
    state = [t for s in optimizer.state.values() for t in s.values()]
    assert plan.row("optimizer") == size(state) and len(state) == 3 * len(trainable)


def test_targets_that_match_no_linear_are_named() -> None:
    with pytest.raises(ConfigError, match=r"lora_targets \['lm_head'\] match no linear of the decoder"):
        lora_counts(count_shape(tiny_config()), RANK, ["lm_head"])


def saved_per_layer_token(model: Any, autocast: bool) -> float:
    """Bytes autograd saves per token for one decoder layer, weights excluded: two layers minus one, at two
    lengths (what does not grow with the tokens, such as autocast's weight copies, cancels)."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    decoder = model.base_model.model.model

    def saved(tokens: int) -> int:
        seen: dict[int, int] = {}

        def keep(t: torch.Tensor) -> torch.Tensor:
            if t.untyped_storage().data_ptr() not in weights:
                seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        ids = torch.randint(1, 1000, (1, tokens))
        hooks = torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t)
        with hooks, torch.autocast("cpu", torch.bfloat16, enabled=autocast):
            model(input_ids=ids)
        return sum(seen.values())

    def per_token() -> float:
        return (saved(400) - saved(200)) / 200

    two = per_token()
    decoder.layers = decoder.layers[:1]
    return two - per_token()


@pytest.mark.parametrize("dropout", [0.0, 0.1])
@pytest.mark.parametrize("autocast", [False, True])  # bf16 adapters as FSDP gathers them; fp32 ones under autocast
def test_the_adapter_activations_match_what_autograd_saves(autocast: bool, dropout: float) -> None:
    config = tiny_config()
    shape = count_shape(config)
    model = with_lora(config, [], dropout, rank=16)
    if not autocast:
        model.to(torch.bfloat16)
    model.train()
    measured = saved_per_layer_token(model, autocast)
    adapters = lora_counts(shape, 16)
    planned = layer_activation_bytes(shape, bf16=True, fsdp=True)
    planned += adapter_activation_bytes(shape, adapters, autocast, dropout > 0)
    assert planned == pytest.approx(measured, rel=0.05)


def test_nf4_is_4_127_bits_an_element_with_double_quantisation() -> None:
    n = 8192 * 29568
    bits = 8 * nf4_bytes(n) / n
    assert bits == pytest.approx(4 + 8 / 64 + 32 / (64 * 256), abs=1e-5)  # 0.5 B, uint8 absmax, fp32 per 256
    assert nf4_bytes(65) == 33 + 2 + 4 + 68  # a partial block still has its absmax


def test_4bit_loading_quantises_the_decoder_linears_and_leaves_the_head() -> None:
    """transformers' rule (`get_keys_to_not_convert`) on a sequence-classification model: only the head is kept
    out of NF4 among the linears; embeddings and norms are no nn.Linear and stay bf16 too."""
    from transformers import AutoModelForSequenceClassification
    from transformers.quantizers.base import get_keys_to_not_convert

    config = tiny_config()
    model = AutoModelForSequenceClassification.from_config(config)
    assert get_keys_to_not_convert(model) == ["score"]
    shape = count_shape(config)
    linears = [m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "score"]
    kept = [p for p in model.parameters() if all(p is not m.weight for m in linears)]
    expected = sum(nf4_bytes(m.weight.numel()) for m in linears) + 2 * sum(p.numel() for p in kept)
    assert qlora_base_bytes(shape) == expected


def test_the_72b_figures_of_the_issue() -> None:
    shape = count_shape(_qwen2_config(QWEN25["72"]))
    full = 16 * shape.parameters + 4 * shape.tensors  # fp32 weights, gradients, AdamW
    adapters = lora_counts(shape, 16)
    state = 16 * adapters.trainable + 4 * adapters.tensors
    assert 1.1e12 < full < 1.2e12  # ~1.14 TB (the issue's 1.16 counts the causal LM's 1.2B lm_head)
    assert len(adapters.targets) == 80 * 7 and 3.3e9 < state < 3.5e9  # ~3.4 GB of trainable state
    assert 1.4e11 < 2 * shape.parameters < 1.45e11  # the frozen bf16 base
    assert 3.8e10 < qlora_base_bytes(shape) < 4.0e10  # the NF4 base, ~39 GB
