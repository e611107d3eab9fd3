"""The check a directory passes before it is registered: a reward model that loads strictly and scores.

check_checkpoint("/models/qwen-rm")   # its two rewards of PROBE, or ModelError saying what is wrong
"""

from __future__ import annotations

import math
from pathlib import Path

from cheems.errors import ModelError

PROBE = ("你好，请介绍一下你自己。", ["我是一个乐于助人的助手。", "不知道。"])  # the prompt every new model must score


def check_checkpoint(path: str) -> list[float]:
    """Load `path` as a sequence-classification reward model and score PROBE with it: its two rewards.

    ModelError (nothing registered) when the directory is missing, is not a standard
    AutoModelForSequenceClassification with one output, or gives a reward that is not a finite number."""
    import torch

    from cheems.chat import Conversation, Truncation, encode_many
    from cheems.forward import forward_rewards
    from cheems.model import load_model

    directory = Path(path)
    if not directory.is_dir():
        raise ModelError(f"{path}: not a directory")
    if not (directory / "config.json").is_file():
        raise ModelError(f"{path}: no config.json; not a Hugging Face model directory")
    try:
        model, tokenizer = load_model(directory, strict=True)
    except ModelError:
        raise
    except Exception as e:  # transformers raises many kinds for a directory that is not a model
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"{path}: does not load as a sequence-classification reward model: {why}") from None
    if getattr(model.config, "num_labels", 1) != 1:
        raise ModelError(f"{path}: {model.config.num_labels} outputs; a reward model has one (num_labels=1)")
    conversations = [Conversation(PROBE[0], response) for response in PROBE[1]]
    sequences = [e.input_ids for e in encode_many(tokenizer, conversations, 256, Truncation.LEFT)]
    with torch.no_grad():
        rewards = forward_rewards(model.eval(), sequences).float().tolist()
    if len(rewards) != len(PROBE[1]) or not all(math.isfinite(r) for r in rewards):
        raise ModelError(f"{path}: scored the probe prompt with {rewards}: not one finite reward per response")
    return [float(r) for r in rewards]
