"""What `cheems train` tells the user: the data counts, progress and the model's path, once, in one
process and under torchrun; plus the pieces (per-rank logging, the progress lines, the summary)."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trainer.data import Dataset, Example, Examples, LengthStats
from trainer.report import Progress, configure_logging, describe_data, summary
from trainer.train import parse_args

# max_length 64 drops some of the sample's responses (16 of 87), so the counts have something to say
MAX_LENGTH = 64
COUNTS = re.compile(
    r"(\d+) responses read, (\d+) kept, (\d+) dropped over max_length (\d+), (\d+) dropped without a pair, "
    r"(\d+) truncated; (\d+) pairs read, (\d+) kept, (\d+) dropped; (\d+) prompts read, (\d+) kept, (\d+) dropped"
)


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint: Callable[..., Path]) -> Path:
    return tiny_checkpoint(hidden_size=32, layers=2, seed=0)


@pytest.mark.parametrize("nproc", ["1", "2"], ids=["one-process", "torchrun"])
def test_cheems_train_reports_drops_progress_and_the_model_once(tiny: Path, tmp_path: Path, nproc: str) -> None:
    out = tmp_path / "run"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = [f"model={tiny}", f"out_dir={out}", f"max_length={MAX_LENGTH}", "epochs=1", "eval_files="]
    overrides += ["report_to=tensorboard,mlflow", f"tracking_uri={uri}"]
    cmd = [
        sys.executable,
        "-m",
        "cheems_cli",
        "train",
        "--nproc",
        nproc,
        *(a for kv in overrides for a in ("--set", kv)),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, check=False)
    said = run.stdout + run.stderr
    assert run.returncode == 0, said[-3000:]
    metadata = json.loads((out / "model" / "cheems_metadata.json").read_text(encoding="utf-8"))
    stats, steps = metadata["length_stats"], metadata["steps"]
    assert stats["dropped_responses"] > 0 and stats["dropped_pairs"] > 0

    counts = COUNTS.findall(said)
    assert len(counts) == 2, said  # when the data is read, and in the closing summary; never per rank
    read, kept, dropped, limit, unpaired, truncated, pairs_read, pairs_kept, pairs_dropped, *prompts = map(
        int, counts[0]
    )
    assert counts[0] == counts[1] and limit == MAX_LENGTH
    assert (read, dropped, unpaired, truncated) == (
        stats["responses"],
        stats["dropped_responses"],
        stats["unpaired_dropped"],
        stats["truncated"],
    )
    assert kept == read - dropped - unpaired and pairs_dropped == stats["dropped_pairs"]
    assert pairs_read == pairs_kept + pairs_dropped and prompts[2] == stats["dropped_prompts"]
    assert said.count(f"{dropped} of {read} responses") == 1  # the warning that names the cure

    assert [int(n) for n in re.findall(rf"step (\d+)/{steps} ", said)] == list(range(1, steps + 1))
    assert said.count("training done") == 1 and f"trained {steps} steps" in said
    assert said.count(f"model in {out / 'model'}") == 1
    assert "[rank 1] INFO" not in said  # other ranks only warn
    reported_by_rank_zero_only(out, uri, steps)


def reported_by_rank_zero_only(out: Path, uri: str, steps: int) -> None:
    """One TensorBoard event file and one MLflow run, holding metrics.jsonl's losses: rank 0 reported, alone."""
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    losses = [(r["step"], r["loss"]) for r in records]
    assert [s for s, _ in losses] == list(range(1, steps + 1))
    assert len(list((out / "tensorboard").glob("events.out.tfevents.*"))) == 1  # a second rank would add its own
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(s, pytest.approx(v)) for s, v in losses]
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "train/loss"))
    assert history == losses and records[0]["tracking"]["mlflow"] == run.info.run_id


def test_without_a_trainable_pair_the_error_gives_the_counts() -> None:
    stats = LengthStats(responses=3, dropped_responses=3, dropped_pairs=2, dropped_prompts=1)
    text = describe_data(Dataset(Examples.of([]), [], [], stats), 16)
    assert text == (
        "3 responses read, 0 kept, 3 dropped over max_length 16, 0 dropped without a pair, 0 truncated; "
        "2 pairs read, 0 kept, 2 dropped; 1 prompts read, 0 kept, 1 dropped"
    )


