"""The evaluation's long-lived processes: `cheems service evaluation | eval-worker | eval-sink` (registered on
`cheems_cli.services.service`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, cast

import typer

from cheems_cli.options import (
    DatabaseUrl,
    KafkaBootstrap,
    ListenHost,
    MetricsPort,
    ScorerToken,
    ScorerTokenFile,
    ScorerUrl,
    TlsCa,
    TlsCert,
    TlsKey,
    clear_errors,
    from_settings,
    listen,
    required,
    secret_option,
)


@clear_errors
def service_evaluation(
    bootstrap: KafkaBootstrap,
    bench_root: Annotated[str, from_settings("bench_root", "StartRun's bench files are read from under here.")],
    db: DatabaseUrl,
    scorer_url: ScorerUrl,
    port: Annotated[int, typer.Option(help="gRPC port (0 = any free port).")] = 50056,
    http_port: Annotated[
        int, typer.Option(min=-1, max=65535, help="The leaderboard's HTTP port (0 = any free port, -1 = none).")
    ] = 8056,
    host: ListenHost = "127.0.0.1",
    evaluate_models: Annotated[
        list[str] | None,
        typer.Option(
            metavar="BENCH",
            help="Evaluate every newly registered model on this bench file under --bench-root (repeat for more).",
        ),
    ] = None,
    promotion: Annotated[
        str, typer.Option(help="What an evaluated model becomes: manual (a person promotes) or auto (the gate).")
    ] = "manual",
    min_gain: Annotated[float, typer.Option(help="auto: Overall over production's needed to promote.")] = 0.0,
    max_drop: Annotated[
        float, typer.Option(help="auto: the most any subset's (Acc.+Exact.)/2 may fall below production's.")
    ] = 0.02,
    registered: Annotated[str, typer.Option(help="hand-registered models: hold (an admin promotes) or gate")] = "hold",
    tls_cert: TlsCert = "",
    tls_key: TlsKey = "",
) -> None:
    """gRPC cheems.v1.EvaluationService (StartRun, GetRun) with health, and the leaderboard over HTTP
    (--http-port), until SIGTERM; with --evaluate-models, a run of each newly registered model
    (cheems.models.v1) on those files, scored by --scorer-url, and the promotion gate (--promotion)."""
    from evaluator.errors import BadRequest
    from evaluator.pipeline.gate import GatePolicy
    from evaluator.pipeline.model_runs import ModelRunsConfig
    from evaluator.server import EvaluationConfig, resolve_bench, serve

    required(bootstrap, "CHEEMS_KAFKA_BOOTSTRAP")
    if not Path(required(bench_root, "CHEEMS_BENCH_ROOT")).is_dir():
        raise typer.BadParameter(f"{bench_root} is not a directory", param_hint="--bench-root")
    models = None
    if evaluate_models:
        try:
            bench = tuple(str(p) for p in resolve_bench(Path(bench_root), evaluate_models))
        except BadRequest as e:
            raise typer.BadParameter(str(e).partition(": ")[2], param_hint="--evaluate-models") from None
        models = ModelRunsConfig(bench, required(scorer_url, "CHEEMS_SCORER_URL"))
    try:
        gate = GatePolicy(cast(Any, promotion), min_gain, max_drop, registered=cast(Any, registered))  # checked there
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    config = EvaluationConfig(Path(bench_root), listen(port, host, tls_cert, tls_key), models, http_port, gate)
    serve(
        db, bootstrap, config,
        lambda bound: typer.echo(f"evaluation: gRPC {host}:{bound}, bench root {bench_root}"),
        lambda bound: typer.echo(f"evaluation: leaderboard http://{host}:{bound}/"),
    )  # fmt: skip


@clear_errors
def service_eval_worker(
    scorer_url: ScorerUrl,
    bootstrap: KafkaBootstrap,
    token: ScorerToken,
    tls_ca: TlsCa,
    token_file: ScorerTokenFile = None,
    health_port: Annotated[int, typer.Option(help="gRPC health port (-1 = none).")] = 50054,
    host: ListenHost = "127.0.0.1",
    metrics_port: MetricsPort = -1,
    model_wait: Annotated[
        float,
        typer.Option(
            min=0,
            help="Seconds to keep asking while the scorer serves another model than a run's; then the run fails.",
        ),
    ] = 120.0,
    batch_size: Annotated[
        int, typer.Option(min=1, help="Score requests per poll: scored in ScoreBatch calls, committed together.")
    ] = 256,
) -> None:
    """Score worker: score requests from Kafka -> RewardService -> scores to Kafka, until SIGTERM."""
    from evaluator.pipeline.process import ProcessConfig, serve_worker
    from evaluator.pipeline.worker import WorkerConfig

    required(scorer_url, "CHEEMS_SCORER_URL")
    required(bootstrap, "CHEEMS_KAFKA_BOOTSTRAP")
    token = secret_option(token, token_file, "--token-file")
    config = ProcessConfig(health_port=health_port, health_host=host, metrics_port=metrics_port)
    serve_worker(
        bootstrap,
        scorer_url,
        token,
        config,
        lambda bound: typer.echo(f"worker: health on :{bound}"),
        worker=WorkerConfig(model_wait=model_wait, batch_size=batch_size, tls_ca=tls_ca),
    )


@clear_errors
def service_eval_sink(
    bootstrap: KafkaBootstrap,
    db: DatabaseUrl,
    health_port: Annotated[int, typer.Option(help="gRPC health port (-1 = none).")] = 50055,
    host: ListenHost = "127.0.0.1",
    metrics_port: MetricsPort = -1,
    batch_size: Annotated[
        int, typer.Option(min=1, help="Scores per poll: stored in one transaction, committed together.")
    ] = 512,
    delay: Annotated[float, typer.Option(hidden=True, help="Tests: seconds to pause after each stored batch.")] = 0.0,
    group: Annotated[str, typer.Option(hidden=True, help="Tests: a consumer group of their own.")] = "",
) -> None:
    """Result sink: scores from Kafka -> eval_scores; completed runs -> metrics and eval results, until SIGTERM."""
    from evaluator.pipeline.process import ProcessConfig, serve_sink
    from evaluator.pipeline.sink import SinkConfig

    required(bootstrap, "CHEEMS_KAFKA_BOOTSTRAP")
    config = ProcessConfig(health_port=health_port, health_host=host, metrics_port=metrics_port)
    sink = SinkConfig(batch_size=batch_size, delay=delay)
    serve_sink(bootstrap, db, config, lambda bound: typer.echo(f"sink: health on :{bound}"), sink, group)
