"""The house's floors (README "Architecture"): every import of the project's own code points down a floor.

The test draws the imports of every module (function-level and type-checking ones included) and fails
on an arrow that runs back up, or sideways where ARCHITECTURE.md does not allow it, on an import circle,
on a module over 400 lines, on a folder holding more than 16 modules, and on a name prefix shared by
three or more modules of one folder (a package waiting to exist).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cheems", "cheems_cli", "services", "evaluator", "trainer", "system")
MAX_LINES = 400
MAX_MODULES = 16  # Python files directly in one folder, __init__.py included
GENERATED = ("cheems/v1", "services/store/migrations/versions")  # folders the rooms rule leaves alone
# module prefix -> floor (longest prefix wins)
FLOORS = {
    "cheems": 0,
    "services.store": 1,
    "services.bus": 1,
    "services.hosting": 1,
    "services.grpc_errors": 1,
    "services.access": 1,
    "services.channels": 1,
    "services.web": 1,
    "services.observe": 1,
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
    ("services", "services.observe"),  # every service's logs, metrics and traces (observe imports only the ground)
    ("services.annotation", "services.scorer.client"),  # distant supervision calls the scorer
    ("trainer", "evaluator"),  # evaluation during training
    ("services.access", "services.grpc_errors"),  # a refused call ends through the error tree's gRPC edge
    ("services.hosting", "services.observe"),  # every server counts its calls (services.observe.metrics)
}


# packages whose imports of the project stay within these prefixes, as their __init__ docstrings say
ONLY = {
    "cheems.formats": ("cheems.errors",),
    "services.annotation.algorithm": ("cheems",),
    "services.scorer.triton": ("cheems",),
}


def floor_of(module: str) -> tuple[int, str]:
    prefix = max((p for p in FLOORS if module == p or module.startswith(p + ".")), key=len)
    return FLOORS[prefix], prefix


def name_of(path: Path) -> str:
    """The dotted module name of a file (a package's __init__.py names the package)."""
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "v1" not in path.relative_to(ROOT).parts:  # generated protobuf code
                yield name_of(path), path


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
    assert wrong_arrows("services.annotation.algorithm.distant", allowed) == []


def import_graph(items: list[tuple[str, Path]]) -> dict[str, set[str]]:
    """module -> the project modules it imports (`from a.b import c` counts as a.b.c when that is a module)."""
    names = {m for m, _ in items}
    graph: dict[str, set[str]] = {}
    for module, path in items:
        targets = set()
        for target in imports(path):
            while target and target not in names:
                target = target.rpartition(".")[0]
            if target and target != module:
                targets.add(target)
        graph[module] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


@pytest.mark.parametrize("package", sorted(ONLY))
def test_pure_packages_import_only_what_they_say(package: str) -> None:
    graph = import_graph(ALL)
    outside = {
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module == package or module.startswith(package + ".")
        for target in targets
        if not any(target == p or target.startswith(p + ".") for p in (package, *ONLY[package]))
    }
    assert package in graph and outside == set()


def test_no_import_circles() -> None:
    assert circles(import_graph(ALL)) == []


def test_a_circle_is_caught(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import p.b\n")
    (tmp_path / "b.py").write_text("def f():\n    from p.c import g\n")
    (tmp_path / "c.py").write_text("from p.a import x\n")
    (tmp_path / "d.py").write_text("from p.a import y\n")
    items = [(f"p.{n}", tmp_path / f"{n}.py") for n in "abcd"]
    assert circles(import_graph(items)) == [["p.a", "p.b", "p.c"]]


def folders() -> list[Path]:
    return sorted(
        {path.parent for _, path in ALL}
        | {p.parent for p in (ROOT / "cheems" / "v1").glob("*.py")}  # so the exemption below is exercised
    )


def rooms_problems(folder: Path) -> list[str]:
    """Why a folder is too wide: too many modules, or three or more sharing a name prefix."""
    names = sorted(p.stem for p in folder.glob("*.py"))
    problems = [f"{len(names)} modules (at most {MAX_MODULES})"] if len(names) > MAX_MODULES else []
    prefixes: dict[str, list[str]] = {}
    for name in names:
        if name != "__init__":
            prefixes.setdefault(name.split("_")[0], []).append(name)
    problems += [f"prefix {p!r} shared by {', '.join(ns)}" for p, ns in prefixes.items() if len(ns) >= 3]
    return problems


@pytest.mark.parametrize("folder", folders(), ids=[str(f.relative_to(ROOT)) for f in folders()])
def test_rooms_stay_narrow(folder: Path) -> None:
    if str(folder.relative_to(ROOT)) in GENERATED:
        return
    assert rooms_problems(folder) == [], f"{folder.relative_to(ROOT)}: split it into packages named for their concepts"


def test_a_wide_room_is_caught(tmp_path: Path) -> None:
    for name in ["service", "service_auto", "service_config", *(f"m{i}" for i in range(14))]:
        (tmp_path / f"{name}.py").write_text("")
    problems = rooms_problems(tmp_path)
    assert problems == ["17 modules (at most 16)", "prefix 'service' shared by service, service_auto, service_config"]


def test_each_package_says_what_it_owns_and_may_import() -> None:
    """A package's __init__.py docstring: what it owns, and (for a subpackage) what it may import."""
    silent = [
        str(path.relative_to(ROOT))
        for module, path in ALL
        if path.name == "__init__.py" and not ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert silent == []


def test_tests_mirror_the_package_tree() -> None:
    """Every folder of tests/ under a package's name is a folder of that package."""
    tests = ROOT / "tests"
    strays = [
        str(folder.relative_to(tests))
        for folder in tests.rglob("*")
        if folder.is_dir()
        and folder.name != "__pycache__"
        and folder.relative_to(tests).parts[0] in PACKAGES
        and not (ROOT / folder.relative_to(tests)).is_dir()
    ]
    assert strays == []
