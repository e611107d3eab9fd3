"""The `cheems` console command. Each subcommand is a thin call into a package.

    cheems eval data/sample/open.jsonl data/sample/human.jsonl --rewards data/sample/rewards.jsonl

This is the one module of `cheems` that reaches into other packages; it imports them inside the
commands so `cheems --help` stays fast.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from cheems.errors import CheemsError

app = typer.Typer(
    help="Build and evaluate Chinese reward models (CheemsBench, CheemsPreference, CheemsRM).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
F = TypeVar("F", bound=Callable[..., Any])
# Options several commands share, read from the environment the Kubernetes manifests set.
ListenHost = Annotated[
    str, typer.Option(help="Address to listen on: 127.0.0.1 = this machine only (default); 0.0.0.0 in a pod.")
]
DatabaseUrl = Annotated[str, typer.Option(envvar="CHEEMS_DATABASE_URL", help="SQLAlchemy URL.")]
KafkaBootstrap = Annotated[str, typer.Option(envvar="CHEEMS_KAFKA_BOOTSTRAP", help="Kafka bootstrap servers.")]


def clear_errors(command: F) -> F:
    """Report expected failures as one `error:` line on stderr and exit 2, without a traceback."""

    @wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (CheemsError, OSError) as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None

    return run  # type: ignore[return-value]


@app.callback()
def main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug messages.")] = False,
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )


@app.command("eval")
@clear_errors
def eval_command(
    bench: Annotated[
        list[Path],
        typer.Argument(
            exists=True,
            dir_okay=False,
            help="CheemsBench jsonl files; each is one subset named by its file stem.",
        ),
    ],
    rewards: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help='jsonl of {"input", "id", "reward"}.')
    ] = None,
    semantics: Annotated[
        str,
        typer.Option(help="paper: a reward tie is wrong in both metrics; official: a tie does not break exact match."),
    ] = "paper",
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the metrics as JSON here.")] = None,
    report: Annotated[
        Path | None, typer.Option(help="Write results.json, per_category.png and README.md here.")
    ] = None,
    ece_bins: Annotated[int, typer.Option(min=1, help="Bins of the calibration error.")] = 5,
    via_kafka: Annotated[
        bool, typer.Option(help="Score through Kafka and scorer workers instead of --rewards.")
    ] = False,
    scorer_url: Annotated[str, typer.Option(help="With --via-kafka: the scorer's gRPC address.")] = "",
    bootstrap: Annotated[str, typer.Option(envvar="CHEEMS_KAFKA_BOOTSTRAP", help="Kafka; empty = embedded.")] = "",
    db: Annotated[str, typer.Option(envvar="CHEEMS_DATABASE_URL")] = "sqlite:///cheems.db",
) -> None:
    """Score a reward model on CheemsBench from a file of its rewards."""
    from evaluator.evaluate import evaluate_files
    from evaluator.metrics import Semantics
    from evaluator.report import format_table, write_json, write_report

    if semantics not in {s.value for s in Semantics}:
        raise typer.BadParameter(f"must be 'paper' or 'official', got {semantics!r}", param_hint="--semantics")
    if via_kafka == (rewards is not None) or (via_kafka and not scorer_url):
        raise typer.BadParameter("give --rewards, or --via-kafka with --scorer-url")
    if rewards is not None:
        result = evaluate_files(bench, rewards, Semantics(semantics), ece_bins)
    else:
        result = _eval_via_kafka([str(b) for b in bench], scorer_url, bootstrap, db, Semantics(semantics))
    typer.echo(format_table(result))
    if json_out:
        write_json(result, json_out)
        typer.echo(f"\nwrote {json_out}")
    if report:
        for path in write_report(result, report):
            typer.echo(f"wrote {path}")


def _eval_via_kafka(bench: list[str], scorer_url: str, bootstrap: str, db: str, semantics: Any) -> Any:
    from contextlib import ExitStack

    from evaluator.pipeline import evaluate_via_kafka
    from services.bus import topics
    from services.bus.broker import EmbeddedBroker
    from services.store.db import StoreConfig, create_engine_for
    from services.store.migrate import upgrade

    upgrade(db)
    with ExitStack() as stack:
        if not bootstrap:
            broker = stack.enter_context(EmbeddedBroker())
            broker.create_topics(topics.with_dead_letters())
            bootstrap = broker.bootstrap
        return evaluate_via_kafka(bench, scorer_url, bootstrap, create_engine_for(StoreConfig(db)), semantics)


@app.command("resolve")
@clear_errors
def resolve_command(
    annotations: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Raw annotations jsonl.")],
    out: Annotated[Path, typer.Option(help="CheemsBench jsonl to write.")],
    stats: Annotated[Path | None, typer.Option(help="Write statistics as JSON here.")] = None,
) -> None:
    """Resolve conflicting annotations into partial rankings (the paper's Algorithm 1)."""
    from services.annotation.resolve_file import resolve_file

    result = resolve_file(annotations, out, stats)
    typer.echo(
        f"prompts {result.prompts}  annotations {result.annotations}  relations {result.relations}  "
        f"conflicts {result.conflicts}  conflict_ratio {result.conflict_ratio:.4f}  "
        f"merged_nodes {result.merged_nodes}"
    )
    if result.skipped_prompts or result.unranked_responses:
        typer.echo(
            f"left out: {result.skipped_prompts} prompts with fewer than two ranks, "
            f"{result.unranked_responses} responses in no relation"
        )
    typer.echo(f"wrote {out}")


annotate = typer.Typer(
    help="Annotation steps: simulate, judge, distant supervision, export, filter.", no_args_is_help=True
)
app.add_typer(annotate, name="annotate")


@annotate.command("simulate")
@clear_errors
def annotate_simulate(
    bench: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Bench file whose ranks are the truth.")],
    out: Annotated[Path, typer.Option(help="Raw annotations (cheems resolve input) to write.")],
    kind: Annotated[str, typer.Option(help="human (triple-wise) or ai (pairwise).")] = "human",
    noise: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.1,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Simulate noisy annotators (for demos and tests; no people or paid API needed)."""
    from services.annotation.commands import simulate

    if kind not in {"human", "ai"}:
        raise typer.BadParameter("must be human or ai", param_hint="--kind")
    typer.echo(f"wrote {simulate(bench, out, kind, noise, seed)} prompts to {out}")


@annotate.command("judge")
@clear_errors
def annotate_judge(
    bench: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Prompts with responses (bench layout).")],
    out: Annotated[Path, typer.Option(help="AI verdicts (cheems resolve input) to write.")],
    base_url: Annotated[
        str, typer.Option(envvar="CHEEMS_JUDGE_BASE_URL", help="OpenAI-compatible API, e.g. .../v1")
    ] = "",
    model: Annotated[str, typer.Option(envvar="CHEEMS_JUDGE_MODEL", help="Model name at that API.")] = "",
    local_model: Annotated[str, typer.Option(help="Or: a local causal-LM checkpoint run with transformers.")] = "",
    api_key: Annotated[str, typer.Option(envvar="CHEEMS_JUDGE_API_KEY")] = "",
    both_orders: Annotated[bool, typer.Option(help="Judge both A/B orders; keep consistent verdicts.")] = False,
    concurrency: Annotated[int, typer.Option(min=1)] = 8,
    timeout: Annotated[float, typer.Option()] = 60.0,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Judge every pair of responses with an LLM (the paper's template); print position/length bias."""
    from services.annotation.commands import dump, judge
    from services.annotation.judge import JudgeConfig, OpenAICompatibleBackend, TransformersBackend

    if bool(local_model) == bool(base_url and model):
        raise typer.BadParameter("give --base-url with --model, or --local-model")
    backend: Any = (
        TransformersBackend(local_model) if local_model else OpenAICompatibleBackend(base_url, model, api_key, timeout)
    )
    typer.echo(
        dump(judge(bench, out, backend, JudgeConfig(both_orders=both_orders, concurrency=concurrency, seed=seed)))
    )


@annotate.command("distant")
@clear_errors
def annotate_distant(
    ai: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Raw AI verdicts.")],
    rewards: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="RM rewards of those responses.")],
    out: Annotated[Path, typer.Option(help="Consistent rankings (bench layout) to write.")],
    margin: Annotated[float, typer.Option(help="Drop a > b when the RM prefers b by more than this.")] = 0.0,
    tie_margin: Annotated[float, typer.Option(help="Drop a = b when the RM separates them by more.")] = 1e9,
) -> None:
    """Distant supervision: drop AI verdicts the human-trained RM contradicts, then resolve."""
    from services.annotation.commands import distant, dump

    typer.echo(dump(distant(ai, rewards, out, margin, tie_margin)))


