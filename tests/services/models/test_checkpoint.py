"""The check a directory passes before it is registered: a real tiny RM passes; a missing directory, one without
config.json, a chat model without a reward head, a two-output head and garbage are refused, naming the path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from cheems.errors import ModelError
from services.models.checkpoint import check_checkpoint


def test_a_real_reward_model_passes_the_check_and_others_are_refused(
    tiny_checkpoint: Callable[..., Path], tmp_path: Path
) -> None:
    rewards = check_checkpoint(str(tiny_checkpoint()))
    assert len(rewards) == 2 and rewards[0] != rewards[1]
    with pytest.raises(ModelError, match="not a directory"):
        check_checkpoint(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match=r"no config\.json"):
        check_checkpoint(str(tmp_path / "empty"))
    from transformers import Qwen2ForCausalLM, Qwen2ForSequenceClassification

    from trainer.tiny import build_tokenizer, tiny_config

    tokenizer = build_tokenizer()
    chat_model = tmp_path / "chat-model"  # a causal LM: no reward head, transformers would make one up
    Qwen2ForCausalLM(tiny_config(tokenizer, hidden_size=32)).save_pretrained(chat_model)
    two_outputs = tmp_path / "two-outputs"
    Qwen2ForSequenceClassification(tiny_config(tokenizer, hidden_size=32, num_labels=2)).save_pretrained(two_outputs)
    for folder in (chat_model, two_outputs):
        tokenizer.save_pretrained(folder)
    with pytest.raises(ModelError, match=r"chat-model: not a trained reward model: .*score\.weight"):
        check_checkpoint(str(chat_model))
    with pytest.raises(ModelError, match="two-outputs: does not load"):
        check_checkpoint(str(two_outputs))
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "config.json").write_text("{不是 JSON")
    with pytest.raises(ModelError, match="garbage"):
        check_checkpoint(str(tmp_path / "garbage"))
