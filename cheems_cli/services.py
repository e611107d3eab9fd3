"""Long-lived processes: `cheems service ...` (what the Kubernetes Deployments run)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from cheems.credentials import read_secret
from cheems.precision import DtypeName
from cheems_cli import evaluation_services
from cheems_cli.options import (
    DatabaseUrl,
    JudgeApiKey,
    JudgeApiKeyFile,
    JudgeBaseUrl,
    JudgeModel,
    KafkaBootstrap,
    Lease,
    ListenHost,
    MaxHeld,
    MetricsPort,
    PeoplePerPrompt,
    TlsCa,
    TlsCert,
    TlsKey,
    as_service,
    clear_errors,
    from_settings,
    key_values,
    listen,
    required,
    say,
    secret_option,
)

service = typer.Typer(help="Run a long-lived service (what the Kubernetes Deployments run).", no_args_is_help=True)


@service.callback()
@clear_errors
def traced(ctx: typer.Context) -> None:
    """Every service traces over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT is set (`services.observe.tracing`), as the
    service of its command's name."""
    from services.observe.tracing import setup_tracing

    setup_tracing(ctx.invoked_subcommand or "service")


@service.command("ingestion")
@clear_errors
def service_ingestion(
    db: DatabaseUrl,
    bootstrap: KafkaBootstrap,
    port: Annotated[int, typer.Option(help="gRPC port (0 = any free port).")] = 50052,
    host: ListenHost = "127.0.0.1",
    tls_cert: TlsCert = "",
    tls_key: TlsKey = "",
    metrics_port: MetricsPort = -1,
) -> None:
    """gRPC cheems.v1.IngestionService with health, until SIGTERM; every call needs an operator's token."""
    as_service("ingestion")
    from services.ingestion.server import serve

    config = listen(port, host, tls_cert, tls_key)
    serve(db, bootstrap, config, lambda bound: say(f"ingestion: gRPC {host}:{bound}"), metrics_port)


@service.command("annotation")
@clear_errors
def service_annotation(
    db: DatabaseUrl,
    bootstrap: KafkaBootstrap,
    human_sources: Annotated[
        list[str] | None,
        typer.Option(metavar="PATTERN", help="Sample sources people annotate, fnmatch (repeat; default: all)."),
    ] = None,
    ai_sources: Annotated[
        list[str] | None,
        typer.Option(
            metavar="PATTERN",
            envvar="CHEEMS_AI_SOURCES",
            help="Sample sources the AI judge annotates: pair tasks, fnmatch (repeat; default: none; set it where "
            "`cheems service judge` runs, as an open pair keeps its prompt from resolving).",
        ),
    ] = None,
    port: Annotated[int, typer.Option(help="gRPC port (0 = any free port).")] = 50053,
    http_port: Annotated[
        int, typer.Option(min=-1, max=65535, help="HTTP port of the annotator's page (0 = any free port, -1 = none).")
    ] = 8053,
    max_held: MaxHeld = 5,
    lease: Lease = 1800.0,
    people_per_prompt: PeoplePerPrompt = 0,
    double_share: Annotated[
        float, typer.Option(help="Share of triples annotated twice, by two different annotators (0 to 1).")
    ] = 0.0,
    double_seed: Annotated[int, typer.Option(help="Which triples --double-share picks.")] = 0,
    rule_filter: Annotated[
        bool, typer.Option(help="Keep abnormally long or mostly non-Chinese responses out of annotation.")
    ] = True,
    max_chars: Annotated[int, typer.Option(min=1, help="Rule filter: longer responses are not annotated.")] = 8000,
    min_chinese_ratio: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Rule filter: fewer Chinese among letters is not annotated.")
    ] = 0.3,
    ratio_exempt: Annotated[
        list[str] | None,
        typer.Option(help="Rule filter: a category whose answers skip the Chinese ratio (repeat; paper: none)."),
    ] = None,
    export_dir: Annotated[
        str,
        typer.Option(help="Export writes its named files here (default: the data directory's exports folder)."),
    ] = "",
    host: ListenHost = "127.0.0.1",
    tls_cert: TlsCert = "",
    tls_key: TlsKey = "",
    intake_delay: Annotated[float, typer.Option(hidden=True, help="Tests: seconds to pause after each sample.")] = 0.0,
) -> None:
    """gRPC cheems.v1.AnnotationService with health, until SIGTERM. With --bootstrap: new samples
    (cheems.samples.v1) become triple-wise tasks (and pair tasks for the AI judge, --ai-sources), and annotations and
    rankings are published. With
    --http-port: the annotator's page (/annotate) and the admin overview (/admin) over HTTP. A prompt's
    triples go to different annotators; --double-share gives a share of them a second task. The rule filter
    keeps abnormal responses out of tasks, each with its reason stored (`cheems status`, the admin overview).
    Each annotator holds --max-held tasks at most; one nobody works on for --lease goes back to the queue;
    --people-per-prompt lets a team smaller than a prompt's triples finish it. Export writes a file by name in
    --export-dir, never a path a caller chooses."""
    as_service("annotation")
    from cheems.settings import setting
    from services.annotation.algorithm.doubles import DoublingConfig
    from services.annotation.algorithm.filters import FilterConfig
    from services.annotation.config import QueueConfig, TaskConfig
    from services.annotation.exports import ExportConfig
    from services.annotation.intake import IntakeConfig
    from services.annotation.server import serve

    try:
        people, judge = tuple(human_sources or ("*",)), tuple(ai_sources or ())
        intake = IntakeConfig(human_sources=people, ai_sources=judge, delay=intake_delay)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--human-sources/--ai-sources") from None
    try:
        doubling = DoublingConfig(share=double_share, seed=double_seed)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--double-share") from None
    exempt = frozenset(ratio_exempt or ())
    rules = FilterConfig(max_chars=max_chars, min_chinese_ratio=min_chinese_ratio, ratio_exempt=exempt)
    events = f", samples and events on {bootstrap}" if bootstrap else ""

    def ready(bound: int, http_bound: int | None) -> None:
        page = f", annotator page http://{host}:{http_bound}/annotate" if http_bound is not None else ""
        say(f"annotation: gRPC {host}:{bound}{events}{page}")

    queue = QueueConfig(max_held=max_held, lease_seconds=lease, people_per_prompt=people_per_prompt)
    tasks = TaskConfig(rules if rule_filter else None, doubling)
    exports = ExportConfig(export_dir or str(Path(setting("data_dir")) / "exports"))
    serve(db, listen(port, host, tls_cert, tls_key), ready, bootstrap, intake, http_port, queue, tasks, exports)


