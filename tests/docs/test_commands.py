"""Every command the front page (README.md; README.zh-CN.md shows the same ones: test_front_pages.py) and the
manual's quick start (docs/index.md) give a newcomer works: it runs here for real, or, where it cannot (a GPU,
a 7B model, a cluster, a container engine, a server that runs until stopped, `make test` itself), it is checked
to be a valid invocation without running it.

How each command is checked is written down in COMMANDS, by the command's prefix; a command on those pages that
no row covers fails with a message asking to classify it, and a row no command uses fails as stale. The checks:

- run: the command as written, in a folder shared by the module (the sample copied in as `data/sample`), as a
  user runs it (a subprocess); it must exit 0, print something (a report, a token, training's log) and write the
  files the row names. `extra` is appended (an override that keeps it under about a minute here), `URL` stands
  for a SQLite file, and `before` is what the page's own set-up (`make train`) does first; each is said in the
  row's `why`.
- parse: `cheems ...` through click's `make_context` on each resolved (sub)command of the typer app, so every
  option, its value's type and every argument parse as they would when run.
- make: `make -n TARGET` (a dry run: the Makefile has the target; nothing executes).
- torchrun: torchrun's own parser takes the launch options, the module is trainer.train, and trainer.train's
  parser takes the rest (the recipe exists, every --set key is a TrainConfig field and its value parses).
- kubectl: `kubectl apply -k DIR` names a kustomization in the checkout.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from typer import _click as click  # typer vendors click: its commands and errors are these, not click's
from typer.core import TyperGroup

from tests.docs.test_front_pages import commands

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "index.md"]  # the front page and the manual's quick start


@dataclass(frozen=True)
class Check:
    how: str  # run | parse | make | torchrun | kubectl
    why: str
    extra: tuple[str, ...] = ()  # run: appended to the command
    before: tuple[str, ...] = ()  # run: a `cheems` command the page's set-up runs first
    writes: tuple[str, ...] = ()  # run: files it must leave in the shared folder


COMMANDS: dict[str, Check] = {
    "make demo": Check("make", "starts every service and runs the loop (1.5 min); tests/system run the demo"),
    "make test": Check("make", "the whole suite, this file among it"),
    "make train": Check("make", "two torchrun processes; tests/trainer launch the same"),
    "make image": Check("make", "needs a container engine (docker or buildah); tests/docker check its files"),
    "make dev-secrets": Check("make", "writes into the checkout's k8s/overlays/dev/secrets/"),
    "make docs": Check("make", "serves until Ctrl-C; tests/docs/test_site.py builds the same site strictly"),
    "cheems eval ": Check("run", "2 s on the sample, as written", writes=("out/results.json", "out/report/README.md")),
    "cheems train --recipe tiny-cpu": Check(
        "run",
        "as written 45 steps, about 63 s here; a fifth of an epoch (2 steps, then the evaluation and the saved "
        "model) runs the same path. `make train` makes the tiny model first (`cheems init-model`): here the "
        "session's tiny checkpoint (`init_tiny_model`, what `cheems init-model` writes) is copied in instead",
        extra=("--set", "epochs=0.2"),
        before=("init-model", "--out", "out/models/tiny"),
        writes=("out/train-tiny/model/config.json",),
    ),
    "torchrun ": Check("torchrun", "8 GPUs and a 7B model"),
    "cheems serve ": Check("parse", "a server that runs until stopped, on fixed ports (50051, 8000)"),
    "cheems score ": Check("parse", "needs a scorer listening on localhost:50051"),
    "cheems annotators add ": Check("run", "1 s; URL is a placeholder: a SQLite file in the shared folder"),
    "cheems service annotation ": Check("parse", "a service that runs until stopped, needs Kafka at HOST:9092"),
    "kubectl apply -k ": Check("kubectl", "needs a cluster; tests/k8s render and validate the overlays"),
}


def page_commands() -> list[str]:
    found: list[str] = []
    for page in PAGES:
        found += [c for c in commands(page.read_text(encoding="utf-8")) if c not in found]
    return found


def row(command: str) -> str:
    matches = [prefix for prefix in COMMANDS if command.startswith(prefix)]
    assert matches, (
        f"{command!r} is on a front or quick-start page but not classified: add a row to COMMANDS in "
        f"{Path(__file__).name} saying how it is checked (run, parse, make, torchrun or kubectl) and why"
    )
    return max(matches, key=len)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Callable[..., Path]) -> Path:
    """A user's checkout as far as the commands read it: the bundled sample under data/sample, and the tiny
    model `cheems init-model --out out/models/tiny` writes (the session's, copied: no process to make it)."""
    folder = tmp_path_factory.mktemp("commands")
    shutil.copytree(ROOT / "data" / "sample", folder / "data" / "sample")
    shutil.copytree(tiny_checkpoint(), folder / "out" / "models" / "tiny")
    return folder


def cheems(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "cheems_cli", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def parse_cli(args: list[str]) -> click.Context:
    """`cheems ARGS` parsed as click would before running it: the root's options, then each (sub)command's."""
    from cheems_cli.main import app

    command: click.Command = typer.main.get_command(app)
    ctx = command.make_context("cheems", list(args))
    while isinstance(command, TyperGroup):
        rest = [*ctx._protected_args, *ctx.args]  # what the group left for its subcommand (click's own split)
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        command, ctx = sub, sub.make_context(name, rest, parent=ctx)
    return ctx


def check_make(tokens: list[str]) -> None:
    assert len(tokens) == 2, f"{shlex.join(tokens)}: expected `make TARGET`"
    done = subprocess.run(["make", "-n", "-C", str(ROOT), tokens[1]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"make -n {tokens[1]}: {done.stderr.strip()}"


def check_torchrun(tokens: list[str]) -> None:
    from torch.distributed.run import get_args_parser

    from trainer.train import parse_args

    launch = get_args_parser().parse_args(tokens[1:])
    assert launch.module and launch.training_script == "trainer.train", f"{shlex.join(tokens)}: not -m trainer.train"
    parse_args(launch.training_script_args)  # ValueError naming an unknown recipe, --set key or bad value


def check_kubectl(tokens: list[str]) -> None:
    assert tokens[:3] == ["kubectl", "apply", "-k"] and len(tokens) == 4, f"{shlex.join(tokens)}: expected -k DIR"
    assert (ROOT / tokens[3] / "kustomization.yaml").is_file(), f"{tokens[3]} holds no kustomization.yaml"


def run(tokens: list[str], check: Check, workdir: Path) -> None:
    assert tokens[0] == "cheems", "only `cheems` commands run for real here"
    if check.before and not (workdir / check.before[-1]).exists():
        assert cheems(list(check.before), workdir).returncode == 0, f"cheems {shlex.join(check.before)} failed"
    url = f"sqlite:///{workdir / 'cheems.db'}"
    args = [url if t == "URL" else t for t in tokens[1:]] + list(check.extra)
    done = cheems(args, workdir)
    assert done.returncode == 0, f"cheems {shlex.join(args)} exited {done.returncode}: {done.stderr[-2000:]}"
    assert (done.stdout + done.stderr).strip(), f"cheems {shlex.join(args)} printed nothing"
    for path in check.writes:
        assert (workdir / path).is_file(), f"cheems {shlex.join(args)} did not write {path}"


@pytest.mark.parametrize("command", page_commands(), ids=lambda c: c[:48])
def test_every_command_runs_or_is_a_valid_invocation(command: str, workdir: Path) -> None:
    check = COMMANDS[row(command)]
    tokens = shlex.split(command)
    if check.how == "run":
        run(tokens, check, workdir)
    elif check.how == "parse":
        assert tokens[0] == "cheems"
        parse_cli(tokens[1:])
    elif check.how == "make":
        check_make(tokens)
    elif check.how == "torchrun":
        check_torchrun(tokens)
    elif check.how == "kubectl":
        check_kubectl(tokens)
    else:
        pytest.fail(f"row {row(command)!r}: unknown check {check.how!r}")


def test_the_pages_show_commands_and_every_row_is_used() -> None:
    found = page_commands()
    assert len(found) >= 10
    used = {row(c) for c in found}
    assert set(COMMANDS) == used, f"rows no command on the pages uses (stale): {sorted(set(COMMANDS) - used)}"


def test_an_unclassified_command_fails_naming_the_table() -> None:
    with pytest.raises(AssertionError, match="add a row to COMMANDS"):
        row("cheems frobnicate --all")


def test_the_checks_refuse_invalid_invocations() -> None:
    """Each non-running check can fail: a misspelled option, a wrong value, a missing target, key or folder."""
    with pytest.raises(click.exceptions.NoSuchOption):
        parse_cli(["serve", "--modle", "out/train-tiny/model"])
    with pytest.raises(click.exceptions.BadParameter):
        parse_cli(["service", "annotation", "--http-port", "eighty"])
    with pytest.raises(click.exceptions.UsageError):
        parse_cli(["frobnicate"])
    with pytest.raises(AssertionError, match="make -n no-such-target"):
        check_make(["make", "no-such-target"])
    with pytest.raises(ValueError, match="epoch"):
        check_torchrun(shlex.split("torchrun --nproc_per_node=8 -m trainer.train --recipe tiny-cpu --set epoch=1"))
    with pytest.raises(ValueError, match="recipe"):
        check_torchrun(shlex.split("torchrun -m trainer.train --recipe no-such-recipe"))
    with pytest.raises(AssertionError, match="kustomization"):
        check_kubectl(["kubectl", "apply", "-k", "k8s/overlays/no-such-overlay"])
