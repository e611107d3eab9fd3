"""Hub ids through huggingface_hub's cache: a real download from a local stand-in of the Hub (`hub_cache`, in
tests/conftest.py), then HF_HUB_OFFLINE=1 against that cache; and each refusal as one line of our error tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from cheems.errors import ModelError, NotFound, PermissionDenied
from cheems.hub import resolve_model
from cheems.model import load_model
from tests.cheems.hub.fake_hub import FakeHub, resolve_elsewhere


def test_the_download_fills_the_cache_huggingface_hub_lays_out_without_pickles(hub_cache: Any) -> None:
    repo = hub_cache.cache / "models--org--tiny"
    assert hub_cache.snapshot == repo / "snapshots" / hub_cache.commit
    assert (repo / "refs" / "main").read_text() == hub_cache.commit
    assert all(f.is_symlink() and f.resolve().parent == repo / "blobs" for f in hub_cache.snapshot.iterdir())
    wanted = {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}
    assert {f.name for f in hub_cache.snapshot.iterdir()} == wanted
    assert "org/tiny/pytorch_model.bin" not in hub_cache.downloads  # never fetched
    assert "Fetching 5 files" in hub_cache.progress  # huggingface_hub's own progress bar, shown


def test_a_process_told_hf_hub_offline_and_hf_home_by_its_environment_reads_that_cache(hub_cache: Any) -> None:
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(hub_cache.home), "HF_ENDPOINT": "http://127.0.0.1:9"}  # unused
    outcomes, _ = resolve_elsewhere(["org/tiny", "org/absent"], env)
    assert outcomes["org/tiny"] == ["ok", str(hub_cache.snapshot)]
    assert outcomes["org/absent"][0] == NotFound.__name__ and "HF_HUB_OFFLINE is set" in outcomes["org/absent"][1]


def test_offline_a_cached_id_loads_as_its_directory_does(hub_offline: Any) -> None:
    directory = resolve_model("org/tiny")
    assert directory == hub_offline.snapshot
    assert resolve_model("org/tiny", revision=hub_offline.commit) == directory  # pinned to a commit
    assert resolve_model(hub_offline.source) == hub_offline.source  # a directory: as it is
    (model, tokenizer), (expected, expected_tokenizer) = load_model(directory), load_model(hub_offline.source)
    theirs = expected.state_dict()
    assert all(torch.equal(value, theirs[name]) for name, value in model.state_dict().items())
    assert tokenizer("你好")["input_ids"] == expected_tokenizer("你好")["input_ids"]


def test_offline_refusals_name_the_model_and_what_to_do(hub_offline: Any) -> None:
    with pytest.raises(NotFound, match=r"org/absent is not in the Hugging Face cache .* HF_HUB_OFFLINE") as absent:
        resolve_model("org/absent")
    with pytest.raises(NotFound, match="org/tiny@v2 is not in the Hugging Face cache"):
        resolve_model("org/tiny@v2")
    with pytest.raises(ModelError, match=r"org/bins: only pickled weights \(pytorch_model.bin\), which are refused"):
        resolve_model("org/bins")
    with pytest.raises(ModelError, match="is not a directory"):
        resolve_model("out/models/absent")
    assert "\n" not in str(absent.value)
    with pytest.raises(ModelError, match="not a directory"):
        load_model("org/tiny")  # loading takes a directory; ids are resolved where a command starts


def test_online_refusals_map_onto_the_error_tree(hub_cache: Any, tmp_path: Path) -> None:
    bins = tmp_path / "bins"
    bins.mkdir()
    (bins / "config.json").write_text("{}")
    (bins / "pytorch_model.bin").write_bytes(b"pickle")
    with FakeHub({"org/bins": bins, "org/tiny": hub_cache.source}, gated={"org/gated"}) as hub:
        env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "home")}
        outcomes, _ = resolve_elsewhere(["org/gated", "org/absent", "org/bins", "org/tiny@v9"], env)
    assert outcomes["org/gated"][0] == PermissionDenied.__name__ and "HF_TOKEN" in outcomes["org/gated"][1]
    assert outcomes["org/absent"] == [NotFound.__name__, outcomes["org/absent"][1]]
    assert "no such model on the Hugging Face Hub" in outcomes["org/absent"][1]
    assert outcomes["org/bins"] == [ModelError.__name__, outcomes["org/bins"][1]]
    assert "no *.safetensors weights" in outcomes["org/bins"][1] and "org/bins/pytorch_model.bin" not in hub.downloads
    assert outcomes["org/tiny@v9"][0] == NotFound.__name__ and "no revision 'v9'" in outcomes["org/tiny@v9"][1]


def test_download_bars_show_though_loading_turned_them_off() -> None:
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    from cheems.hub.resolve import download_progress

    was_off = are_progress_bars_disabled()
    disable_progress_bars()  # as cheems.model.quiet_transformers does
    try:
        with download_progress():
            assert not are_progress_bars_disabled()
        assert are_progress_bars_disabled()
    finally:
        if not was_off:
            enable_progress_bars()
