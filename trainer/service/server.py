"""gRPC adapter of `cheems.v1.TrainingService`, and `cheems service training`.

    cheems service training --db URL --bootstrap HOST:9092 --data-dir out/cheems --model out/models/tiny
        [--recipe tiny-cpu] [--dataset-recipe human+ai-distant-debias] [--auto-after 50] [--launcher local|kubernetes]

Each method decodes the request, calls `TrainingService` and encodes its rows
(`trainer.service.messages`). Errors are kinds of `cheems.errors`, mapped by
`services.grpc_errors.abort`: INVALID_ARGUMENT for an unknown recipe, a bad override, an override that is
no training knob (`trainer.service.knobs`: model, trust_remote_code, paths; the base model is `base_model=<a
registered model id>`) or a dataset with no pair (nothing stored), NOT_FOUND for an unknown dataset or
training, FAILED_PRECONDITION to cancel a training that has ended. On start the service re-attaches to the
trainings recorded as running; on SIGTERM it stops watching them, and they go on.

Every call names an account (`services.access`; roles in `cheems.roles`): operators and admins make datasets,
trainings, register and reject models; only admins promote and roll back. Who did it is the account: a
training's `requested_by` and each lifecycle step's actor are `person:NAME` (or `service:NAME`) of the caller;
the requests' `actor` fields are ignored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc
from prometheus_client import CollectorRegistry

from cheems.errors import CheemsError
from cheems.extras import need
from cheems.v1 import training_pb2
from services.access import Authenticate, Guard, caller
from services.bus.client import Publisher
from services.bus.metrics import watch_consumers
from services.grpc_errors import abort
from services.hosting import GrpcHost, HostConfig, checked_handler
from services.models.lifecycle import ModelLifecycle
from services.models.messages import change_message, model_message
from services.observe.metrics import ReadAtScrape, new_registry, serve_metrics
from services.store.lifecycle import Change
from services.store.reads import state_counts
from trainer.service.auto import AutoTrainer
from trainer.service.config import TrainingConfig
from trainer.service.launchers import Launcher
from trainer.service.messages import dataset_message, training_message
from trainer.service.registration import registrable, registration_roots
from trainer.service.trainings import TrainingService

log = logging.getLogger(__name__)
SERVICE = "cheems.v1.TrainingService"


class TrainingServicer:
    def __init__(self, service: TrainingService) -> None:
        self.service = service
        self.models = ModelLifecycle(service.engine)
        config = service.config
        self.roots = registration_roots(service.data_dir, config.model, config.model_roots)

    def _run(self, context: grpc.ServicerContext, work: Callable[[], Any]) -> Any:
        try:
            return work()
        except CheemsError as e:
            abort(context, e)

    def CreateDataset(self, request: Any, context: grpc.ServicerContext) -> training_pb2.Dataset:
        return self._run(
            context, lambda: dataset_message(self.service.create_dataset(request.recipe, request.supervisor)[0])
        )

    def ListDatasets(self, request: Any, context: grpc.ServicerContext) -> training_pb2.ListDatasetsResponse:
        return self._run(
            context,
            lambda: training_pb2.ListDatasetsResponse(
                datasets=[dataset_message(d) for d in self.service.list_datasets()]
            ),
        )

    def StartTraining(self, request: Any, context: grpc.ServicerContext) -> training_pb2.Training:
        def work() -> training_pb2.Training:
            training = self.service.start_training(
                request.dataset_id,
                request.dataset_recipe,
                request.recipe,
                self.service.requested(dict(request.overrides)),  # training knobs only: INVALID_ARGUMENT naming a key
                request.supervisor,
                requested_by=caller().actor,
            )
            return training_message(training)

        return self._run(context, work)

    def GetTraining(self, request: Any, context: grpc.ServicerContext) -> training_pb2.Training:
        return self._run(context, lambda: training_message(self.service.get_training(request.training_id)))

    def ListTrainings(self, request: Any, context: grpc.ServicerContext) -> training_pb2.ListTrainingsResponse:
        return self._run(
            context,
            lambda: training_pb2.ListTrainingsResponse(
                trainings=[training_message(t) for t in self.service.list_trainings()]
            ),
        )

    def CancelTraining(self, request: Any, context: grpc.ServicerContext) -> training_pb2.Training:
        return self._run(context, lambda: training_message(self.service.cancel_training(request.training_id)))

    def ListModels(self, request: Any, context: grpc.ServicerContext) -> training_pb2.ListModelsResponse:
        return self._run(
            context,
            lambda: training_pb2.ListModelsResponse(models=[model_message(m, a) for m, a in self.models.listing()]),
        )

    # --- the model lifecycle (services.models.lifecycle)

    def RegisterModel(self, request: Any, context: grpc.ServicerContext) -> training_pb2.Model:
        def work() -> training_pb2.Model:
            path = registrable(request.path, self.roots)
            model = self.models.register(path, request.model_id or None, caller().actor)
            return model_message(model)

        return self._run(context, work)

    def PromoteModel(self, request: Any, context: grpc.ServicerContext) -> training_pb2.ModelChanges:
        return self._run(
            context,
            lambda: self._changes(self.models.promote(request.model_id, caller().actor, request.reason, request.force)),
        )

    def RollbackModel(self, request: Any, context: grpc.ServicerContext) -> training_pb2.ModelChanges:
        return self._run(context, lambda: self._changes(self.models.rollback(caller().actor, request.reason)))

    def RejectModel(self, request: Any, context: grpc.ServicerContext) -> training_pb2.ModelChanges:
        return self._run(
            context,
            lambda: self._changes(self.models.reject(request.model_id, caller().actor, request.reason)),
        )

    def _changes(self, changes: list[Change]) -> training_pb2.ModelChanges:
        production = self.models.production()
        return training_pb2.ModelChanges(
            changes=[change_message(c) for c in changes], production=production.id if production else ""
        )


def host(service: TrainingService, config: HostConfig, authenticate: Authenticate) -> GrpcHost:
    """The servicer on a GrpcHost (health, reflection), serving as soon as it is started; `authenticate`: the
    accounts callers' tokens are checked against. Its metrics: `training_metrics`."""
    descriptor = training_pb2.DESCRIPTOR.services_by_name["TrainingService"]
    servicer = TrainingServicer(service)
    grpc_host = GrpcHost(
        config,
        lambda server: server.add_generic_rpc_handlers((checked_handler(servicer, descriptor),)),
        [SERVICE],
        Guard(authenticate),
        training_metrics(service),
    )
    grpc_host.set_serving(True)
    return grpc_host


