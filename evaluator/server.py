"""gRPC adapter of `cheems.v1.EvaluationService`: start a CheemsBench run through Kafka, then watch it.

StartRun checks the request, records the run and publishes one score request per benchmark prompt
(`evaluator.pipeline.start_run`); the score workers and the result sink do the rest. GetRun reads the
run's state, progress and, once complete, its metrics from the store.

Bench files are named relative to the service's bench root (in Kubernetes the shared volume, which
the result sink mounts at the same path); a name that leaves the root is refused. Errors:
INVALID_ARGUMENT for a bad request (the message names the field, or the file and line), NOT_FOUND
for an unknown run, UNAVAILABLE when the broker does not take the score requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import grpc
from kafka.errors import KafkaError

from cheems.errors import CheemsError
from cheems.v1 import evaluation_pb2, evaluation_pb2_grpc
from evaluator.metrics import Semantics
from evaluator.pipeline import run_proto, start_run
from services.bus.client import Publisher
from services.hosting import EVALUATION_PORT, GrpcHost, HostConfig

SERVICE = "cheems.v1.EvaluationService"
SEMANTICS = {
    evaluation_pb2.SEMANTICS_UNSPECIFIED: Semantics.PAPER,
    evaluation_pb2.SEMANTICS_PAPER: Semantics.PAPER,
    evaluation_pb2.SEMANTICS_OFFICIAL: Semantics.OFFICIAL,
}


@dataclass(frozen=True)
class EvaluationConfig:
    bench_root: Path  # bench files are read from under here and nowhere else
    host: HostConfig = field(default_factory=lambda: HostConfig(port=EVALUATION_PORT))


class BadRequest(ValueError):
    """A StartRun/GetRun request that cannot be served; the message names the field."""


def resolve_bench(root: Path, names: Sequence[str]) -> list[Path]:
    """Each name as a file under `root`; raises BadRequest naming `bench_files[i]`."""
    if not names:
        raise BadRequest("bench_files: name at least one bench file")
    base = root.resolve()
    paths = []
    for index, name in enumerate(names):
        path = (base / name).resolve()
        if not name or not path.is_relative_to(base):
            raise BadRequest(f"bench_files[{index}]: {name!r} is not a file under the bench root")
        if not path.is_file():
            raise BadRequest(f"bench_files[{index}]: no file {name!r} under the bench root")
        paths.append(path)
    return paths


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("abort raises")


class EvaluationServicer(evaluation_pb2_grpc.EvaluationServiceServicer):
    def __init__(self, engine: Any, publisher: Publisher, bench_root: Path) -> None:
        self.engine, self.publisher, self.bench_root = engine, publisher, bench_root

    def StartRun(self, request: Any, context: grpc.ServicerContext) -> evaluation_pb2.EvalRun:
        try:
            paths = resolve_bench(self.bench_root, list(request.bench_files))
            if not request.scorer_url.strip():
                raise BadRequest("scorer_url: give the scorer's gRPC address, host:port")
            if request.semantics not in SEMANTICS:
                raise BadRequest(f"semantics: unknown value {request.semantics}")
        except BadRequest as e:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(e))
        try:
            run_id = start_run(
                self.engine, self.publisher, [str(p) for p in paths], request.scorer_url, SEMANTICS[request.semantics]
            )
        except CheemsError as e:  # a malformed bench file: the message names the file and line
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(e))
        except KafkaError as e:  # the broker did not take the requests; the run is recorded as failed
            _abort(context, grpc.StatusCode.UNAVAILABLE, f"the score requests could not be published: {e}")
        return run_proto(self.engine, run_id)

    def GetRun(self, request: Any, context: grpc.ServicerContext) -> evaluation_pb2.EvalRun:
        if not request.run_id:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, "run_id: required")
        try:
            return run_proto(self.engine, request.run_id)
        except KeyError:
            _abort(context, grpc.StatusCode.NOT_FOUND, f"no run {request.run_id!r}")


def host(servicer: EvaluationServicer, config: HostConfig) -> GrpcHost:
    """The servicer on a GrpcHost (health, reflection), serving as soon as it is started."""
    grpc_host = GrpcHost(
        config, lambda server: evaluation_pb2_grpc.add_EvaluationServiceServicer_to_server(servicer, server), [SERVICE]
    )
    grpc_host.set_serving(True)
    return grpc_host


def serve(db: str, bootstrap: str, config: EvaluationConfig) -> None:
    """`cheems service evaluation`: migrate-free (run `cheems db upgrade` first), until SIGTERM."""
    from services.store.db import StoreConfig, create_engine_for

    publisher = Publisher(bootstrap, max_block_ms=10000)  # a StartRun fails within ~10 s when Kafka is down
    servicer = EvaluationServicer(create_engine_for(StoreConfig(db)), publisher, config.bench_root)
    grpc_host = host(servicer, config.host).start()
    print(f"evaluation: gRPC {config.host.host}:{grpc_host.port}, bench root {config.bench_root}", flush=True)
    grpc_host.wait_for_signal()
    publisher.close()
