"""The model being served, and the switch to the next one without a failed or mixed call.

    slot = ModelSlot(ServedModel(ref, backend, tokenizer, max_length))
    with slot.lease() as model:          # a call takes the current model once, at its start ...
        model.backend.score(...)         # ... and uses it to its end
    slot.swap(next_model)                # new calls get the next model; the old one is closed
                                         # (its backend, its Triton) once its last lease ends

`ServedModel` bundles what one checkpoint needs to serve: its backend, its tokenizers (a pool) and,
when the scorer started it, its Triton. `ModelSlot` holds the current one; `lease` and `swap` take
one lock, so a swap never falls between a call reading the current model and counting itself in.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from services.scorer.backends import Backend
from services.scorer.errors import BackendUnavailable
from services.scorer.telemetry.backends import Source, triton_source, vllm_source
from services.scorer.tokenization import longest_token
from services.scorer.tokenizer_pool import TokenizerPool

log = logging.getLogger(__name__)
NO_MODEL = "no production model yet: name a registered model in the call (`model`), or promote one"


@dataclass(frozen=True)
class ModelRef:
    """Which model: its id, its checkpoint directory, and when it was registered (None: not registered)."""

    model_id: str
    path: str
    created_at: datetime | None = None

    @property
    def name(self) -> str:
        return Path(self.path).name or self.path


class ServedModel:
    """One loaded checkpoint: backend, tokenizers, its own Triton (`host`) if any, and its calls in flight."""

    def __init__(
        self,
        ref: ModelRef,
        backend: Backend,
        tokenizer: Any,
        max_length: int,
        host: Any = None,
        fingerprint: str = "",
        shares: ServedModel | None = None,
    ) -> None:
        """`fingerprint`: of the tokenizer's files; `shares`: a model whose tokenizer (the same files) this one
        uses, with its pool of copies and its character budget."""
        self.ref, self.backend, self.host, self.fingerprint = ref, backend, host, fingerprint
        self.tokenizer: Any
        self.tokenizers: TokenizerPool
        self.char_budget: int
        if shares is not None:
            self.tokenizer, self.tokenizers, self.char_budget = shares.tokenizer, shares.tokenizers, shares.char_budget
        else:
            self.tokenizer, self.tokenizers = tokenizer, TokenizerPool(tokenizer)
            self.char_budget = max_length * longest_token(tokenizer)
        self.load_seconds = 0.0  # how long loading it took (the loader says)
        self._in_flight = 0
        self._retired = False
        self.closed = False
        self._lock = threading.Lock()  # guards the counts; `_host_lock` orders restart against close
        self._host_lock = threading.Lock()

    @property
    def dtype(self) -> str:
        """What the model computes in ("" when its backend does not say: an external Triton's model, a stand-in)."""
        return str(getattr(self.backend, "dtype", ""))

    @property
    def attention(self) -> str:
        """The attention kernel the model runs ("" when its backend does not say: Triton, a stand-in)."""
        return str(getattr(self.backend, "attention", ""))

    @property
    def in_flight(self) -> int:
        """Calls scoring with this model now."""
        with self._lock:
            return self._in_flight

    def metrics_source(self) -> Source | None:
        """Where the engine that runs the model exports its own metrics: the Triton this scorer started, or the vLLM
        server (its own or one at --vllm-url); None in process (torch) or an external Triton (its port unknown)."""
        if url := getattr(self.host, "metrics_url", ""):
            return triton_source(url, {self.host.name: self.ref.model_id})
        if self.backend.name == "vllm" and (url := getattr(self.backend, "url", "")):
            name, key = getattr(self.backend, "model_name", ""), getattr(self.backend, "api_key", "")
            return vllm_source(url, {name: self.ref.model_id}, key)
        return None

    def ready(self) -> bool:
        if self.host is not None:
            self.host.note_processes()
            if not self.host.alive():
                return False
        return bool(self.backend.ready())

    def dead(self) -> bool:
        """Its own Triton died, or lives with this model's process in it dead (its calls all fail: `broken`); a
        torch backend or an external Triton never does: nothing to restart."""
        return self.host is not None and (not self.host.alive() or self.broken())

    def broken(self) -> bool:
        """Its backend says every recent call failed in a live server (`TritonBackend.broken`)."""
        broken = getattr(self.backend, "broken", None)
        return broken is not None and bool(broken())

    def restart(self) -> None:
        """Bring its Triton back (the supervisor's restart); a closed model stays closed."""
        with self._host_lock:
            if self.closed or self.host is None:
                return
            # the backend learns the new address from the host (`on_restart`); a live Triton holding a dead
            # model process is restarted too (only Triton's backend says `broken`)
            self.host.restart(force=True) if self.broken() else self.host.restart()

    def close(self) -> None:
        with self._host_lock:
            if self.closed:
                return
            self.closed = True
            log.info("closing model %s (%s)", self.ref.model_id, self.ref.path)
            try:
                self.backend.close()
            finally:
                if self.host is not None:
                    self.host.stop()

    def enter(self) -> None:
        with self._lock:
            self._in_flight += 1

    def leave(self) -> None:
        with self._lock:
            self._in_flight -= 1
            idle = self._retired and self._in_flight == 0
        if idle:
            self._close_soon()

    def retire(self) -> None:
        """No new calls come; close once the calls in flight are done."""
        with self._lock:
            self._retired = True
            idle = self._in_flight == 0
        if idle:
            self._close_soon()

    def _close_soon(self) -> None:
        # not on the caller's thread: stopping a Triton takes seconds, and a call's reply must not wait for it
        threading.Thread(target=self.close, name=f"close-{self.ref.model_id}", daemon=True).start()


class ModelSlot:
    """The current model; `swap` switches atomically, `lease` pins one model for a whole call."""

    def __init__(self, current: ServedModel | None = None) -> None:
        self._current = current
        self._retired: list[ServedModel] = []
        self._lock = threading.Lock()
        self.follow_error = ""  # why the last registered model could not be loaded ("" when it was)
        self.handover: Callable[[ServedModel | None, ServedModel], None] | None = None

    @property
    def current(self) -> ServedModel | None:
        return self._current

    @contextmanager
    def lease(self) -> Iterator[ServedModel]:
        with self._lock:
            model = self._current
            if model is None:
                raise BackendUnavailable(NO_MODEL)
            model.enter()
        try:
            yield model
        finally:
            model.leave()

    def swap(self, model: ServedModel) -> ServedModel | None:
        """Serve `model` from now on and return the previous one, which goes to `handover(old, new)` when set (the
        shelf keeps it for the calls that name it), else is retired (closed when idle)."""
        with self._lock:
            old, self._current = self._current, model
            if old is not None:
                self._retired = [m for m in self._retired if not m.closed] + [old]
        if self.handover is not None:
            self.handover(old, model)
        elif old is not None:
            old.retire()
        return old

    def close(self) -> None:
        """Close every model, in flight or not (the server is stopping: its calls are done or dropped)."""
        with self._lock:
            models = [*self._retired, *([self._current] if self._current else [])]
        for model in models:
            model.close()
