"""The training service's work, transport-free: datasets, trainings, their runs, and the models they make.

    service = TrainingService(engine, TrainingConfig(data_dir="out/cheems"), LocalLauncher(), publisher)
    service.recover()                                  # re-attach to the trainings recorded as running
    training = service.start_training(dataset_recipe="human", overrides={"epochs": "1"})

A training is recorded (pending), launched (running, with the launcher's handle) and watched by a
monitor thread (`trainer.service.monitor`), which records its progress and, when it ends, registers
its model (its ModelEvent queued in the store's outbox, which this service's relay publishes) or records why it
failed. A request the service cannot take
(an unknown recipe, an override of a field that is no TrainConfig's, a dataset with no pair) raises
an InvalidInput before anything is stored; a gRPC request's overrides are first held to the training knobs
(`requested`, `trainer.service.knobs`: no model, trust_remote_code or path; the base model is a registered
one, `base_model=<model id>`, resolved to the registry's path at launch); a launch the launcher refuses
(Kubernetes answering 403) leaves the training failed with that error. The gRPC adapter is `trainer.service.server`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path

from sqlalchemy.engine import Engine

from cheems.errors import Conflict, InvalidInput
from services.bus import topics
from services.bus.client import Publisher
from services.bus.relay import EventRelay
from services.observe.logs import log_context
from services.store import lifecycle, registry
from services.store.db import session_scope
from services.store.errors import UnknownModel
from services.store.models import Dataset, RegisteredModel, Training
from services.store.outbox import StoreOutbox
from trainer.datasets.build import DatasetOptions, create_dataset
from trainer.recipes import recipe as training_recipe
from trainer.service.config import TrainingConfig
from trainer.service.knobs import BASE_MODEL, BadOverride, request_overrides
from trainer.service.launchers import RESERVED, Launcher, LaunchError, LaunchSpec
from trainer.service.monitor import Monitor

log = logging.getLogger(__name__)
ACTIVE = ("pending", "running")


class BadTrainingRequest(InvalidInput):
    """A StartTraining request naming an unknown recipe or overriding a field it may not."""


class TrainingService:
    def __init__(
        self, engine: Engine, config: TrainingConfig, launcher: Launcher, publisher: Publisher | None = None
    ) -> None:
        self.engine, self.config, self.launcher, self.publisher = engine, config, launcher, publisher
        self.data_dir = Path(config.data_dir).absolute()  # the launched runs may work elsewhere
        self.bench_root = Path(config.bench_root).absolute() if config.bench_root else self.data_dir / "bench"
        self.lock = threading.RLock()  # start, cancel and a run's end are decided one at a time
        self.monitor = Monitor(self)
        # publishes the datasets' and models' events (this service's datasets and registrations, `cheems models
        # ...`, the gate's decisions) from the store's outbox; none without a publisher: they wait there for a
        # service that has one
        self.relay = None if publisher is None else EventRelay(StoreOutbox(engine, topics.RELAYED_BY["training"]),
                                                               publisher).start()  # fmt: skip

    # datasets

    def create_dataset(self, recipe: str = "", supervisor: str = "") -> tuple[Dataset, bool]:
        """A dataset of `recipe` (default: the config's); `supervisor`: distant supervision's model (default: the
        config's, else the newest trained on human rankings)."""
        config = self.config
        options = DatasetOptions(
            str(self.data_dir),
            config.seed,
            distant=config.distant,
            score_device=config.supervision_device,
            score_dtype=config.supervision_dtype,
        )
        recipe, supervisor = recipe or self.config.dataset_recipe, supervisor or self.config.supervisor
        made = create_dataset(self.engine, recipe, options, supervisor)  # a new one's event queued in the outbox
        self.announced()
        return made

    def list_datasets(self) -> list[Dataset]:
        with session_scope(self.engine) as session:
            return registry.list_datasets(session)

    # trainings

    def requested(self, overrides: Mapping[str, str]) -> dict[str, str]:
        """A request's overrides, when every key is a training knob (`knobs.request_overrides`; BadOverride naming
        the key otherwise), its eval_files names as paths under the bench root."""
        return request_overrides(overrides, self.bench_root)

    def start_training(
        self,
        dataset_id: str = "",
        dataset_recipe: str = "",
        recipe: str = "",
        overrides: Mapping[str, str] | None = None,
        supervisor: str = "",
        requested_by: str | None = None,
    ) -> Training:
        """Record and launch a training on the dataset (a new one made with `dataset_recipe` when none is named);
        `requested_by`: who asked for it, as the training records it (the caller's actor, or policy:auto)."""
        recipe, overrides = recipe or self.config.recipe, {**self.config.overrides, **dict(overrides or {})}
        check_request(recipe, overrides)
        if BASE_MODEL in overrides:
            overrides[BASE_MODEL] = self.base_model(overrides[BASE_MODEL])[0]  # an alias: the model it names now
        if dataset_id:
            with session_scope(self.engine) as session:
                dataset_id = registry.get_dataset(session, dataset_id).id
        else:
            dataset_id = self.create_dataset(dataset_recipe, supervisor)[0].id
        with self.lock, session_scope(self.engine) as session:
            out_dir = str(self.data_dir / "trainings" / "{id}")
            training = registry.create_training(
                session, dataset_id, recipe, overrides, self.launcher.kind, out_dir, requested_by
            )
            training_id = training.id
        log.info("training %s: recipe %s on dataset %s, for %s", training_id, recipe, dataset_id[:12], requested_by)
        self.launch(training_id)
        return self.get_training(training_id)

    def launch(self, training_id: str) -> None:
        """Start the training's run (resuming from its checkpoints, when it has some) and watch it."""
        with log_context(training_id=training_id):
            self._launch(training_id)

    def _launch(self, training_id: str) -> None:
        with self.lock:
            with session_scope(self.engine) as session:
                training = registry.get_training(session, training_id)
                dataset = registry.get_dataset(session, training.dataset_id)
                if training.state not in ACTIVE:
                    return
            overrides = {k: str(v) for k, v in (training.overrides or {}).items()}
            base = overrides.pop(BASE_MODEL, "")
            model = self.base_model(base)[1] if base else self.config.model
            spec = LaunchSpec(training.id, training.recipe, dataset.path, training.out_dir, model, overrides,
                              self.config.nproc)  # fmt: skip
            try:
                handle = self.launcher.start(spec)
            except LaunchError as e:
                log.error("training %s: %s", training_id, e)
                self.update(training_id, state="failed", error=str(e))
                return
            self.update(training_id, state="running", handle=handle)
        self.monitor.watch(training_id)

    def base_model(self, name: str) -> tuple[str, str]:
        """(id, path) of the registered model a request's base_model names (id or alias); BadOverride when none."""
        try:
            with session_scope(self.engine) as session:
                model = lifecycle.resolve(session, name)
                return model.id, model.path
        except UnknownModel:
            raise BadOverride(
                f"overrides: {BASE_MODEL} {name[:80]!r} is no registered model: name one ListModels lists"
            ) from None

    def get_training(self, training_id: str) -> Training:
        with session_scope(self.engine) as session:
            return registry.get_training(session, training_id)

    def list_trainings(self) -> list[Training]:
        with session_scope(self.engine) as session:
            return registry.list_trainings(session)

    def cancel_training(self, training_id: str) -> Training:
        """Stop the run and mark the training cancelled; a training that already ended is a Conflict."""
        with self.lock:
            training = self.get_training(training_id)
            if training.state not in ACTIVE:
                raise Conflict(f"training {training_id} has ended ({training.state}): nothing to cancel")
            self.update(training_id, state="cancelled")
            if training.handle:
                self.launcher.stop(training.handle)
        log.info("training %s: cancelled", training_id)
        return self.get_training(training_id)

    def list_models(self) -> list[RegisteredModel]:
        with session_scope(self.engine) as session:
            return registry.list_models(session)

    def active(self) -> list[Training]:
        with session_scope(self.engine) as session:
            return registry.list_trainings(session, ACTIVE)

    # lifecycle

    def recover(self) -> int:
        """Re-attach to the trainings recorded as pending or running (after a restart); returns how many."""
        trainings = self.active()
        for training in trainings:
            if training.launcher != self.launcher.kind:
                log.warning(
                    "training %s runs on %s, this service launches %s: not watched",
                    *(training.id, training.launcher, self.launcher.kind),
                )
                continue
            log.info("training %s: re-attaching (%s, handle %s)", training.id, training.state, training.handle)
            if training.state == "pending" or not training.handle:
                self.launch(training.id)
            else:
                self.monitor.watch(training.id)
        return len(trainings)

    def close(self) -> None:
        """Stop watching (the runs go on; a restarted service re-attaches to them) and relaying (what waits is
        published by the next start)."""
        self.monitor.close()
        if self.relay is not None:
            self.relay.stop()

    def announced(self) -> None:
        if self.relay is not None:
            self.relay.kick()

    def update(self, training_id: str, **changes: object) -> None:
        """Record progress or state (a training that ended keeps its state)."""
        with session_scope(self.engine) as session:
            registry.update_training(session, training_id, **changes)


def check_request(recipe: str, overrides: dict[str, str]) -> None:
    """BadTrainingRequest for an unknown recipe, a reserved or unknown field, or a value of the wrong type."""
    reserved = sorted(set(overrides) & set(RESERVED))
    if reserved:
        raise BadTrainingRequest(f"overrides: {', '.join(reserved)} is set by the training service")
    fields = [f"{k}={v}" for k, v in overrides.items() if k != BASE_MODEL]  # base_model: the service's, at launch
    try:
        training_recipe(recipe).with_overrides(fields)
    except ValueError as e:
        raise BadTrainingRequest(f"{'overrides' if 'unknown recipe' not in str(e) else 'recipe'}: {e}") from None
