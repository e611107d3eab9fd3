"""The reward model as a Triton Python-backend model, for a stock Triton server.

`cheems export-triton` copies this file as REPO/<name>/1/model.py next to the checkpoint
(`repository`). It runs inside Triton's Python stub, where `triton_python_backend_utils`
exists; its signature is `model`'s (input_ids + lengths in, rewards out), so the scorer
reaches it with `--triton-url`. The image needs this project installed so the imports resolve.
The config's `prefix_sharing` parameter ("on"/"off") packs the sequences of each prompt, across
the requests Triton batched together (`cheems.forward.score_in_groups`); `dtype` is what the model computes
in (refused at load when the device cannot run it) and `max_batch_tokens` bounds one forward's tokens.
"""

import json
import os
import sys
from typing import Any

# Triton's Python stub ignores PYTHONPATH; honour it (first, as Python would) so a virtualenv can
# hold the project and its numpy.
sys.path[:0] = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]

import numpy as np  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402

from cheems.forward import MAX_BATCH_TOKENS, can_share, score_in_groups  # noqa: E402
from cheems.model import load_model  # noqa: E402
from cheems.precision import dtype_name, resolve_dtype  # noqa: E402


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        parameters = {k: v["string_value"] for k, v in config["parameters"].items()}
        self.device = parameters["device"]
        share = parameters["prefix_sharing"] == "on"  # written with this file
        dtype = resolve_dtype(parameters.get("dtype", "float32"), self.device)  # absent: exported before dtypes
        self.max_tokens = int(parameters.get("max_batch_tokens", MAX_BATCH_TOKENS))
        self.max_batch = int(config["max_batch_size"])
        here = os.path.join(args["model_repository"], args["model_version"], "model")
        self.model, _ = load_model(here, dtype=dtype)
        self.model.to(self.device).eval()
        self.share = share and can_share(self.model)
        sharing = "on" if self.share else "off"
        pb_utils.Logger.log_info(f"{args['model_name']}: {dtype_name(dtype)}, prefix sharing {sharing}")

    def execute(self, requests: list[Any]) -> list[Any]:
        sequences: list[list[int]] = []
        sizes = []
        for request in requests:  # every request Triton batched together, scored in one length-grouped pass
            ids = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy()
            lengths = pb_utils.get_input_tensor_by_name(request, "lengths").as_numpy()[:, 0]
            sequences += [row[: int(n)].tolist() for row, n in zip(ids, lengths, strict=True)]
            sizes.append(len(lengths))
        scores = score_in_groups(self.model, sequences, self.max_batch, self.device, self.share, self.max_tokens)
        values = np.asarray(scores, dtype=np.float32)
        replies, start = [], 0
        for size in sizes:
            rewards = pb_utils.Tensor("rewards", values[start : start + size].reshape(-1, 1).copy())
            replies.append(pb_utils.InferenceResponse(output_tensors=[rewards]))
            start += size
        return replies
