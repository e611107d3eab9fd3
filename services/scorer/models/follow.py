"""`cheems serve --follow`: load each newly registered model beside the current one, then switch to it.

    follower = Follower(feed, slot, lambda ref: load_served(config, ref)).start()
    ...
    follower.stop()

For each model event (cheems.models.v1) the follower decides (`ModelRef.is_newer_than`): a model
registered before the one served, or the one served, is ignored. A newer one is loaded while the
current one keeps serving (its own Triton, or a second torch model, and its tokenizers), then
`ModelSlot.swap` switches atomically: calls already running finish on the old model, which is closed
once they are done. A model that fails to load leaves the current one serving; `slot.follow_error`
(GetModelInfo.follow_error) says why until a later model loads. A broker that stops answering is
logged and retried; it never stops the serving.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC

from cheems.v1 import training_pb2
from services.scorer.models.feed import ModelFeed
from services.scorer.models.loading import load_error
from services.scorer.models.served import ModelRef, ModelSlot, ServedModel

log = logging.getLogger(__name__)
RETRY_SECONDS = 2.0  # pause after a failed poll (broker gone), before polling again


def ref_of(model: training_pb2.Model) -> ModelRef:
    created = model.created_at.ToDatetime(tzinfo=UTC) if model.HasField("created_at") else None
    return ModelRef(model.model_id, model.path, created)


class Follower:
    def __init__(
        self, feed: ModelFeed, slot: ModelSlot, load: Callable[[ModelRef], ServedModel], poll_ms: int = 500
    ) -> None:
        self.feed, self.slot, self.load, self.poll_ms = feed, slot, load, poll_ms
        self.switches = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def handle(self, ref: ModelRef) -> bool:
        """Load and switch to `ref` if it is newer than the model served; True when it switched."""
        current = self.slot.current
        if not ref.is_newer_than(current.ref if current else None):
            log.info("model %s is not newer than %s: ignored", ref.model_id, current.ref.model_id if current else "-")
            return False
        log.info("model %s registered: loading %s beside the current one", ref.model_id, ref.path)
        started = time.monotonic()
        try:
            model = self.load(ref)
        except Exception as e:  # a broken checkpoint must not stop the serving, whatever it raises
            self.slot.follow_error = load_error(ref, e)
            log.error("%s; still serving %s", self.slot.follow_error, current.ref.model_id if current else "nothing")
            return False
        if self._stop.is_set():  # stopping: the server will not close what it does not hold
            model.close()
            return False
        self.slot.swap(model)
        self.slot.follow_error = ""
        self.switches += 1
        log.info("now serving model %s (loaded in %.1f s)", ref.model_id, time.monotonic() - started)
        return True

    def poll_once(self) -> None:
        for model in self.feed.poll(self.poll_ms):
            if self._stop.is_set():
                return
            self.handle(ref_of(model))

    def start(self) -> Follower:
        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self.poll_once()
                except Exception:
                    log.exception("following the models topic failed; retrying in %.0f s", RETRY_SECONDS)
                    self._stop.wait(RETRY_SECONDS)

        self._thread = threading.Thread(target=loop, name="scorer-follow", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=60)  # a load in progress (a Triton starting) finishes first
        self.feed.close()
