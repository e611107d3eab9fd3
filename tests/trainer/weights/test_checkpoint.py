"""Checkpoints (trainer.weights.checkpoint): a run refuses to resume the other format. Saving and resuming
both formats runs end to end in test_train (one process: full; torchrun with FSDP: sharded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cheems.errors import ConfigError
from trainer.weights import checkpoint


def test_a_checkpoint_of_the_other_format_is_refused_before_anything_loads(tmp_path: Path) -> None:
    (tmp_path / checkpoint.POSITION).write_text(json.dumps({"step": 4, "epoch": 0, "batch": 4, "format": "sharded"}))
    with pytest.raises(ConfigError, match=r"is a sharded checkpoint .* resume with fsdp=true") as caught:
        checkpoint.load(tmp_path, None, None, None, sharded=False)
    assert "\n" not in str(caught.value)
    (tmp_path / checkpoint.POSITION).write_text(json.dumps({"step": 4, "epoch": 0, "batch": 4}))  # written before
    with pytest.raises(ConfigError, match=r"is a full checkpoint .* resume with fsdp=false"):
        checkpoint.load(tmp_path, None, None, None, sharded=True)
