"""Export a checkpoint as a Triton model repository, for the official Triton server image.

    cheems export-triton --model out/train-tiny/model --out out/triton-repo [--prefix-sharing off] \
        [--device cuda --dtype auto]

Layout: REPO/<name>/config.pbtxt, REPO/<name>/1/model.py (a copy of `python_model`) and
REPO/<name>/1/model/ (a copy of the checkpoint, made self-describing like every checkpoint we write:
see `cheems.model.describe_reward_model`; the source is left as it is). The model has the signature of
`model`, so the scorer reaches it with `--triton-url`. The Triton image needs this project
installed (`pip install .`) so `model.py` can import it; `cheems serve` without `--triton-url` needs
none of this (PyTriton). The model config's `prefix_sharing` ("on" or "off") and `dtype` parameters are read
by the model (`python_model`) and reported by the scorer in GetModelInfo; `max_batch_tokens` bounds the tokens
of one forward, as `cheems serve --max-batch-tokens` does. The dtype is written resolved: `auto` is bfloat16 for
a CUDA device (Ampere and later; give float16 for an older card) and float32 for the CPU. A dtype the card
cannot run fails the model's load in Triton with a message naming it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from cheems.errors import ModelError

CONFIG = """name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [
  {{ name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] }},
  {{ name: "lengths" data_type: TYPE_INT64 dims: [ 1 ] }}
]
output [
  {{ name: "rewards" data_type: TYPE_FP32 dims: [ 1 ] }}
]
dynamic_batching {{ max_queue_delay_microseconds: {queue_delay_us} }}
instance_group [ {{ kind: {kind} count: 1 }} ]
parameters {{ key: "device" value: {{ string_value: "{device}" }} }}
parameters {{ key: "prefix_sharing" value: {{ string_value: "{prefix_sharing}" }} }}
parameters {{ key: "dtype" value: {{ string_value: "{dtype}" }} }}
parameters {{ key: "max_batch_tokens" value: {{ string_value: "{max_batch_tokens}" }} }}
"""
# Copied, never imported here: it imports triton_python_backend_utils, which exists only inside Triton.
MODEL_PY = Path(__file__).with_name("python_model.py")


def export_triton_repository(
    model_dir: str | Path,
    out: str | Path,
    name: str = "cheems_rm",
    max_batch_size: int = 64,
    queue_delay_us: int = 2000,
    device: str = "cpu",
    prefix_sharing: bool = True,
    dtype: str = "auto",
    max_batch_tokens: int = 32768,
) -> Path:
    """Write the repository; returns REPO/<name>."""
    from cheems.model import describe_checkpoint  # torch and transformers: only when exporting
    from cheems.precision import planned_dtype

    source = Path(model_dir)
    dtype = planned_dtype(dtype, device)
    if not any(source.glob("*.safetensors")):
        raise ModelError(f"{source}: no *.safetensors weights to export")
    target = Path(out) / name
    version = target / "1"
    if version.exists():
        shutil.rmtree(version)
    version.mkdir(parents=True)
    kind = "KIND_GPU" if device.startswith("cuda") else "KIND_CPU"
    (target / "config.pbtxt").write_text(
        CONFIG.format(
            name=name,
            max_batch_size=max_batch_size,
            queue_delay_us=queue_delay_us,
            kind=kind,
            device=device,
            prefix_sharing="on" if prefix_sharing else "off",
            dtype=dtype,
            max_batch_tokens=max_batch_tokens,
        ),
        encoding="utf-8",
    )
    shutil.copyfile(MODEL_PY, version / "model.py")
    shutil.copytree(source, version / "model")
    describe_checkpoint(version / "model")
    return target