def test_summary_names_the_model_or_the_checkpoint_to_resume_from(tmp_path: Path) -> None:
    data = describe_data(Dataset(Examples.of([Example(0, 0, (1,)), Example(0, 1, (2,))]), [[0, 1]], [[(0, 1)]]), 64)
    done = summary(data, 7, 0.5, 0.75, tmp_path / "model", tmp_path / "ckpt")
    assert done.splitlines() == [
        "training done",
        f"  data: {data}",
        "  trained 7 steps, final loss 0.5000, CheemsBench overall 0.7500",
        f"  model in {tmp_path / 'model'}",
    ]
    stopped = summary(data, 3, 0.5, None, None, tmp_path / "ckpt")
    assert stopped.splitlines()[0] == "training stopped" and f"checkpoint in {tmp_path / 'ckpt'}" in stopped


@pytest.fixture
def root_logging() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    level, handlers = root.level, root.handlers[:]
    yield root
    root.setLevel(level)
    root.handlers[:] = handlers


def test_rank_zero_narrates_and_other_ranks_only_warn(root_logging: logging.Logger) -> None:
    root_logging.setLevel(logging.WARNING)  # as `cheems` leaves it before training in its own process
    configure_logging(0)
    assert root_logging.level == logging.INFO
    configure_logging(1)
    assert root_logging.level == logging.WARNING
    configure_logging(1, verbose=True)
    assert root_logging.level == logging.DEBUG


def test_each_line_names_its_rank_and_the_training_it_belongs_to(
    root_logging: logging.Logger, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHEEMS_TRAINING_ID", "t-7f3a")  # what the training service's local launcher sets
    monkeypatch.setenv("CHEEMS_LOG_FORMAT", "json")
    configure_logging(1)
    logging.getLogger("trainer.train").warning("rank 1 saw a NaN")
    record = json.loads(capsys.readouterr().err)
    assert (record["service"], record["rank"], record["training_id"]) == ("train", 1, "t-7f3a")
    monkeypatch.setenv("CHEEMS_LOG_FORMAT", "text")
    configure_logging(None)  # outside torchrun: no rank shown
    logging.getLogger("trainer.train").info("training done")
    assert capsys.readouterr().err.split(" ", 1)[1] == "INFO trainer.train: training done [training_id=t-7f3a]\n"


def test_progress_lines_come_every_n_steps_off_a_terminal(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="trainer.report")
    with Progress(total=7, initial=0, enabled=True, every=3, stream=io.StringIO()) as progress:
        for step in range(1, 8):
            progress.update(step, 0, 0.5, 1e-3)
    assert [re.match(r"step (\d+)/7 ", m).group(1) for m in caplog.messages] == ["1", "3", "6", "7"]  # type: ignore[union-attr]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_bar_on_a_terminal_and_nothing_when_off(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="trainer.report")
    terminal, quiet = Terminal(), io.StringIO()
    for stream, enabled in ((terminal, True), (quiet, False)):
        with Progress(total=2, initial=0, enabled=enabled, stream=stream) as progress:
            progress.update(1, 0, 0.5, 1e-3)
            progress.update(2, 0, 0.4, 1e-3)
    assert "2/2" in terminal.getvalue() and "loss=0.4000" in terminal.getvalue()
    assert quiet.getvalue() == "" and caplog.messages == []


@pytest.mark.parametrize("flags", [["-v"], []], ids=["verbose", "quiet"])
def test_cheems_v_reaches_the_training_processes(
    monkeypatch: pytest.MonkeyPatch, flags: list[str], tiny_checkpoint: Callable[..., Path]
) -> None:
    from typer.testing import CliRunner

    import trainer.launch
    from cheems_cli.main import app

    launched: list[list[str]] = []
    monkeypatch.setattr(trainer.launch, "launch", lambda config, args: launched.append(args) or 0)
    result = CliRunner().invoke(app, [*flags, "train", "--set", "epochs=2", "--set", f"model={tiny_checkpoint()}"])
    assert result.exit_code == 0, result.output
    config, verbose = parse_args(launched[0])  # what `python -m trainer.train` gets, in process or under torchrun
    assert config.epochs == 2 and verbose is bool(flags)
