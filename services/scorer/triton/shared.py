"""One Triton Inference Server for every model the scorer serves, models loaded and unloaded while it runs.

    triton = SharedTriton(Execution(device="cpu", max_sequences=64), queue_delay_us=500)
    url = triton.add("cheems_rm-1", model, share=False, on_restart=backend.reconnect)  # bound, loaded, served
    triton.remove("cheems_rm-1")            # unloaded from Triton; the server stops with its last model

PyTriton starts tritonserver with explicit model control: a model bound while the server runs is loaded
through Triton's repository API (`load`), and `remove` unloads it (`unload`) and stops its proxy. A model
is therefore a few hundred milliseconds to add, instead of a whole server's start (seconds of both cores).
When tritonserver dies, `restart` brings up a new one (new ports) with every model bound, and tells each
model's backend the new address; what is left of the dead server's process tree is killed.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from cheems import processes
from cheems.credentials import private_file
from cheems.execution import Execution
from cheems.processes.ports import free_port
from services.scorer.triton.model import make_infer, use_running_libpython

log = logging.getLogger(__name__)


@dataclass
class Binding:
    model: Any  # the torch module (kept: a restart binds it again)
    share: bool
    on_restart: Callable[[str], None]


class SharedTriton:
    def __init__(self, execution: Execution, queue_delay_us: int = 2000) -> None:
        """`execution`: the device, and what a batch holds (Triton's `max_batch_size`; the infer function's token
        budget); `queue_delay_us`: how long Triton's dynamic batcher waits to fill one. Each model's dtype and
        prefix sharing are its own (`add`)."""
        self.execution, self.queue_delay_us = execution, queue_delay_us
        self.triton: Any = None
        self.url = ""
        self.metrics_url = ""  # host:port of its Prometheus metrics (/metrics), loopback only
        self.log_file = ""
        self._bound: dict[str, Binding] = {}
        self._seen: set[processes.Proc] = set()
        self._lock = threading.RLock()  # one change at a time: add, remove, restart, stop

    @property
    def models(self) -> list[str]:
        """The Triton names of the models bound now."""
        return list(self._bound)

    @property
    def pid(self) -> int | None:
        """The tritonserver process id (PyTriton keeps it in private attributes; None if not found)."""
        server = getattr(self.triton, "_triton_server", None)
        return getattr(getattr(server, "_tritonserver_running_cmd", None), "pid", None)

    def alive(self) -> bool:
        """tritonserver runs and the proxy of every model loaded in it is up; a model still being added is not
        counted (PyTriton's own `is_alive` counts it, and would call the server dead while a model loads)."""
        triton = self.triton
        server = getattr(triton, "_triton_server", None)
        if server is None or not server.is_alive():
            return False
        loaded = set(self._bound)
        return all(m.is_alive() for m in list(triton._model_manager.models) if m.model_name in loaded)

    def note_processes(self) -> None:
        """Remember tritonserver's process tree (called while it runs), to clean up after a crash."""
        if (pid := self.pid) is not None:
            self._seen.update(processes.tree(pid))

    def add(self, name: str, model: Any, share: bool, on_restart: Callable[[str], None]) -> str:
        """Serve `model` under the Triton name `name` (starting the server if none runs); returns the URL."""
        with self._lock:
            if name in self._bound:
                raise ValueError(f"a model named {name} is served already")
            binding = Binding(model, share, on_restart)
            if self.triton is None:
                self._bound[name] = binding
                try:
                    self._start()
                except BaseException:
                    del self._bound[name]
                    self._stop_server()
                    raise
            else:
                self._bind(name, binding)  # the server runs: PyTriton loads it through Triton's repository API
                self._bound[name] = binding
            self.note_processes()
            return self.url

    def remove(self, name: str) -> None:
        """Unload one model; the server stops with its last model. Unknown names are ignored."""
        with self._lock:
            if self._bound.pop(name, None) is None:
                return
            if not self._bound:
                self._stop_server()
                return
            self.note_processes()
            manager = self.triton._model_manager  # PyTriton (0.7) has no public call to drop one model
            served = manager._models.pop(manager._format_key(_Named(name)), None)
            if self.alive():
                from pytriton.client.auth import create_auth_headers
                from tritonclient.grpc import InferenceServerClient

                # PyTriton restricts Triton's repository API to its own token
                headers = create_auth_headers(manager._access_token, "grpc") if manager._access_token else None
                try:
                    with InferenceServerClient(self.url) as client:
                        client.unload_model(name, headers=headers)
                except Exception as e:  # a server going down (SIGTERM to the pod) unloads everything itself
                    log.warning("Triton at %s could not unload %s: %s", self.url, name, e)
            if served is not None:
                served.clean()
            log.info("Triton at %s unloaded %s (%d model(s) left)", self.url, name, len(self._bound))

    def restart(self, force: bool = False) -> str:
        """A new server with every bound model, when this one died or `force` (it lives, but a model's process
        in it died: its calls all fail); a live one is kept otherwise. Returns the URL."""
        with self._lock:
            if self.alive() and not force:
                return self.url
            self._stop_server()
            self._start()
            for binding in self._bound.values():
                binding.on_restart(self.url)
            return self.url

    def stop(self) -> None:
        with self._lock:
            self._bound.clear()
            self._stop_server()

    def _bind(self, name: str, binding: Binding) -> None:
        from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor

        self.triton.bind(
            model_name=name,
            infer_func=make_infer(binding.model, replace(self.execution, share=binding.share)),
            inputs=[
                Tensor(name="input_ids", dtype=np.int64, shape=(-1,)),
                Tensor(name="lengths", dtype=np.int64, shape=(1,)),
            ],
            outputs=[Tensor(name="rewards", dtype=np.float32, shape=(1,))],
            config=ModelConfig(
                max_batch_size=self.execution.max_sequences,
                batcher=DynamicBatcher(max_queue_delay_microseconds=self.queue_delay_us),
            ),
            strict=True,
        )

    def _start(self) -> None:
        from pytriton.triton import Triton, TritonConfig

        logging.getLogger("pytriton").setLevel(logging.WARNING)
        use_running_libpython()
        grpc_port, metrics_port = free_port(), free_port()
        self.log_file = os.path.join(tempfile.gettempdir(), f"cheems-triton-{grpc_port}.log")
        private_file(Path(self.log_file))  # made 0600 here: tritonserver writes into it as it is
        config = TritonConfig(
            grpc_address="127.0.0.1",
            http_address="127.0.0.1",
            grpc_port=grpc_port,
            http_port=free_port(),
            metrics_port=metrics_port,
            log_verbose=0,
            log_file=self.log_file,
            exit_timeout_secs=5,
        )
        self.triton = Triton(config=config)
        for name, binding in self._bound.items():
            self._bind(name, binding)
        self.triton.run()
        self.note_processes()
        self.url = f"127.0.0.1:{grpc_port}"
        self.metrics_url = f"127.0.0.1:{metrics_port}"
        log.info("Triton serving %s at %s (server log: %s)", ", ".join(self._bound), self.url, self.log_file)

    def _stop_server(self) -> None:
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


@dataclass(frozen=True)
class _Named:
    """What PyTriton's model manager keys a model by (its name, lowered, and version 1)."""

    model_name: str
    model_version: int = 1
