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
import socket
import sysconfig
import tempfile
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from cheems.forward import can_share, score_in_groups
from services.scorer.triton import processes

log = logging.getLogger(__name__)


def make_infer(model: Any, device: str, max_batch: int, share: bool = False) -> Callable[..., dict[str, np.ndarray]]:
    """Triton's infer function over the merged batch; `share`: pack sequences with a common prefix."""
    from pytriton.decorators import batch

    # PyTriton may call this from several threads at once; concurrent forwards make torch's thread
    # pools fight over the cores (measured here: 25x slower per forward), so forwards take turns and
    # concurrency is turned into batch size by Triton's dynamic batcher instead.
    lock = threading.Lock()

    @batch
    def infer(input_ids: np.ndarray, lengths: np.ndarray) -> dict[str, np.ndarray]:
        sequences = [row[: int(n)].tolist() for row, n in zip(input_ids, lengths[:, 0], strict=True)]
        with lock:
            values = score_in_groups(model, sequences, max_batch, device, share=share)
        return {"rewards": np.asarray(values, dtype=np.float32)[:, None]}

    return infer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def use_running_libpython() -> None:
    """Under pyenv, Triton's Python backend stub can load the system libpython and crash
    (`_recursion_count`); putting this interpreter's LIBDIR first makes it load the right one."""
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    current = os.environ.get("LD_LIBRARY_PATH", "")
    if libdir and not current.startswith(libdir):
        os.environ["LD_LIBRARY_PATH"] = f"{libdir}:{current}" if current else libdir


class TritonHost:
    """Starts tritonserver (PyTriton) with the RM bound; `url` is its gRPC endpoint.

    `start` again after a crash brings up a new server (new ports) with the model already loaded.
    `stop` leaves no process behind: what is left of the server's tree after PyTriton's own stop
    (Python-backend stubs orphaned by a killed server) is killed."""

    def __init__(
        self,
        model_dir: str,
        name: str,
        device: str,
        max_batch_size: int,
        queue_delay_us: int,
        tokenizer: Any = None,
        share: bool = False,
    ) -> None:
        """`tokenizer`: the checkpoint's, if loaded already (it is needed only while loading the model);
        `share`: prefix sharing in the infer function (where the model's attention takes it)."""
        self.model_dir, self.name, self.device, self.share = model_dir, name, device, share
        self._tokenizer = tokenizer
        self.max_batch_size, self.queue_delay_us = max_batch_size, queue_delay_us
        self.triton: Any = None
        self.url = ""
        self.log_file = ""
        self._model: Any = None
        self._seen: set[processes.Proc] = set()

    @property
    def prefix_sharing(self) -> bool:
        """Whether the served model packs sequences that share a prefix (known once started)."""
        return self.share and self._model is not None and can_share(self._model)

    @property
    def model_config(self) -> Any:
        """The transformers config of the served model (None before the first start)."""
        return None if self._model is None else self._model.config

    @property
    def pid(self) -> int | None:
        """The tritonserver process id (PyTriton keeps it in private attributes; None if not found)."""
        server = getattr(self.triton, "_triton_server", None)
        return getattr(getattr(server, "_tritonserver_running_cmd", None), "pid", None)

    def alive(self) -> bool:
        return self.triton is not None and bool(self.triton.is_alive())

    def note_processes(self) -> None:
        """Remember tritonserver's process tree (called while it runs), to clean up after a crash."""
        if (pid := self.pid) is not None:
            self._seen.update(processes.tree(pid))

    def restart(self) -> str:
        self.stop()
        return self.start()

    def start(self) -> str:
        from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
        from pytriton.triton import Triton, TritonConfig

        from cheems.model import load_model

        logging.getLogger("pytriton").setLevel(logging.WARNING)
        use_running_libpython()
        if self._model is None:
            self._model, _ = load_model(self.model_dir, tokenizer=self._tokenizer)
            self._tokenizer = None
            self._model.to(self.device).eval()
        model = self._model
        grpc_port = free_port()
        self.log_file = os.path.join(tempfile.gettempdir(), f"cheems-triton-{grpc_port}.log")
        config = TritonConfig(
            grpc_address="127.0.0.1",
            http_address="127.0.0.1",
            grpc_port=grpc_port,
            http_port=free_port(),
            metrics_port=free_port(),
            log_verbose=0,
            log_file=self.log_file,
            exit_timeout_secs=5,
        )
        self.triton = Triton(config=config)
        self.triton.bind(
            model_name=self.name,
            infer_func=make_infer(model, self.device, self.max_batch_size, self.prefix_sharing),
            inputs=[
                Tensor(name="input_ids", dtype=np.int64, shape=(-1,)),
                Tensor(name="lengths", dtype=np.int64, shape=(1,)),
            ],
            outputs=[Tensor(name="rewards", dtype=np.float32, shape=(1,))],
            config=ModelConfig(
                max_batch_size=self.max_batch_size,
                batcher=DynamicBatcher(max_queue_delay_microseconds=self.queue_delay_us),
            ),
            strict=True,
        )
        self.triton.run()
        self.note_processes()
        self.url = f"127.0.0.1:{grpc_port}"
        log.info("Triton serving %s at %s (server log: %s)", self.name, self.url, self.log_file)
        return self.url

    def stop(self) -> None:
        if self.triton is not None:
            self.note_processes()
            try:
                self.triton.stop()
            except Exception as e:  # a server that died hard can make PyTriton's clean-up fail
                log.warning("stopping Triton: %s", e)
            self.triton = None
        for p in processes.kill(sorted(self._seen, key=lambda p: p.pid)):
            log.warning("killed leftover Triton process %d", p.pid)
        self._seen.clear()
