"""Training on its own: when enough new rankings came, make a dataset and train on it.

The service consumes cheems.rankings.v1 (group "cheems-training"); an event only wakes the policy
thread, so a slow dataset (distant supervision scores every AI-annotated response) never stalls the
consumer past its poll interval. The policy (`AutoTrainer.check`) acts when
`registry.rankings_since_last_dataset` >= `auto_after` and no training is pending or running: it
makes a dataset with the default dataset recipe and starts the default training recipe on it. A
dataset that is not new (the new rankings changed no pair) or has no pair is not trained on; the
policy then waits for `auto_after` more rankings before trying again. It also checks once at start,
for the rankings that came while the service was down.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from cheems.errors import CheemsError
from services.bus import topics
from services.bus.client import EventConsumer
from services.store import registry
from services.store.db import session_scope
from services.store.models import Dataset, Training
from trainer.datasets.build import NoSupervisor
from trainer.datasets.recipes import HUMAN_RECIPE

if TYPE_CHECKING:
    from trainer.service.trainings import TrainingService

log = logging.getLogger(__name__)
GROUP = "cheems-training"
AUTO = "policy:auto"  # who a training this trainer starts was requested by


class AutoTrainer:
    def __init__(self, service: TrainingService) -> None:
        self.service = service
        self.after = service.config.auto_after
        self.tried_at = -1  # rankings_since_last_dataset at the last attempt that trained nothing
        self.wake = threading.Event()
        self.stop = threading.Event()

    def check(self) -> Training | None:
        """Start a training when the policy says so; the training started, else None."""
        if self.after <= 0:
            return None
        with session_scope(self.service.engine) as session:
            since = registry.rankings_since_last_dataset(session)
        if since < self.after or (self.tried_at >= 0 and since < self.tried_at + self.after):
            return None
        if self.service.active():
            log.info("auto: %d new rankings, waiting for the running training to end", since)
            return None
        log.info("auto: %d rankings since the last dataset (threshold %d): making a dataset", since, self.after)
        try:
            dataset, created = self.make_dataset()
        except CheemsError as e:
            log.warning("auto: no dataset: %s", e)
            self.tried_at = since
            return None
        if not created:
            log.info("auto: dataset %s is not new: not training on it again", dataset.id[:12])
            self.tried_at = since
            return None
        self.tried_at = -1
        return self.service.start_training(dataset_id=dataset.id, requested_by=AUTO)

    def make_dataset(self) -> tuple[Dataset, bool]:
        """The configured recipe's dataset; while its distant supervision has no human-trained model to use, a
        `human` dataset instead, whose training makes that model (the paper's order: human RM, then the rest)."""
        try:
            return self.service.create_dataset()
        except NoSupervisor as e:
            log.info("auto: %s; making a %s dataset first", e, HUMAN_RECIPE)
            return self.service.create_dataset(HUMAN_RECIPE)

    def run(self) -> None:
        """Check once, then after every wake-up (a ranking event, or a training that ended) until stopped."""
        self.wake.set()
        while not self.stop.is_set():
            if self.wake.wait(timeout=self.service.config.poll_seconds * 5):
                self.wake.clear()
            try:
                self.check()
            except Exception:
                log.exception("auto: the check failed; retrying at the next ranking")

    def consume(self, bootstrap: str) -> None:
        """Wake the policy on every ranking event until stopped."""
        consumer = EventConsumer(bootstrap, [topics.RANKINGS], GROUP, lambda topic, key, event: self.wake.set())
        try:
            consumer.run(self.stop)
        finally:
            consumer.consumer.close()

    def start(self, bootstrap: str) -> list[threading.Thread]:
        threads = [threading.Thread(target=self.run, name="auto-train", daemon=True)]
        if bootstrap:
            threads.append(threading.Thread(target=self.consume, args=(bootstrap,), name="rankings", daemon=True))
        for thread in threads:
            thread.start()
        return threads

    def close(self) -> None:
        self.stop.set()
        self.wake.set()