@service.command("judge")
@clear_errors
def service_judge(
    base_url: JudgeBaseUrl,
    model: JudgeModel,
    api_key: JudgeApiKey,
    annotation_url: Annotated[
        str, from_settings("annotation_url", "host:port of the annotation service's gRPC endpoint.")
    ],
    tls_ca: TlsCa,
    token_file: Annotated[
        Path | None,
        typer.Option(
            envvar="CHEEMS_TOKEN_FILE",
            dir_okay=False,
            help="File holding the judge's service account token (role service; else CHEEMS_TOKEN).",
        ),
    ] = None,
    api_key_file: JudgeApiKeyFile = None,
    both_orders: Annotated[bool, typer.Option(help="Judge both A/B orders; keep consistent verdicts.")] = False,
    concurrency: Annotated[int, typer.Option(min=1, help="Judge calls at once.")] = 8,
    timeout: Annotated[float, typer.Option(help="Seconds per judge call.")] = 60.0,
    retry_every: Annotated[
        float, typer.Option(help="Seconds before a pair the endpoint or the service failed on is retried.")
    ] = 60.0,
    batch: Annotated[int, typer.Option(min=1, max=1000, help="Open pairs listed per look.")] = 100,
    seed: Annotated[int, typer.Option(help="Seed of the A/B order of each pair.")] = 0,
    health_port: Annotated[int, typer.Option(help="gRPC health port (-1 = none).")] = 50058,
    host: ListenHost = "127.0.0.1",
    metrics_port: MetricsPort = -1,
) -> None:
    """AI judge worker: the annotation service's open pair tasks -> an OpenAI-compatible LLM judges each pair -> AI
    annotations through AnnotationService (the prompt's last one resolves it), as the judge's own service account,
    until SIGTERM. The annotation service opens the pairs (its --ai-sources); the judge needs no database or broker."""
    as_service("judge")
    from services.annotation.judge.pairwise import JudgeConfig, OpenAICompatibleBackend
    from services.annotation.judge.worker import JudgeWorkerConfig, ProcessHealth, serve_judge
    from services.channels import tls_credentials

    required(base_url, "CHEEMS_JUDGE_BASE_URL")
    required(model, "CHEEMS_JUDGE_MODEL")
    required(annotation_url, "CHEEMS_ANNOTATION_URL")
    token = read_secret(token_file, "--token-file") if token_file else os.environ.get("CHEEMS_TOKEN", "").strip()
    if not token:
        raise typer.BadParameter("the judge's service account token is required", param_hint="--token-file")
    backend = OpenAICompatibleBackend(base_url, model, secret_option(api_key, api_key_file, "--api-key-file"), timeout)
    judging = JudgeConfig(both_orders=both_orders, concurrency=concurrency, seed=seed)
    try:
        config = JudgeWorkerConfig(model, judging, retry_every, batch)
        health = ProcessHealth(port=health_port, host=host, metrics_port=metrics_port)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None

    def ready(bound: int) -> None:
        say(f"judge: health on :{bound}, pairs from {annotation_url}")

    serve_judge(annotation_url, token, backend, config, health, ready, tls_credentials(tls_ca))


