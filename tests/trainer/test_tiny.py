"""trainer.tiny's config and model: the defaults of the tiny test model, and the shape options the benchmarks use."""

from __future__ import annotations

import pytest

from trainer.tiny import build_model, tiny_config


class Vocabulary:
    """What tiny_config reads of a tokenizer (the real one takes seconds to build)."""

    pad_token_id = 0
    eos_token_id = 1

    def __len__(self) -> int:
        return 256


def test_defaults_are_unchanged() -> None:
    config = tiny_config(Vocabulary())
    assert (config.hidden_size, config.num_hidden_layers, config.intermediate_size) == (64, 2, 128)
    assert (config.num_attention_heads, config.num_key_value_heads, config.vocab_size) == (4, 2, 256)
    assert tiny_config(Vocabulary(), 32, 1, num_labels=1).num_labels == 1  # positional shape, extra fields


def test_heads_kv_heads_and_intermediate_reach_the_config_and_the_model() -> None:
    config = tiny_config(Vocabulary(), 56, 1, heads=14, kv_heads=2, intermediate=304)
    assert (config.num_attention_heads, config.num_key_value_heads, config.intermediate_size) == (14, 2, 304)
    model = build_model(Vocabulary(), 56, 1, 3, heads=14, kv_heads=2, intermediate=304)  # seed stays 4th
    assert model.model.layers[0].mlp.up_proj.out_features == 304
    assert model.model.layers[0].self_attn.k_proj.out_features == 2 * 56 // 14
    assert model.config.num_labels == 1


@pytest.mark.parametrize(
    ("shape", "error"),
    [
        ({"hidden_size": 30, "heads": 4}, "hidden_size 30 is not a multiple of heads 4"),
        ({"hidden_size": 48, "heads": 6, "kv_heads": 4}, "heads 6 is not a multiple of kv_heads 4"),
    ],
)
def test_a_shape_attention_cannot_split_is_refused_naming_it(shape: dict[str, int], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        tiny_config(Vocabulary(), **shape)
