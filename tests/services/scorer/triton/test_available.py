"""Whether the scorer can serve through Triton as configured: without PyTriton (the `triton` extra, which needs
numpy<2) starting Triton is refused in one line; `--backend torch`, `--triton-url` and `export-triton` need none."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cheems.extras import MissingExtra
from services.scorer.triton.available import require_triton


@pytest.fixture
def no_pytriton(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a GPU host whose numpy 2 keeps nvidia-pytriton out."""
    for name in [m for m in sys.modules if m == "pytriton" or m.startswith("pytriton.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pytriton", None)


def test_starting_triton_without_pytriton_is_one_line_naming_the_ways_out(no_pytriton: None) -> None:
    with pytest.raises(MissingExtra) as caught:
        require_triton("triton", "")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("starting Triton")
    for way in ["--backend torch", "--triton-url", "pip install 'cheems[triton]'"]:
        assert way in message


def test_torch_and_an_external_triton_need_no_pytriton(no_pytriton: None) -> None:
    require_triton("torch", "")
    require_triton("triton", "triton:8001")


def test_installed_here_nothing_is_refused() -> None:
    require_triton("triton", "")


def test_export_triton_needs_no_pytriton(no_pytriton: None, tiny_model: Path, tmp_path: Path) -> None:
    from services.scorer.triton.repository import export_triton_repository

    target = export_triton_repository(tiny_model, tmp_path / "repo")
    assert (target / "config.pbtxt").exists() and (target / "1" / "model.py").exists()


def test_cheems_serve_without_pytriton_says_so_in_one_line(no_pytriton: None, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cheems_cli.main import app

    result = CliRunner().invoke(app, ["serve", "--model", str(tmp_path), "--backend", "triton", "--grpc-port", "0"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: starting Triton") and "--backend torch" in line
