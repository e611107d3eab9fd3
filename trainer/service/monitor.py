"""One thread per running training: progress into the store, and the run's end into a model or an error.

Every `poll_seconds` the thread reads the lines the trainer added to OUT/metrics.jsonl and records
step, total_steps, loss, overall and the reporting runs' ids (`registry.update_training`), then asks
the launcher how the run is. When it ended:
- succeeded, and OUT/model exported: the model is registered (overall = the final evaluation in its
  metadata), its ModelEvent queued in the store's outbox in the registration's transaction (the service's
  relay publishes it on cheems.models.v1 after the commit: a crash or a broker outage delays it only);
- failed: the training is failed with the launcher's error (a local run's last log lines);
- gone (a re-attached process that exited, a deleted Job): registered when OUT/model is there, else
  relaunched, resuming from its latest checkpoint, up to `max_relaunches` times.
A cancelled training (ended in the store) is left alone. An error while watching (the database away) is
logged and retried at the next poll.
"""

from __future__ import annotations

import logging
import threading
from contextlib import AbstractContextManager
from typing import Protocol

from sqlalchemy.engine import Engine

from cheems.v1 import events_pb2
from services.bus import topics
from services.bus.client import Publisher
from services.bus.codec import encode
from services.models.messages import model_message
from services.observe.logs import log_context
from services.store import outbox, registry
from services.store.db import session_scope
from services.store.models import Training
from services.store.registry import ENDED
from trainer.service.config import TrainingConfig
from trainer.service.launchers import Launcher, Status
from trainer.service.progress import MetricsReader, exported_model, final_overall, model_tracking, progress_of

log = logging.getLogger(__name__)


class Trainings(Protocol):
    """What a monitor needs of the service that owns the trainings (`trainings.TrainingService` is one).

    A protocol rather than an import, so the service may create monitors without the two modules
    importing each other.
    """

    engine: Engine
    config: TrainingConfig
    launcher: Launcher
    publisher: Publisher | None

    @property
    def lock(self) -> AbstractContextManager[object, bool | None]: ...

    def get_training(self, training_id: str) -> Training: ...

    def update(self, training_id: str, **changes: object) -> None: ...

    def launch(self, training_id: str) -> None: ...

    def announced(self) -> None:
        """Events were queued in the outbox: publish them now rather than at the relay's next sweep."""
        ...


class Monitor:
    def __init__(self, service: Trainings) -> None:
        self.service = service
        self.stop = threading.Event()
        self.threads: dict[str, threading.Thread] = {}
        self.relaunches: dict[str, int] = {}
        self._lock = threading.Lock()

    def watch(self, training_id: str) -> None:
        """Watch the training in a thread of its own (once: a second call while it is watched does nothing)."""
        with self._lock:
            thread = self.threads.get(training_id)
            if thread is not None and thread.is_alive():
                return
            thread = threading.Thread(target=self._run, args=(training_id,), name=f"train-{training_id}", daemon=True)
            self.threads[training_id] = thread
            thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self.stop.set()
        for thread in list(self.threads.values()):
            thread.join(timeout)

    def _run(self, training_id: str) -> None:
        with log_context(training_id=training_id):  # every line of this thread names the training
            self._watch(training_id)

    def _watch(self, training_id: str) -> None:
        reader = None
        while not self.stop.is_set():
            try:
                training = self.service.get_training(training_id)
                if training.state in ENDED:
                    return
                reader = reader or MetricsReader(training.out_dir)
                self._record(training_id, reader)
                status = self.service.launcher.status(training.handle or "", training.out_dir)
                if status.phase != "running":
                    self._record(training_id, reader)  # the lines written last
                    if self._ended(training_id, training.out_dir, status):
                        return
            except Exception:
                log.exception("training %s: watching failed; retrying", training_id)
            self.stop.wait(self.service.config.poll_seconds)

    def _record(self, training_id: str, reader: MetricsReader) -> None:
        changes = progress_of(reader.read())
        if changes:
            with session_scope(self.service.engine) as session:
                registry.update_training(session, training_id, **changes)

    def _ended(self, training_id: str, out_dir: str, status: Status) -> bool:
        """Act on a run that is no longer running; False when it was relaunched (and is watched on)."""
        model = exported_model(out_dir)
        with self.service.lock:
            if self.service.get_training(training_id).state in ENDED:  # cancelled meanwhile
                return True
            if status.phase == "failed":
                self._fail(training_id, status.error)
            elif model is not None:
                self._register(training_id, str(model), final_overall(model), model_tracking(model))
            elif status.phase == "succeeded":
                self._fail(training_id, f"the run ended without exporting a model to {out_dir}/model")
            else:
                return not self._relaunch(training_id, out_dir)
        return True

    def _register(
        self, training_id: str, path: str, overall: float | None, tracking: dict[str, str] | None = None
    ) -> None:
        # The ModelEvent goes to the outbox in the registration's transaction (never a transaction waiting on
        # the broker): the service's relay publishes it after the commit, and a crash or an outage delays it only.
        with session_scope(self.service.engine) as session:
            model, created = registry.register_model(session, training_id, path, overall, tracking)
            if created:
                event = events_pb2.ModelEvent(
                    header=events_pb2.EventHeader(producer="training"), model=model_message(model)
                )
                outbox.add(session, topics.MODELS, model.id, encode(topics.MODELS, event).value)
        self.service.announced()
        log.info("training %s: succeeded, model %s at %s (overall %s)", training_id, model.id, path, overall)

    def _fail(self, training_id: str, error: str) -> None:
        log.error("training %s: failed: %s", training_id, error)
        self.service.update(training_id, state="failed", error=error)

    def _relaunch(self, training_id: str, out_dir: str) -> bool:
        done = self.relaunches.get(training_id, 0)
        if done >= self.service.config.max_relaunches:
            self._fail(
                training_id, f"the run stopped without exporting a model (relaunched {done} times); see {out_dir}"
            )
            return False
        self.relaunches[training_id] = done + 1
        log.warning("training %s: the run is gone unfinished; relaunching (resumes from its checkpoint)", training_id)
        self.service.update(training_id, handle=None)
        self.service.launch(training_id)  # its watch() call finds this thread alive: this thread goes on
        return True
