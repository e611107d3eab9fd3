"""The house's floors (README "Architecture"): every import of the project's own code points down a floor.

The test draws the imports of every module (function-level ones included) and fails on an arrow that
runs back up, or sideways where ARCHITECTURE.md does not allow it, and on a module over 400 lines.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cheems", "cheems_cli", "services", "evaluator", "trainer", "system")
MAX_LINES = 400
# module prefix -> floor (longest prefix wins)
FLOORS = {
    "cheems": 0,
    "services.store": 1,
    "services.bus": 1,
    "services.hosting": 1,
    "services.grpc_errors": 1,
    "services.web": 1,
    "services.scorer": 2,
    "services.annotation": 2,
    "services.ingestion": 2,
    "services": 2,
    "evaluator": 3,
    "trainer": 3,
    "system": 4,
    "cheems_cli": 5,
}
# (importer prefix, imported prefix) pairs allowed on the same floor across packages
SIDEWAYS = {
    ("services.annotation", "services.scorer.client"),  # distant supervision calls the scorer
    ("trainer", "evaluator"),  # evaluation during training
}


def floor_of(module: str) -> tuple[int, str]:
    prefix = max((p for p in FLOORS if module == p or module.startswith(p + ".")), key=len)
    return FLOORS[prefix], prefix


def modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "v1" not in path.relative_to(ROOT).parts:  # generated protobuf code
                yield ".".join(path.relative_to(ROOT).with_suffix("").parts), path


def imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def wrong_arrows(module: str, path: Path) -> list[str]:
    here, own = floor_of(module)
    wrong = []
    for target in imports(path):
        top = target.split(".")[0]
        if top in ("tests", "bench"):
            wrong.append(f"{module} -> {target} (nothing imports tests or benchmarks)")
        if top not in PACKAGES or target.startswith("cheems.v1"):
            continue
        there, other = floor_of(target)
        sideways_ok = any(module.startswith(a) and target.startswith(b) for a, b in SIDEWAYS)
        if there > here or (there == here and other != own and not sideways_ok and here > 0):
            wrong.append(f"{module} (floor {here}) -> {target} (floor {there})")
    return wrong


ALL = list(modules())


def test_the_drawing_covers_the_project() -> None:
    names = {m for m, _ in ALL}
    assert {"cheems.errors", "cheems.model", "services.scorer.server", "evaluator.evaluate", "cheems_cli.main"} <= names


@pytest.mark.parametrize(("module", "path"), ALL, ids=[m for m, _ in ALL])
def test_imports_point_down(module: str, path: Path) -> None:
    assert wrong_arrows(module, path) == []


@pytest.mark.parametrize(("module", "path"), ALL, ids=[m for m, _ in ALL])
def test_modules_stay_small(module: str, path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines; split it by concept"


def test_an_arrow_up_is_caught(tmp_path: Path) -> None:
    upward = tmp_path / "up.py"
    upward.write_text("def f():\n    from evaluator.metrics import Semantics\n", encoding="utf-8")
    arrows = wrong_arrows("cheems.up", upward)
    assert arrows and all(a.startswith("cheems.up (floor 0) -> evaluator.metrics") for a in arrows)
    sideways = tmp_path / "side.py"
    sideways.write_text("import services.ingestion.records\n", encoding="utf-8")
    assert wrong_arrows("services.scorer.side", sideways) != []
    allowed = tmp_path / "ok.py"
    allowed.write_text("from services.scorer.client import RewardClient\n", encoding="utf-8")
    assert wrong_arrows("services.annotation.distant", allowed) == []