def training_metrics(service: TrainingService) -> CollectorRegistry:
    """The process's registry: trainings in the store by state and registered models by lifecycle stage (read at
    each scrape), the relaunches of runs that vanished unfinished, the automatic trainer's consumer lag."""
    registry, engine = new_registry(), service.engine
    registry.register(
        ReadAtScrape("cheems_trainings", "Trainings in the store, by state",
                     lambda: state_counts(engine, "trainings"), label="state")
    )  # fmt: skip
    registry.register(
        ReadAtScrape("cheems_models", "Registered models, by lifecycle stage (candidate, evaluated, production, ...)",
                     lambda: state_counts(engine, "models"), label="stage")
    )  # fmt: skip
    registry.register(
        ReadAtScrape("cheems_training_relaunches", "Runs relaunched by this service (resuming from a checkpoint)",
                     lambda: sum(service.monitor.relaunches.values()), kind="counter")
    )  # fmt: skip
    watch_consumers(registry)
    return registry


def make_launcher(config: TrainingConfig) -> Launcher:
    """The launcher the config names: a local process group, or Jobs (Indexed Jobs, or Kubeflow Trainer v2
    TrainJobs: `workload`) in this pod's (or the given) namespace."""
    if config.launcher == "local":
        from trainer.service.launchers.local import LocalLauncher

        return LocalLauncher()
    need("kubernetes", instead="--launcher local trains on this machine")
    from trainer.service.launchers.kubernetes import (
        MANIFEST,
        KubernetesLauncher,
        api_client,
        current_namespace,
        load_manifest,
    )

    namespace = config.namespace or current_namespace()
    if config.workload == "trainjob":
        from trainer.service.launchers import trainjob

        manifest = trainjob.load_trainjob(config.job_manifest or trainjob.MANIFEST)
        return trainjob.TrainJobLauncher(api_client(), namespace, manifest, config.image, config.nodes)
    manifest = load_manifest(config.job_manifest or MANIFEST)
    return KubernetesLauncher(api_client(), namespace, manifest, config.image, config.nodes)


def serve(db: str, bootstrap: str, config: TrainingConfig, on_ready: Callable[[int], None] | None = None) -> None:
    """`cheems service training`: expects a migrated database (`cheems db upgrade`), runs until SIGTERM.

    Without a bootstrap no events are published and no automatic training is possible. With one, the
    store's outbox's dataset and model events are relayed too (the datasets', wherever they were made, and the
    model lifecycle's, whoever recorded them: this service, `cheems models ...`, the gate); several relays at once
    are safe (services.store.outbox).
    `on_ready(port)` runs once the server listens.
    """
    from services.store.accounts import AccountBook
    from services.store.db import StoreConfig, create_engine_for

    publisher = Publisher(bootstrap, max_block_ms=10000) if bootstrap else None
    engine = create_engine_for(StoreConfig(db))
    service = TrainingService(engine, config, make_launcher(config), publisher)  # relays datasets' and models' events
    listen = HostConfig(port=config.port, host=config.host, tls_cert=config.tls_cert, tls_key=config.tls_key)
    grpc_host = host(service, listen, AccountBook(engine))
    metrics = config.metrics_port
    exporter = serve_metrics(grpc_host.registry, config.host, metrics) if metrics >= 0 else None
    grpc_host.start()
    recovered = service.recover()
    auto = AutoTrainer(service)
    if config.auto_after:
        auto.start(bootstrap)
    log.info(
        "training serving on %s:%d (%s launcher, data in %s; re-attached to %d trainings; auto %s)",
        *(config.host, grpc_host.port, config.launcher, service.data_dir, recovered),
        f"after {config.auto_after} rankings" if config.auto_after else "off",
    )
    if on_ready is not None:
        on_ready(grpc_host.port)

    def stop() -> None:
        auto.close()
        service.close()

    grpc_host.wait_for_signal(on_stop=stop)
    if exporter is not None:
        exporter.close()
    if publisher is not None:
        publisher.close()
