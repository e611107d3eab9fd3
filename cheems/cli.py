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
        Path, typer.Option(exists=True, dir_okay=False, help='jsonl of {"input", "id", "reward"}.')
    ],
    semantics: Annotated[
        str,
        typer.Option(
            help="paper: a reward tie is wrong in both metrics; official: a tie does not break exact match."
        ),
    ] = "paper",
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the metrics as JSON here.")] = None,
    report: Annotated[
        Path | None, typer.Option(help="Write results.json, per_category.png and README.md here.")
    ] = None,
    ece_bins: Annotated[int, typer.Option(min=1, help="Bins of the calibration error.")] = 5,
) -> None:
    """Score a reward model on CheemsBench from a file of its rewards."""
    from evaluator.evaluate import evaluate_files
    from evaluator.metrics import Semantics
    from evaluator.report import format_table, write_json, write_report

    if semantics not in {s.value for s in Semantics}:
        raise typer.BadParameter(
            f"must be 'paper' or 'official', got {semantics!r}", param_hint="--semantics"
        )
    result = evaluate_files(bench, rewards, Semantics(semantics), ece_bins)
    typer.echo(format_table(result))
    if json_out:
        write_json(result, json_out)
        typer.echo(f"\nwrote {json_out}")
    if report:
        for path in write_report(result, report):
            typer.echo(f"wrote {path}")


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
    nproc: Annotated[int, typer.Option(min=1, help="Processes on this machine (torchrun).")] = 1,
) -> None:
    """Train a Bradley-Terry reward model; with --nproc > 1 through torchrun."""
    import subprocess
    import sys

    args = ["--recipe", recipe] + [a for kv in set_ or [] for a in ("--set", kv)]
    if nproc > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "trainer.train", *args]
        raise typer.Exit(subprocess.call(cmd))
    from trainer.train import main as train_main

    try:
        train_main(args)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


if __name__ == "__main__":
    app()
