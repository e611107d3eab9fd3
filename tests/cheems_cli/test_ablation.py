"""`cheems ablation` end to end: a real SQLite store (human rankings on four sample prompts, AI ones on four others),
the training service started in this process, two real tiny trainings through torchrun (human, then the distant
recipe it supervises), each model evaluated on two
bench files; the table, the JSON and the chart; a recipe with no pair is a row saying why; an unknown recipe is
refused naming the valid ones."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cheems_cli.main import app
from evaluator.report import from_json
from services.store import registry
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from tests.trainer.conftest import SAMPLE_HUMAN, SAMPLE_OPEN, seed_sample
from trainer.datasets.recipes import DATASET_RECIPES

pytestmark = pytest.mark.slow  # real trainings: runs early (tests/conftest.py)

FAST = ("--set", "epochs=1", "--set", "max_length=128", "--set", "micro_batch_size=8", "--set", "progress=false")


def store(tmp_path: Path, ai: bool) -> str:
    url = f"sqlite:///{tmp_path / 'cheems.db'}"
    upgrade(url)
    engine = create_engine_for(StoreConfig(url))
    seed_sample(engine, 0, 4, "human")
    if ai:
        seed_sample(engine, 4, 4, "ai")
    engine.dispose()
    return url


def bench(tmp_path: Path) -> str:
    """Three prompts of each sample subset, as two files (subsets `open` and `human`)."""
    paths = []
    for source in (SAMPLE_OPEN, SAMPLE_HUMAN):
        path = tmp_path / "bench" / source.name
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(source.read_text(encoding="utf-8").splitlines(keepends=True)[:3]), encoding="utf-8")
        paths.append(str(path))
    return ",".join(paths)


def test_trains_each_recipe_human_first_and_prints_table_4(
    tmp_path: Path, tiny_checkpoint: Callable[..., Path]
) -> None:
    db = store(tmp_path, ai=True)
    args = ["ablation", "--bench", bench(tmp_path), "--db", db, "--data-dir", str(tmp_path / "data")]
    args += ["--model", str(tiny_checkpoint()), "--recipes", "human+ai-distant", *FAST, "--poll", "0.3"]
    args += ["--json", str(tmp_path / "t4.json"), "--chart", str(tmp_path / "t4.png")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "t4.json").read_text(encoding="utf-8"))
    human, mixed = data["runs"]  # human added first: it supervises the distant recipe
    assert [r["recipe"] for r in data["runs"]] == ["human", "human+ai-distant"]
    assert all(r["error"] == "" and r["seed"] == 0 for r in data["runs"]), data["runs"]
    assert mixed["supervisor"] == human["model_id"] != "" and human["supervisor"] == ""
    engine = create_engine_for(StoreConfig(db))
    with session_scope(engine) as session:
        datasets = {d.id: d for d in registry.list_datasets(session)}
        models = {m.id: m for m in registry.list_models(session)}
    for run in data["runs"]:  # the pairs are the dataset's, the figures the model's final evaluation
        dataset, model = datasets[run["dataset_id"]], models[run["model_id"]]
        assert (dataset.recipe, dataset.pairs, dataset.supervisor_model_id) == (
            run["recipe"],
            run["pairs"],
            run["supervisor"] or None,
        )
        metadata = json.loads((Path(model.path) / "cheems_metadata.json").read_text(encoding="utf-8"))
        result_of_training = from_json(metadata["final_eval"])
        assert run["overall"] == pytest.approx(result_of_training.overall) == pytest.approx(model.overall)
        assert set(run["subsets"]) == {"open", "human"}
        assert run["subsets"]["human"]["accuracy"] == result_of_training.subsets["human"].accuracy
    engine.dispose()
    assert [r["recipe"] for r in data["rows"]] == ["human", "human+ai-distant"]
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("Recipe"))
    assert lines[header].split()[-1] == "Note" and "human Exact." in lines[header]
    table = {line.split()[0]: line.split() for line in lines[header + 2 : header + 4]}
    assert table["human"][:5] == ["human", "Human", "subset", "0", str(human["pairs"])]
    assert table["human+ai-distant"][1:4] == ["-", "0", str(mixed["pairs"])]  # a recipe Table 4 has no row for
    assert float(table["human+ai-distant"][4]) == pytest.approx(mixed["overall"], abs=5e-5)
    assert float(table["human+ai-distant"][5]) == pytest.approx(mixed["subsets"]["open"]["accuracy"], abs=5e-5)
    assert (tmp_path / "t4.png").read_bytes()[:4] == b"\x89PNG"


def test_a_recipe_without_pairs_is_a_row_saying_why(tmp_path: Path) -> None:
    db = store(tmp_path, ai=False)
    args = ["ablation", "--bench", bench(tmp_path), "--db", db, "--data-dir", str(tmp_path / "data")]
    result = CliRunner().invoke(app, [*args, "--recipes", "ai,ai-debias"])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if line.startswith("ai")]
    assert len(rows) == 2 and all("no preference pair among 4 ranked prompts" in row for row in rows), rows


def test_an_unknown_recipe_is_refused_naming_the_valid_ones(tmp_path: Path) -> None:
    args = ["ablation", "--bench", bench(tmp_path), "--db", f"sqlite:///{tmp_path / 'x.db'}", "--recipes", "human,gpt"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "'gpt' is unknown" in result.output
    assert all(name in result.output for name in DATASET_RECIPES)
    assert not (tmp_path / "x.db").exists()  # refused before anything was started


def test_a_missing_bench_file_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["ablation", "--bench", str(tmp_path / "none.jsonl")])
    assert result.exit_code == 2 and "not a file" in result.output


def test_a_set_option_without_key_and_value_is_refused(tmp_path: Path) -> None:
    args = ["ablation", "--bench", bench(tmp_path), "--db", f"sqlite:///{tmp_path / 'x.db'}", "--set", "epochs"]
    result = CliRunner().invoke(app, args, env={"TERMINAL_WIDTH": "1000"})
    assert result.exit_code == 2 and "--set" in result.output and "expected key=value" in result.output
    assert not (tmp_path / "x.db").exists()
