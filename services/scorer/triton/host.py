"""A model served by a Triton this process started: the handle the scorer keeps for it (see `shared`)."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any

from cheems.execution import Execution
from cheems.forward import can_share
from services.scorer.triton.shared import SharedTriton

log = logging.getLogger(__name__)


class TritonHost:
    """One model served by a Triton this process started (PyTriton): `url` is that Triton's gRPC endpoint.

    The Triton is `server`, shared with the other models of the scorer (one tritonserver, a model loaded
    and unloaded in it by explicit model control), or one of its own. The model's Triton name is `name`,
    numbered when shared (`cheems_rm-2`: a model loaded again while its old copy drains needs another).
    `restart` after a crash brings the server back (new ports) with every model, this one already loaded;
    `on_restart(url)` tells the model's backend where. `stop` unloads the model; the server stops with its
    last model, and leaves no process behind (orphaned Python-backend stubs are killed)."""

    _numbers = itertools.count(1)

    def __init__(
        self,
        model_dir: str,
        name: str,
        execution: Execution,
        tokenizer: Any = None,
        server: SharedTriton | None = None,
        queue_delay_us: int = 2000,
    ) -> None:
        """`execution`: device, dtype, prefix sharing (where the model's attention takes it) and batch limits;
        `tokenizer`: the checkpoint's, if loaded already (it is needed only while loading the model); `server`:
        the Triton to load it in (None: one of its own, batching with `queue_delay_us`)."""
        self.model_dir, self.execution = model_dir, execution
        self.name = name if server is None else f"{name}-{next(self._numbers)}"
        self.server = server if server is not None else SharedTriton(execution, queue_delay_us)
        self._tokenizer = tokenizer
        self._model: Any = None
        self.on_restart: Callable[[str], None] = lambda url: None

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def metrics_url(self) -> str:
        """host:port of that Triton's Prometheus metrics (the scorer re-exports them)."""
        return self.server.metrics_url

    @property
    def log_file(self) -> str:
        return self.server.log_file

    @property
    def prefix_sharing(self) -> bool:
        """Whether the served model packs sequences that share a prefix (known once started)."""
        return self.execution.share and self._model is not None and can_share(self._model)

    @property
    def dtype(self) -> str:
        """What the served model computes in."""
        return self.execution.dtype_name

    @property
    def model_config(self) -> Any:
        """The transformers config of the served model (None before the first start)."""
        return None if self._model is None else self._model.config

    @property
    def pid(self) -> int | None:
        """The tritonserver process id (None when none runs)."""
        return self.server.pid

    def alive(self) -> bool:
        return self.name in self.server.models and self.server.alive()

    def note_processes(self) -> None:
        self.server.note_processes()

    def start(self) -> str:
        if self._model is None:
            self._model = self.execution.load(self.model_dir, self._tokenizer)
            self._tokenizer = None
        url = self.server.add(self.name, self._model, self.prefix_sharing, lambda url: self.on_restart(url))
        log.info("Triton at %s serves %s as %s", url, self.model_dir, self.name)
        return url

    def restart(self, force: bool = False) -> str:
        """The server back, if it died or `force` (a model's process in it died; every model bound to it comes
        back with it); returns its URL."""
        return self.server.restart(force)

    def stop(self) -> None:
        self.server.remove(self.name)