@service.command("training")
@clear_errors
def service_training(
    db: DatabaseUrl,
    bootstrap: KafkaBootstrap,
    data_dir: Annotated[
        str, from_settings("data_dir", "Datasets and trainings go here (shared storage in a cluster).")
    ],
    bench_root: Annotated[
        str, from_settings("bench_root", "A request's eval_files name files under here (empty: <data-dir>/bench).")
    ],
    model_root: Annotated[
        list[str] | None,
        typer.Option(help="RegisterModel also takes models under this folder (repeat; --data-dir, --model always)."),
    ] = None,
    recipe: Annotated[
        str, typer.Option(help="Training recipe of a request that names none, and of auto.")
    ] = "tiny-cpu",
    dataset_recipe: Annotated[
        str,
        typer.Option(
            help="Dataset recipe of a request that names none, and of auto: human, ai, ai-distant, "
            "human+ai-distant, the AI ones optionally -debias (the AI pairs length-debiased). Default: the paper's."
        ),
    ] = "human+ai-distant-debias",
    supervisor: Annotated[
        str,
        typer.Option(
            help="Distant supervision's model: a registered model trained on the human recipe (default: the newest)."
        ),
    ] = "",
    distant_margin: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Distant supervision drops an AI preference a>b when the supervisor rewards b above a by more "
            "than this (0: every contradicted one).",
        ),
    ] = 0.0,
    distant_tie_margin: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            help="Distant supervision drops an AI tie when the supervisor's rewards differ by more than this "
            "(default: ties are kept).",
        ),
    ] = None,
    supervision_device: Annotated[
        str, typer.Option(help="Where distant supervision scores: auto (cuda if there is a GPU), cpu, cuda:1 ...")
    ] = "auto",
    supervision_dtype: Annotated[
        DtypeName,
        typer.Option(help="What distant supervision computes in: auto = bfloat16 on CUDA, float32 on the CPU."),
    ] = "auto",
    auto_after: Annotated[
        int, typer.Option(min=0, help="Train when this many rankings came since the newest dataset (0 = off).")
    ] = 0,
    launcher: Annotated[
        str, typer.Option(help="local: a process group here; kubernetes: an Indexed Job per training.")
    ] = "local",
    model: Annotated[
        str, typer.Option(help="Base model directory every training starts from (default: the recipe's).")
    ] = "",
    nproc: Annotated[int, typer.Option(min=1, help="Training processes per node: one per GPU.")] = 1,
    port: Annotated[int, typer.Option(help="gRPC port (0 = any free port).")] = 50057,
    host: ListenHost = "127.0.0.1",
    metrics_port: MetricsPort = -1,
    namespace: Annotated[str, typer.Option(help="kubernetes: the Jobs' namespace (default: this pod's).")] = "",
    image: Annotated[str, typer.Option(help="kubernetes: the trainer image (default: the Job manifest's).")] = "",
    nodes: Annotated[int, typer.Option(min=1, help="kubernetes: pods per Job (torchrun nodes).")] = 1,
    workload: Annotated[
        str,
        typer.Option(
            help="kubernetes: job (an Indexed Job, no operator needed) or trainjob (a Kubeflow Trainer v2 TrainJob)."
        ),
    ] = "job",
    job_manifest: Annotated[
        str,
        typer.Option(
            help="kubernetes: the manifest to fill (default: k8s/training/base/job.yaml, or "
            "k8s/training/trainjob/trainjob.yaml for trainjob)."
        ),
    ] = "",
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="TrainConfig field key=value for every training (a request's win)."),
    ] = None,
    tls_cert: TlsCert = "",
    tls_key: TlsKey = "",
) -> None:
    """gRPC cheems.v1.TrainingService: datasets, trainings (local or Kubernetes) and models, until SIGTERM."""
    as_service("training")
    from services.scorer.offline.jobs import OfflineScoring
    from trainer.datasets.recipes import DistantSettings
    from trainer.service.config import TrainingConfig
    from trainer.service.server import serve
    from trainer.service.trainings import check_request

    try:
        config = TrainingConfig(
            data_dir=required(data_dir, "CHEEMS_DATA_DIR"),
            bench_root=bench_root,
            model_roots=tuple(model_root or ()),
            recipe=recipe,
            dataset_recipe=dataset_recipe,
            supervisor=supervisor,
            distant=DistantSettings(distant_margin, distant_tie_margin),
            supervision_device=supervision_device,
            supervision_dtype=supervision_dtype,
            auto_after=auto_after,
            launcher=launcher,
            model=model,
            nproc=nproc,
            port=port,
            host=host,
            metrics_port=metrics_port,
            tls_cert=tls_cert,
            tls_key=tls_key,
            namespace=namespace,
            image=image,
            nodes=nodes,
            workload=workload,
            job_manifest=job_manifest,
            overrides=key_values(set_),
        )
        check_request(config.recipe, dict(config.overrides))
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    OfflineScoring(supervision_device, supervision_dtype).execution()  # one this machine cannot run: refused now
    serve(db, bootstrap, config, lambda bound: say(f"training: gRPC {host}:{bound}, data in {data_dir}"))


for _name, _command in (
    ("evaluation", evaluation_services.service_evaluation),
    ("eval-worker", evaluation_services.service_eval_worker),
    ("eval-sink", evaluation_services.service_eval_sink),
):
    service.command(_name)(_command)
