"""`cheems eval`: bench metrics of a reward model (a rewards file, or scored through Kafka) or of a generative judge.

cheems eval open.jsonl human.jsonl --rewards rewards.jsonl
cheems eval rewardbench.jsonl --rewards rb_rewards.jsonl            # RewardBench rows, detected
cheems eval open.jsonl human.jsonl --judge-url http://127.0.0.1:8000/v1 --judge-model qwen2.5-72b-instruct
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cheems_cli.options import (
    AccountTokenFile,
    DatabaseUrl,
    KafkaBootstrap,
    ScorerUrl,
    account_token,
    clear_errors,
)

if TYPE_CHECKING:
    from cheems.formats.benchfile import BenchFormat
    from evaluator.metrics import Semantics

app = typer.Typer()


@app.command("eval")
@clear_errors
def eval_command(
    bench: Annotated[
        list[Path],
        typer.Argument(
            exists=True,
            dir_okay=False,
            help="Bench files (CheemsBench jsonl, or RewardBench rows: .jsonl, .json, .parquet); each is one subset "
            "named by its file stem.",
        ),
    ],
    scorer_url: ScorerUrl,
    bootstrap: KafkaBootstrap,
    db: DatabaseUrl,
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
    bench_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="Layout of the bench files: cheemsbench, rewardbench ({prompt, chosen, rejected, subset} rows; "
            "each RewardBench subset is a category) or auto (detected per file).",
        ),
    ] = "auto",
    judge_url: Annotated[
        str | None,
        typer.Option(help="Evaluate a generative judge instead: its OpenAI-compatible API, e.g. http://HOST:8000/v1."),
    ] = None,
    judge_model: Annotated[str | None, typer.Option(help="The judge's model name at --judge-url.")] = None,
    judge_api_key_env: Annotated[
        str | None, typer.Option(metavar="VAR", help="Environment variable holding the judge's API key.")
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Judge calls in flight at once.")] = 8,
    judge_retries: Annotated[
        int, typer.Option(min=0, help="Retries of a judge call that fails (connection, timeout, HTTP 429/5xx).")
    ] = 3,
    judge_timeout: Annotated[float, typer.Option(min=0.1, help="Seconds a judge call may take.")] = 60.0,
    token_file: AccountTokenFile = None,
) -> None:
    """Score a reward model (a rewards file, or through Kafka) or a generative judge on bench files."""
    from cheems.formats.benchfile import BenchFormat
    from evaluator.metrics import Semantics

    if semantics not in {s.value for s in Semantics}:
        raise typer.BadParameter(f"must be 'paper' or 'official', got {semantics!r}", param_hint="--semantics")
    if bench_format not in {f.value for f in BenchFormat}:
        choices = ", ".join(repr(f.value) for f in BenchFormat)
        raise typer.BadParameter(f"must be one of {choices}, got {bench_format!r}", param_hint="--format")
    sources = (rewards is not None) + via_kafka + (judge_url is not None)
    if sources != 1 or (via_kafka and not scorer_url):
        raise typer.BadParameter("give one of --rewards, --via-kafka with --scorer-url, or --judge-url")
    if judge_url is not None:
        return _judge(
            bench,
            BenchFormat(bench_format),
            Semantics(semantics),
            judge_url,
            judge_model,
            judge_api_key_env,
            concurrency,
            judge_retries,
            judge_timeout,
            json_out,
            report,
        )
    _reward_model(
        bench,
        BenchFormat(bench_format),
        Semantics(semantics),
        ece_bins,
        rewards,
        scorer_url,
        db,
        bootstrap,
        json_out,
        report,
        account_token(token_file, scorer_url) if via_kafka else "",
    )


def _reward_model(
    bench: list[Path],
    fmt: BenchFormat,
    semantics: Semantics,
    ece_bins: int,
    rewards: Path | None,
    scorer_url: str,
    db: str,
    bootstrap: str,
    json_out: Path | None,
    report: Path | None,
    token: str = "",
) -> None:
    from evaluator.evaluate import EvalOptions, evaluate_files, load_subsets
    from evaluator.report import format_table, write_json, write_report

    options = EvalOptions(semantics, ece_bins)
    if rewards is not None:
        result = evaluate_files(bench, rewards, options, fmt)
    else:
        from evaluator.pipeline.driver import run_via_kafka  # Kafka and the store: imported only when asked for

        load_subsets(bench, fmt=fmt)  # bad files or a wrong --format fail here; the run itself detects the layout
        result = run_via_kafka([str(b) for b in bench], scorer_url, db, bootstrap, options, token=token)
    typer.echo(format_table(result))
    if json_out:
        write_json(result, json_out)
        typer.echo(f"\nwrote {json_out}")
    if report:
        for path in write_report(result, report):
            typer.echo(f"wrote {path}")


def _judge(
    bench: list[Path],
    fmt: BenchFormat,
    semantics: Semantics,
    url: str,
    model: str | None,
    api_key_env: str | None,
    concurrency: int,
    retries: int,
    timeout: float,
    json_out: Path | None,
    report: Path | None,
) -> None:
    from evaluator.evaluate import load_subsets
    from evaluator.judging.output import format_judge_table, write_judge_json, write_judge_report
    from evaluator.judging.run import JudgeEvalConfig, judge_bench
    from services.annotation.judge.pairwise import OpenAICompatibleBackend

    if not model:
        raise typer.BadParameter("--judge-url needs --judge-model", param_hint="--judge-model")
    api_key = ""
    if api_key_env is not None:
        api_key = os.environ.get(api_key_env, "")
        if not api_key:
            raise typer.BadParameter(f"environment variable {api_key_env} is not set", param_hint="--judge-api-key-env")
    backend = OpenAICompatibleBackend(url, model, api_key, timeout=timeout, max_retries=retries)
    subsets = load_subsets(bench, fmt=fmt)
    evaluation = judge_bench(subsets, backend, JudgeEvalConfig(concurrency, semantics=semantics), progress=True)
    typer.echo(format_judge_table(evaluation, model))
    if json_out:
        write_judge_json(evaluation, model, json_out)
        typer.echo(f"\nwrote {json_out}")
    if report:
        for path in write_judge_report(evaluation, model, report):
            typer.echo(f"wrote {path}")
