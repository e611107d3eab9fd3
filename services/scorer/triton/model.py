"""The reward model served by a real Triton Inference Server, started through PyTriton.

Signature (also what an external Triton must serve): inputs `input_ids` INT64 [-1] (right-padded)
and `lengths` INT64 [1]; output `rewards` FP32 [1]; batch dimension first. Triton's dynamic
batcher merges concurrent requests of equal padded length (`max_batch_size`, a short queue
delay); the infer function then re-groups the merged batch by true length to limit padding and,
with prefix sharing, packs the sequences of each prompt, from whichever requests they came
(`cheems.forward.score_in_groups`).
"""

from __future__ import annotations

import logging
import os
import sysconfig
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from cheems.execution import Execution

log = logging.getLogger(__name__)


def make_infer(model: Any, execution: Execution) -> Callable[..., dict[str, np.ndarray]]:
    """Triton's infer function over the merged batch, on `execution`'s device, in forwards within its limits;
    `execution.share`: pack sequences with a common prefix."""
    from pytriton.decorators import batch

    # PyTriton may call this from several threads at once; concurrent forwards make torch's thread
    # pools fight over the cores (measured here: 25x slower per forward), so forwards take turns and
    # concurrency is turned into batch size by Triton's dynamic batcher instead.
    lock = threading.Lock()

    @batch
    def infer(input_ids: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
        sequences = [row[: int(n)].tolist() for row, n in zip(input_ids, lengths[:, 0], strict=True)]
        with lock:
            values = execution.score(model, sequences)
        return {"rewards": np.asarray(values, dtype=np.float32)[:, None]}

    return infer


def use_running_libpython() -> None:
    """Under pyenv, Triton's Python backend stub can load the system libpython and crash
    (`_recursion_count`); putting this interpreter's LIBDIR first makes it load the right one."""
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    current = os.environ.get("LD_LIBRARY_PATH", "")
    if libdir and not current.startswith(libdir):
        os.environ["LD_LIBRARY_PATH"] = f"{libdir}:{current}" if current else libdir
