"""The benchmarks' model options: defaults, refusals, and the shape reaching the model's config."""

from __future__ import annotations

import argparse

import pytest
from model_options import add_model_options, describe_dtype, describe_shape, random_model, shape_of


def parse(argv: list[str], dtype: bool = True) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_model_options(parser, dtype=dtype)
    return parser.parse_args(argv)


def test_defaults_are_the_cpu_model_of_before() -> None:
    args = parse([])
    assert (args.device, args.dtype) == ("cpu", "auto")
    assert shape_of(args) == {"hidden_size": 256, "layers": 4, "heads": 4, "kv_heads": 2, "intermediate": None}
    assert describe_shape(args) == "Qwen2 hidden 256, 4 layers, 4 heads (2 KV), intermediate 512"


def test_a_dtype_outside_the_choices_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["--dtype", "bf16"])
    assert "invalid choice: 'bf16'" in capsys.readouterr().err


def test_without_dtype_there_is_no_dtype_option() -> None:
    with pytest.raises(SystemExit):
        parse(["--dtype", "float32"], dtype=False)


def test_the_shape_reaches_the_model_config(tokenizer: object) -> None:
    args = parse(["--hidden", "48", "--layers", "1", "--heads", "6", "--kv-heads", "3", "--intermediate", "80"])
    config = random_model(args, tokenizer).config
    assert (config.hidden_size, config.num_hidden_layers, config.intermediate_size) == (48, 1, 80)
    assert (config.num_attention_heads, config.num_key_value_heads, config.num_labels) == (6, 3, 1)


def test_auto_resolves_as_the_scorer_does_on_the_cpu() -> None:
    assert describe_dtype("auto", "cpu") == "auto (float32)"
    assert describe_dtype("bfloat16", "cpu") == "bfloat16"