@annotate.command("export")
@clear_errors
def annotate_export(
    bench: Annotated[list[Path], typer.Argument(exists=True, dir_okay=False, help="Ranked bench files.")],
    out: Annotated[Path, typer.Option(help="CheemsPreference training file to write.")],
    debias: Annotated[bool, typer.Option(help="Balance chosen-longer and chosen-shorter pairs.")] = True,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Export rankings as CheemsPreference pairs (length-debiased)."""
    from services.annotation.commands import dump, export

    typer.echo(dump(export(bench, out, debias, seed)))


@annotate.command("filter")
@clear_errors
def annotate_filter(
    bench: Annotated[Path, typer.Argument(exists=True, dir_okay=False)],
    out: Annotated[Path, typer.Option()],
    max_chars: Annotated[int, typer.Option(min=1)] = 8000,
    min_chinese_ratio: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.3,
) -> None:
    """Drop abnormally long or mostly non-Chinese responses; print rejections per rule."""
    from services.annotation.commands import dump, filter_bench
    from services.annotation.filters import FilterConfig

    config = FilterConfig(max_chars=max_chars, min_chinese_ratio=min_chinese_ratio)
    typer.echo(dump(filter_bench(bench, out, config)))


@app.command("rewards")
@clear_errors
def rewards_command(
    bench: Annotated[list[Path], typer.Argument(exists=True, dir_okay=False, help="CheemsBench files.")],
    out: Annotated[Path, typer.Option(help="Rewards jsonl to write.")],
    model: Annotated[str, typer.Option(help="Checkpoint directory (scored in-process).")] = "",
    model_url: Annotated[str, typer.Option(help="host:port of a running scorer instead.")] = "",
    token: Annotated[str, typer.Option(envvar="CHEEMS_SCORER_TOKEN")] = "",
) -> None:
    """Score every response of bench files: the rewards file `cheems eval` and distant supervision read."""
    from services.scorer.bench_rewards import write_bench_rewards

    if bool(model) == bool(model_url):
        raise typer.BadParameter("give exactly one of --model and --model-url")
    typer.echo(f"wrote {write_bench_rewards(bench, out, model, model_url, token)} rewards to {out}")


@app.command("ingest")
@clear_errors
def ingest_command(
    file: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="CheemsBench, CheemsPreference or raw jsonl.")
    ],
    db: DatabaseUrl = "sqlite:///cheems.db",
    bootstrap: Annotated[str, typer.Option(envvar="CHEEMS_KAFKA_BOOTSTRAP", help="Publish sample events here.")] = "",
) -> None:
    """Store prompts with responses (deduplicated); report rejected records with their line numbers."""
    from services.bus.client import Publisher
    from services.ingestion.records import parse_lines
    from services.ingestion.service import IngestionService
    from services.store.db import StoreConfig, create_engine_for
    from services.store.migrate import upgrade

    upgrade(db)
    parsed = parse_lines(file.read_text(encoding="utf-8").splitlines(), file)
    publisher = Publisher(bootstrap) if bootstrap else None
    summary = IngestionService(create_engine_for(StoreConfig(db)), publisher, source=file.name).ingest(
        parsed.samples, parsed.errors
    )
    for error in summary.errors:
        typer.echo(f"{file}:{error.line}: {error.field + ': ' if error.field else ''}{error.message}", err=True)
    typer.echo(
        f"received {summary.received}  stored {summary.stored}  duplicates {summary.duplicates}  "
        f"rejected {summary.rejected}"
    )


dev = typer.Typer(help="Local development helpers.", no_args_is_help=True)
app.add_typer(dev, name="dev")


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


@app.command("init-model")
@clear_errors
def init_model_command(
    out: Annotated[Path, typer.Option(help="Directory to write the checkpoint to.")],
    hidden_size: Annotated[int, typer.Option(min=8, help="Hidden size (multiple of 4).")] = 64,
    layers: Annotated[int, typer.Option(min=1)] = 2,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Create the tiny Qwen2-architecture RM with the real Qwen2 vocabulary (offline, seconds)."""
    from trainer.tiny import init_tiny_model

    typer.echo(f"wrote {init_tiny_model(out, hidden_size, layers, seed)}")


@app.command("convert-checkpoint")
@clear_errors
def convert_command(
    source: Annotated[Path, typer.Argument(exists=True, file_okay=False, help="Official CheemsRM checkpoint.")],
    out: Annotated[Path, typer.Option(help="Where to write the sequence-classification checkpoint.")],
) -> None:
    """Convert an official CheemsRM checkpoint (causal LM + v_head) to AutoModelForSequenceClassification."""
    from trainer.model import convert_v_head

    typer.echo(f"wrote {convert_v_head(source, out)}")


@app.command("train")
@clear_errors
def train_command(
    recipe: Annotated[str, typer.Option(help="Recipe name: tiny-cpu, qwen25-paper.")] = "tiny-cpu",
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a config field: key=value.")] = None,
    nproc: Annotated[
        int, typer.Option(min=1, envvar="PET_NPROC_PER_NODE", help="Processes on this machine: one per GPU.")
    ] = 1,
    nnodes: Annotated[int, typer.Option(min=1, envvar="PET_NNODES", help="Machines (pods) in the job.")] = 1,
    rdzv_endpoint: Annotated[
        str, typer.Option(envvar="PET_RDZV_ENDPOINT", help="host:port of the c10d rendezvous (multi-node).")
    ] = "",
    rdzv_id: Annotated[str, typer.Option(envvar="PET_RDZV_ID", help="Job id shared by every node.")] = "cheems",
) -> None:
    """Train a Bradley-Terry reward model; through torchrun with --nproc > 1 or on several nodes.

    Multi-node (Kubernetes Indexed Job, Kubeflow PyTorchJob): every node runs the same command with
    --nnodes and --rdzv-endpoint; torchrun's c10d rendezvous assigns the ranks.
    """
    import subprocess
    import sys

    from trainer.launch import LaunchConfig, torchrun_args

    args = ["--recipe", recipe] + [a for kv in set_ or [] for a in ("--set", kv)]
    try:
        launch = LaunchConfig(nproc, nnodes, rdzv_endpoint, rdzv_id)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    if launch.distributed:
        cmd = [sys.executable, "-m", "torch.distributed.run", *torchrun_args(launch), "-m", "trainer.train", *args]
        raise typer.Exit(subprocess.call(cmd))
    from trainer.train import main as train_main

    try:
        train_main(args)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


@app.command("serve")
@clear_errors
def serve_command(
    model: Annotated[Path, typer.Option(exists=True, file_okay=False, help="Checkpoint directory.")],
    grpc_port: Annotated[int, typer.Option(help="gRPC port (0 = any free port).")] = 50051,
    http_port: Annotated[int, typer.Option(help="HTTP port (0 = any free port, -1 = none).")] = 8000,
    backend: Annotated[str, typer.Option(help="triton (PyTriton, or --triton-url) or torch (in-process).")] = "triton",
    triton_url: Annotated[str, typer.Option(help="host:port of an external Triton gRPC endpoint.")] = "",
    host: ListenHost = "127.0.0.1",
    max_responses: Annotated[int, typer.Option(min=1)] = 64,
    max_length: Annotated[int, typer.Option(min=1)] = 2048,
    truncation: Annotated[str, typer.Option(help="error | left | right for over-length inputs.")] = "error",
    max_batch_size: Annotated[int, typer.Option(min=1, help="Triton dynamic batch, in responses.")] = 64,
    token: Annotated[str, typer.Option(envvar="CHEEMS_SCORER_TOKEN", help="Require this bearer token.")] = "",
    tls_cert: Annotated[str, typer.Option(help="PEM certificate (with --tls-key) for TLS on gRPC.")] = "",
    tls_key: Annotated[str, typer.Option()] = "",
    device: Annotated[str, typer.Option()] = "cpu",
    max_batch_items: Annotated[int, typer.Option(min=1, help="Items per ScoreBatch call.")] = 128,
    max_queries: Annotated[int, typer.Option(min=1, help="Queries per HTTP /get_reward call.")] = 4096,
    max_message_bytes: Annotated[
        int, typer.Option(min=1024, help="Largest request in bytes (gRPC message and HTTP body).")
    ] = 64 * 1024 * 1024,
    max_call_seconds: Annotated[
        float, typer.Option(help="Limit per call; calls without a deadline (grpcurl, Go stubs) get this one.")
    ] = 300.0,
    triton_restarts: Annotated[
        int, typer.Option(min=0, help="Restarts of a crashed Triton before giving up (exit 1, liveness fails).")
    ] = 3,
    drain_seconds: Annotated[float, typer.Option(help="Grace for in-flight calls on SIGTERM.")] = 10.0,
) -> None:
    """Serve a reward model: gRPC cheems.v1.RewardService/Score and HTTP POST /get_reward."""
    from services.scorer.config import ScorerConfig
    from services.scorer.server import serve

    try:
        config = ScorerConfig(
            model=str(model),
            grpc_port=grpc_port,
            http_port=http_port,
            backend=backend,
            triton_url=triton_url,
            host=host,
            max_responses=max_responses,
            max_length=max_length,
            truncation=truncation,
            max_batch_size=max_batch_size,
            auth_token=token,
            tls_cert=tls_cert,
            tls_key=tls_key,
            device=device,
            max_batch_items=max_batch_items,
            max_queries=max_queries,
            max_message_bytes=max_message_bytes,
            max_call_seconds=max_call_seconds,
            triton_restarts=triton_restarts,
            drain_seconds=drain_seconds,
        )
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    serve(config)


@app.command("export-triton")
@clear_errors
def export_triton_command(
    model: Annotated[Path, typer.Option(exists=True, file_okay=False, help="Checkpoint directory.")],
    out: Annotated[Path, typer.Option(help="Model repository directory to write.")],
    name: Annotated[str, typer.Option()] = "cheems_rm",
    max_batch_size: Annotated[int, typer.Option(min=1)] = 64,
    device: Annotated[str, typer.Option(help="cpu, or cuda for KIND_GPU instances.")] = "cpu",
) -> None:
    """Export a checkpoint as a Triton model repository (Python backend) for the official Triton image."""
    from services.scorer.model_repository import export_triton_repository

    typer.echo(f"wrote {export_triton_repository(model, out, name, max_batch_size, device=device)}")


@app.command("score")
@clear_errors
def score_command(
    prompt: Annotated[str, typer.Option(help="The user prompt.")],
    response: Annotated[list[str], typer.Option(help="A response to score; repeat for several.")],
    model_url: Annotated[str, typer.Option(help="host:port of the scorer's gRPC endpoint.")] = "localhost:50051",
    system_prompt: Annotated[str, typer.Option()] = "",
    token: Annotated[str, typer.Option(envvar="CHEEMS_SCORER_TOKEN")] = "",
    timeout: Annotated[float, typer.Option(help="Deadline in seconds.")] = 30.0,
) -> None:
    """Score responses with a running scorer (a quick check)."""
    import grpc

    from services.scorer.client import RewardClient

    try:
        with RewardClient(model_url, token=token, timeout=timeout) as client:
            reply = client.score_full(prompt, response, system_prompt)
    except grpc.RpcError as e:
        typer.echo(f"error: {e.code().name}: {e.details()}", err=True)
        raise typer.Exit(2) from None
    for i, (text, score) in enumerate(zip(response, reply.scores, strict=True)):
        mark = "*" if i == reply.best_index else " "
        typer.echo(f"{mark} {score:+.4f}  {text[:60]}")


db_app = typer.Typer(help="The store's database.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
@clear_errors
def db_upgrade_command(
    db: DatabaseUrl = "sqlite:///cheems.db",
) -> None:
    """Migrate the database to the newest schema (safe to run from several replicas at once)."""
    from services.store.migrate import current_revision, upgrade

    upgrade(db)
    typer.echo(f"database at revision {current_revision(db)}")


service = typer.Typer(help="Run a long-lived service (what the Kubernetes Deployments run).", no_args_is_help=True)
app.add_typer(service, name="service")


@service.command("ingestion")
@clear_errors
def service_ingestion(
    db: DatabaseUrl = "sqlite:///cheems.db",
    bootstrap: Annotated[str, typer.Option(envvar="CHEEMS_KAFKA_BOOTSTRAP", help="Publish sample events here.")] = "",
    port: Annotated[int, typer.Option(help="gRPC port (0 = any free port).")] = 50052,
    host: ListenHost = "127.0.0.1",
) -> None:
    """gRPC cheems.v1.IngestionService with health, until SIGTERM."""
    from services.hosting import HostConfig
    from services.ingestion.server import serve

    serve(db, bootstrap, HostConfig(port=port, host=host))


@service.command("annotation")
@clear_errors
def service_annotation(
    db: DatabaseUrl = "sqlite:///cheems.db",
    port: Annotated[int, typer.Option(help="gRPC port (0 = any free port).")] = 50053,
    host: ListenHost = "127.0.0.1",
) -> None:
    """gRPC cheems.v1.AnnotationService with health, until SIGTERM."""
    from services.annotation.server import serve
    from services.hosting import HostConfig

    serve(db, HostConfig(port=port, host=host))


@service.command("evaluation")
@clear_errors
def service_evaluation(
    bootstrap: KafkaBootstrap,
    bench_root: Annotated[
        Path, typer.Option(envvar="CHEEMS_BENCH_ROOT", help="StartRun's bench files are read from under here.")
    ],
    db: DatabaseUrl = "sqlite:///cheems.db",
    port: Annotated[int, typer.Option(help="gRPC port (0 = any free port).")] = 50056,
    host: ListenHost = "127.0.0.1",
) -> None:
    """gRPC cheems.v1.EvaluationService (StartRun, GetRun) with health, until SIGTERM."""
    from evaluator.server import EvaluationConfig, serve
    from services.hosting import HostConfig

    if not bench_root.is_dir():
        raise typer.BadParameter(f"{bench_root} is not a directory", param_hint="--bench-root")
    serve(db, bootstrap, EvaluationConfig(bench_root, HostConfig(port=port, host=host)))


@service.command("eval-worker")
@clear_errors
def service_eval_worker(
    scorer_url: Annotated[str, typer.Option(envvar="CHEEMS_SCORER_URL", help="host:port of the scorer's gRPC.")],
    bootstrap: KafkaBootstrap,
    token: Annotated[str, typer.Option(envvar="CHEEMS_SCORER_TOKEN")] = "",
    health_port: Annotated[int, typer.Option(help="gRPC health port (-1 = none).")] = 50054,
    host: ListenHost = "127.0.0.1",
) -> None:
    """Score worker: score requests from Kafka -> RewardService -> scores to Kafka, until SIGTERM."""
    from evaluator.pipeline import serve

    serve("worker", bootstrap, "", scorer_url, token=token, health_port=health_port, health_host=host)


@service.command("eval-sink")
@clear_errors
def service_eval_sink(
    bootstrap: KafkaBootstrap,
    db: DatabaseUrl = "sqlite:///cheems.db",
    health_port: Annotated[int, typer.Option(help="gRPC health port (-1 = none).")] = 50055,
    host: ListenHost = "127.0.0.1",
) -> None:
    """Result sink: scores from Kafka -> eval_scores; completed runs -> metrics and eval results, until SIGTERM."""
    from evaluator.pipeline import serve

    serve("sink", bootstrap, db, health_port=health_port, health_host=host)


if __name__ == "__main__":
    app()
