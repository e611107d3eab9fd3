"""Long-lived processes: `cheems service ...` (what the Kubernetes Deployments run) and `cheems dev broker`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cheems_cli.options import (
    DatabaseUrl,
    KafkaBootstrap,
    ListenHost,
    ScorerToken,
    ScorerUrl,
    clear_errors,
    from_settings,
    required,
)

service = typer.Typer(help="Run a long-lived service (what the Kubernetes Deployments run).", no_args_is_help=True)
dev = typer.Typer(help="Local development helpers.", no_args_is_help=True)


@service.command("ingestion")
@clear_errors
def service_ingestion(
    db: DatabaseUrl,
    bootstrap: KafkaBootstrap,
    port: Annotated[int, typer.Option(help="gRPC port (0 = any free port).")] = 50052,
    host: ListenHost = "127.0.0.1",
) -> None:
    """gRPC cheems.v1.IngestionService with health, until SIGTERM."""
    from services.hosting import HostConfig
    from services.ingestion.server import serve

    serve(db, bootstrap, HostConfig(port=port, host=host), lambda bound: typer.echo(f"ingestion: gRPC {host}:{bound}"))


@service.command("annotation")
@clear_errors
def service_annotation(
    db: DatabaseUrl,
    port: Annotated[int, typer.Option(help="gRPC port (0 = any free port).")] = 50053,
    host: ListenHost = "127.0.0.1",
) -> None:
    """gRPC cheems.v1.AnnotationService with health, until SIGTERM."""
    from services.annotation.server import serve
    from services.hosting import HostConfig

    serve(db, HostConfig(port=port, host=host), lambda bound: typer.echo(f"annotation: gRPC {host}:{bound}"))


@service.command("evaluation")
@clear_errors
def service_evaluation(
    bootstrap: KafkaBootstrap,
    bench_root: Annotated[str, from_settings("bench_root", "StartRun's bench files are read from under here.")],
    db: DatabaseUrl,
    port: Annotated[int, typer.Option(help="gRPC port (0 = any free port).")] = 50056,
    host: ListenHost = "127.0.0.1",
) -> None:
    """gRPC cheems.v1.EvaluationService (StartRun, GetRun) with health, until SIGTERM."""
    from evaluator.server import EvaluationConfig, serve
    from services.hosting import HostConfig

    required(bootstrap, "CHEEMS_KAFKA_BOOTSTRAP")
    if not Path(required(bench_root, "CHEEMS_BENCH_ROOT")).is_dir():
        raise typer.BadParameter(f"{bench_root} is not a directory", param_hint="--bench-root")
    config = EvaluationConfig(Path(bench_root), HostConfig(port=port, host=host))
    serve(db, bootstrap, config, lambda bound: typer.echo(f"evaluation: gRPC {host}:{bound}, bench root {bench_root}"))


@service.command("eval-worker")
@clear_errors
def service_eval_worker(
    scorer_url: ScorerUrl,
    bootstrap: KafkaBootstrap,
    token: ScorerToken,
    health_port: Annotated[int, typer.Option(help="gRPC health port (-1 = none).")] = 50054,
    host: ListenHost = "127.0.0.1",
) -> None:
    """Score worker: score requests from Kafka -> RewardService -> scores to Kafka, until SIGTERM."""
    from evaluator.process import ProcessConfig, serve_worker

    required(scorer_url, "CHEEMS_SCORER_URL")
    required(bootstrap, "CHEEMS_KAFKA_BOOTSTRAP")
    config = ProcessConfig(health_port=health_port, health_host=host)
    serve_worker(bootstrap, scorer_url, token, config, lambda bound: typer.echo(f"worker: health on :{bound}"))


@service.command("eval-sink")
@clear_errors
def service_eval_sink(
    bootstrap: KafkaBootstrap,
    db: DatabaseUrl,
    health_port: Annotated[int, typer.Option(help="gRPC health port (-1 = none).")] = 50055,
    host: ListenHost = "127.0.0.1",
    delay: Annotated[float, typer.Option(hidden=True, help="Tests: seconds to pause after each stored score.")] = 0.0,
    group: Annotated[str, typer.Option(hidden=True, help="Tests: a consumer group of their own.")] = "",
) -> None:
    """Result sink: scores from Kafka -> eval_scores; completed runs -> metrics and eval results, until SIGTERM."""
    from evaluator.process import ProcessConfig, serve_sink

    required(bootstrap, "CHEEMS_KAFKA_BOOTSTRAP")
    config = ProcessConfig(health_port=health_port, health_host=host)
    serve_sink(bootstrap, db, config, lambda bound: typer.echo(f"sink: health on :{bound}"), delay, group)


@dev.command("broker")
@clear_errors
def dev_broker(
    port: Annotated[int, typer.Option(help="Port to listen on (0 = any free port).")] = 9092,
    partitions: Annotated[int, typer.Option(min=1)] = 3,
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0 in a pod).")] = "127.0.0.1",
    advertised_host: Annotated[
        str, typer.Option(help="Address clients are told to connect to (a pod's IP); default: --host.")
    ] = "",
) -> None:
    """Run the embedded Kafka-compatible broker (Tansu, memory storage) with the cheems topics, until Ctrl-C."""
    import signal

    from services.bus import topics
    from services.bus.broker import EmbeddedBroker

    with EmbeddedBroker(port, host, advertised_host) as broker:
        broker.create_topics(topics.with_dead_letters(), partitions)
        typer.echo(f"broker at {broker.bootstrap} with topics: {', '.join(topics.ALL)}")
        # Blocked, the signals wait for sigwait; unblocked, SIGTERM would kill this process and orphan the
        # broker. Blocked only now: the broker process inherits the mask and must still stop on SIGTERM.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
