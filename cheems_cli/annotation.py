"""`cheems resolve` and `cheems annotate ...`: annotations -> rankings -> CheemsPreference."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from cheems_cli.options import (
    AccountTokenFile,
    JudgeApiKey,
    JudgeApiKeyFile,
    JudgeBaseUrl,
    JudgeModel,
    TlsCa,
    account_token,
    clear_errors,
    secret_option,
)

app = typer.Typer()
annotate = typer.Typer(
    help="Annotation steps: simulate, judge, distant supervision, export, filter; reassign a task, void an annotation.",
    no_args_is_help=True,
)


@app.command("resolve")
@clear_errors
def resolve_command(
    annotations: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Raw annotations jsonl.")],
    out: Annotated[Path, typer.Option(help="CheemsBench jsonl to write.")],
    stats: Annotated[Path | None, typer.Option(help="Write statistics as JSON here.")] = None,
) -> None:
    """Resolve conflicting annotations into partial rankings (the paper's Algorithm 1)."""
    from services.annotation.files.resolve import resolve_file

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
    from services.annotation.files.commands import simulate

    if kind not in {"human", "ai"}:
        raise typer.BadParameter("must be human or ai", param_hint="--kind")
    typer.echo(f"wrote {simulate(bench, out, kind, noise, seed)} prompts to {out}")


@annotate.command("judge")
@clear_errors
def annotate_judge(
    bench: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Prompts with responses (bench layout).")],
    out: Annotated[Path, typer.Option(help="AI verdicts (cheems resolve input) to write.")],
    base_url: JudgeBaseUrl,
    model: JudgeModel,
    api_key: JudgeApiKey,
    api_key_file: JudgeApiKeyFile = None,
    local_model: Annotated[
        str, typer.Option(help="Or: a causal-LM checkpoint (directory or Hub id) run with transformers.")
    ] = "",
    both_orders: Annotated[bool, typer.Option(help="Judge both A/B orders; keep consistent verdicts.")] = False,
    concurrency: Annotated[int, typer.Option(min=1)] = 8,
    timeout: Annotated[float, typer.Option()] = 60.0,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Judge every pair of responses with an LLM (the paper's template); print position/length bias."""
    from cheems.hub import resolve_model
    from services.annotation.files.commands import dump, judge
    from services.annotation.judge.pairwise import JudgeConfig, OpenAICompatibleBackend, TransformersBackend

    if bool(local_model) == bool(base_url and model):
        raise typer.BadParameter("give --base-url with --model, or --local-model")
    api_key = secret_option(api_key, api_key_file, "--api-key-file")
    backend: Any = (
        TransformersBackend(str(resolve_model(local_model)))
        if local_model
        else OpenAICompatibleBackend(base_url, model, api_key, timeout)
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
    from services.annotation.files.commands import distant, dump

    typer.echo(dump(distant(ai, rewards, out, margin, tie_margin)))


@annotate.command("export")
@clear_errors
def annotate_export(
    bench: Annotated[
        list[Path], typer.Argument(exists=True, dir_okay=False, help="Ranked bench files of AI annotations.")
    ],
    out: Annotated[Path, typer.Option(help="CheemsPreference training file to write.")],
    human: Annotated[
        list[Path] | None,
        typer.Option(exists=True, dir_okay=False, help="Ranked bench file of human annotations: pairs as they are."),
    ] = None,
    debias: Annotated[
        bool,
        typer.Option(help="Balance the AI pairs whose chosen response is longer against those where it is shorter."),
    ] = True,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Export rankings as CheemsPreference pairs: the AI-annotated ones length-debiased, the --human ones untouched
    (as the paper builds CheemsPreference)."""
    from services.annotation.files.commands import dump, export

    typer.echo(dump(export(bench, out, debias, seed, human or [])))


@annotate.command("filter")
@clear_errors
def annotate_filter(
    bench: Annotated[Path, typer.Argument(exists=True, dir_okay=False)],
    out: Annotated[Path, typer.Option()],
    max_chars: Annotated[int, typer.Option(min=1)] = 8000,
    min_chinese_ratio: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.3,
    ratio_exempt: Annotated[
        list[str] | None,
        typer.Option(help="A category whose answers skip the Chinese-ratio rule (repeat; the paper exempts none)."),
    ] = None,
) -> None:
    """Drop abnormally long or mostly non-Chinese responses; print rejections per rule."""
    from services.annotation.algorithm.filters import FilterConfig
    from services.annotation.files.commands import dump, filter_bench

    exempt = frozenset(ratio_exempt or ())
    config = FilterConfig(max_chars=max_chars, min_chinese_ratio=min_chinese_ratio, ratio_exempt=exempt)
    typer.echo(dump(filter_bench(bench, out, config)))


@annotate.command("simulate-humans")
@clear_errors
def annotate_simulate_humans(
    annotation_url: Annotated[str, typer.Option(help="host:port of the annotation service's gRPC endpoint.")],
    token_dir: Annotated[
        Path,
        typer.Option(
            exists=True, file_okay=False, help="One annotator account's token per file, NAME.token (sorted by name)."
        ),
    ],
    bench: Annotated[
        list[Path], typer.Option(exists=True, dir_okay=False, help="Bench file whose ranks are the truth (repeat).")
    ],
    tls_ca: TlsCa,
    annotators: Annotated[
        int,
        typer.Option(
            min=1,
            help="Simulated people working at once; a prompt's triples go to different ones, so a prompt of "
            "five triples needs five (fewer leave its last triples open).",
        ),
    ] = 5,
    noise: Annotated[float, typer.Option(min=0.0, max=1.0, help="Rate of adjacent swaps in an ordering.")] = 0.1,
    seed: Annotated[int, typer.Option()] = 0,
    idle_seconds: Annotated[
        float, typer.Option(min=0.0, help="Keep looking this long for new tasks once none is open.")
    ] = 0.0,
    token_file: AccountTokenFile = None,
) -> None:
    """Simulated people work the annotation queue over gRPC (ListTasks, SubmitAnnotation) until it is empty, each
    signed in as an annotator account of --token-dir; an operator's token (--token-file) counts what is left."""
    import json
    from dataclasses import asdict

    from cheems.credentials import read_secret
    from cheems.formats.cheemsbench import read_bench
    from services.annotation.simulation.annotators import SimulationConfig, simulate_humans
    from services.channels import tls_credentials

    items = [item for path in bench for item in read_bench(path)]
    config = SimulationConfig(annotators=annotators, noise=noise, seed=seed, idle_seconds=idle_seconds)
    accounts = [(p.stem, read_secret(p, "--token-dir")) for p in sorted(token_dir.glob("*.token"))]
    token = account_token(token_file, annotation_url, bool(tls_ca))
    stats = simulate_humans(annotation_url, items, config, accounts, token, tls_credentials(tls_ca))
    typer.echo(json.dumps(asdict(stats)))


AnnotationUrl = Annotated[str, typer.Option(help="host:port of the annotation service's gRPC endpoint.")]
Reason = Annotated[str, typer.Option(help="Why (required): recorded with your account as the actor.")]


@annotate.command("reassign")
@clear_errors
def annotate_reassign(
    task_id: Annotated[str, typer.Argument(help="The open task to move.")],
    to: Annotated[str, typer.Option("--to", help="The annotator account that gets it.")],
    reason: Reason,
    annotation_url: AnnotationUrl,
    tls_ca: TlsCa,
    token_file: AccountTokenFile = None,
) -> None:
    """Give an open task to another annotator (operator or admin); its holder's submit is then refused."""
    from cheems.v1 import annotation_pb2 as pb

    request = pb.ReassignTaskRequest(task_id=task_id, annotator=to, reason=reason)
    reply = _annotation_call(annotation_url, tls_ca, token_file, lambda stub: stub.ReassignTask(request, timeout=30))
    typer.echo(f"task {task_id}: {to}'s now (held before by {reply.previous or 'nobody'})")


@annotate.command("void")
@clear_errors
def annotate_void(
    annotation_id: Annotated[str, typer.Argument(help="The annotation that no longer counts.")],
    reason: Reason,
    annotation_url: AnnotationUrl,
    tls_ca: TlsCa,
    token_file: AccountTokenFile = None,
) -> None:
    """Void an annotation (operator or admin): its prompt is resolved again without it, its task opens again."""
    from cheems.v1 import annotation_pb2 as pb

    request = pb.VoidAnnotationRequest(annotation_id=annotation_id, reason=reason)
    reply = _annotation_call(annotation_url, tls_ca, token_file, lambda stub: stub.VoidAnnotation(request, timeout=30))
    done = "voided" if reply.voided else "was void already"
    typer.echo(f"annotation {annotation_id} {done}; prompt {reply.prompt_id} resolved without it")


def _annotation_call(url: str, tls_ca: str, token_file: Path | None, call: Any) -> Any:
    """`call(stub)` on the AnnotationService at `url` with the account's token; a refusal as the kind of CheemsError
    its status stands for (`services.grpc_errors.error_of`)."""
    import grpc

    from cheems.v1 import annotation_pb2_grpc
    from services.channels import open_channel, tls_credentials
    from services.grpc_errors import error_of

    with open_channel(url, tls_credentials(tls_ca), token=account_token(token_file, url, bool(tls_ca))) as channel:
        try:
            return call(annotation_pb2_grpc.AnnotationServiceStub(channel))
        except grpc.RpcError as e:
            raise error_of(e, "annotation service") from None
