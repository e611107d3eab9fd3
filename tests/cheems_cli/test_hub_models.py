"""Commands that take a model take a Hugging Face Hub id too, resolved in the cache (HF_HUB_OFFLINE=1 here):
`cheems rewards`, `serve`'s and `train`'s resolution, `export-triton`, and the one-line refusal of an id the
cache lacks. (A process reading HF_HOME and HF_HUB_OFFLINE from its environment: tests/cheems/hub.)"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from cheems_cli.main import app
from cheems_cli.models import hub_model_args
from cheems_cli.scoring import hub_config
from services.scorer.config import ScorerConfig
from services.scorer.models.loading import first_models

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample" / "human.jsonl"


def test_rewards_of_a_hub_id(hub_offline: Any, tmp_path: Path) -> None:
    """(Its weights equal its directory's: tests/cheems/hub/test_resolve.py.)"""
    bench, out = tmp_path / "bench.jsonl", tmp_path / "hub.jsonl"
    lines = SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)[:3]
    bench.write_text("".join(lines), encoding="utf-8")
    result = CliRunner().invoke(app, ["rewards", str(bench), "--model", "org/tiny", "--out", str(out)])
    assert result.exit_code == 0, result.output
    written = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    responses = sum(len(json.loads(line)["responses"]) for line in lines)
    assert len(written) == responses and all(isinstance(r["reward"], float) for r in written)


def test_an_id_the_cache_lacks_is_one_line_naming_it(hub_offline: Any, tmp_path: Path) -> None:
    out = str(tmp_path / "r.jsonl")
    for args in (
        ["rewards", str(SAMPLE), "--model", "org/absent", "--out", out],
        ["export-triton", "--model", "org/absent", "--out", out],
        ["train", "--set", "model=org/absent", "--set", f"out_dir={tmp_path}"],
    ):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert (
            result.output.startswith("error: org/absent is not in the Hugging Face cache")
            and "HF_HUB_OFFLINE" in result.output
        )
        assert result.output.count("\n") == 1


def test_serve_and_train_resolve_an_id_before_anything_starts(hub_offline: Any, tmp_path: Path) -> None:
    served = hub_config(ScorerConfig(model="org/tiny", grpc_port=0))
    assert (served.model, served.model_id) == (str(hub_offline.snapshot), "tiny")
    ref = first_models(ScorerConfig(model="org/tiny", grpc_port=0))[0]
    assert (ref.model_id, ref.path) == ("tiny", str(hub_offline.snapshot))  # services built without the CLI
    assert hub_model_args("tiny-cpu", ["model=org/tiny"]) == ["--set", f"model={hub_offline.snapshot}"]
    assert hub_model_args("tiny-cpu", [f"model={hub_offline.source}"]) == []  # a directory goes as it is


def test_export_triton_copies_a_cached_model_and_leaves_the_cache_alone(hub_offline: Any, tmp_path: Path) -> None:
    blobs = hub_offline.cache / "models--org--tiny" / "blobs"
    before = {b.name: hashlib.sha256(b.read_bytes()).hexdigest() for b in blobs.iterdir()}
    result = CliRunner().invoke(app, ["export-triton", "--model", "org/tiny", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    copy = tmp_path / "cheems_rm" / "1" / "model"
    assert (copy / "model.safetensors").is_file() and not (copy / "model.safetensors").is_symlink()
    assert before == {b.name: hashlib.sha256(b.read_bytes()).hexdigest() for b in blobs.iterdir()}
