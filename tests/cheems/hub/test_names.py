"""What a model string names: a directory, a Hub repository, or a clear refusal (no network, no cache)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cheems.errors import ModelError
from cheems.hub import HubModel, model_source, served_name


def test_a_directory_is_itself_and_an_org_name_goes_to_the_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert model_source(tmp_path) == tmp_path and model_source(str(tmp_path)) == tmp_path
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "tiny").mkdir(parents=True)
    assert model_source("org/tiny") == Path("org/tiny")  # a directory of that name wins over the Hub
    assert model_source("Qwen/Qwen2.5-72B-Instruct") == HubModel("Qwen/Qwen2.5-72B-Instruct")
    assert model_source("Qwen/Qwen2.5-0.5B@v1.0") == HubModel("Qwen/Qwen2.5-0.5B", "v1.0")
    assert model_source("org/m@refs/pr/3") == HubModel("org/m", "refs/pr/3")  # a revision may hold slashes
    assert model_source("org/m", revision="abc") == model_source("org/m@abc") == HubModel("org/m", "abc")
    assert str(HubModel("org/m", "abc")) == "org/m@abc" and served_name("org/m@abc") == "m"
    assert served_name(tmp_path / "org" / "tiny") == "tiny"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("/nowhere/model", "is not a directory"),
        ("./model", "is not a directory"),
        ("~/no-such-model-here", "is not a directory"),
        ("out/train/model", "is not a directory"),  # deeper than org/name: a path
        ("tiny", "neither a directory nor a Hugging Face Hub id"),  # no org: a mistyped directory, likelier
        ("org/bad--name", "neither a directory nor a Hugging Face Hub id"),
        ("org/m@", "empty revision"),
        ("", "no model given"),
    ],
)
def test_what_is_neither_is_refused_in_one_line(name: str, why: str) -> None:
    with pytest.raises(ModelError, match=why) as raised:
        model_source(name)
    assert "\n" not in str(raised.value)


def test_a_file_is_not_a_directory_and_two_revisions_clash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "weights").write_text("")
    with pytest.raises(ModelError, match="is not a directory"):
        model_source("org/weights")  # exists, so a path, though it reads like an id
    with pytest.raises(ModelError, match="two revisions"):
        model_source("org/m@a", revision="b")
    with pytest.raises(ModelError, match="no revision"):
        model_source(tmp_path, revision="main")
