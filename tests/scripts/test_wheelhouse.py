"""scripts/wheelhouse.py: the wheels an offline CUDA host needs, checked without a network.

The list is walked over this venv's installed metadata (the same versions constraints.txt pins), and the
whole script runs against a fake index of tiny wheels (pip download with --no-index --find-links).
"""

from __future__ import annotations

import importlib.util
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("wheelhouse", ROOT / "scripts" / "wheelhouse.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wheelhouse = load_script()


def installed_requires(packages: list[tuple[NormalizedName, str]]) -> dict[NormalizedName, list[str]]:
    """The fetch of the real index, from this venv's metadata (setuptools: whatever version the venv has)."""
    found = {}
    for name, version in packages:
        dist = metadata.distribution(name)
        assert name == "setuptools" or dist.version.split("+")[0] == version, (name, dist.version, version)
        found[name] = dist.requires or []
    return found


@pytest.fixture(scope="module")
def chosen() -> dict[str, str]:
    pins = wheelhouse.read_pins((ROOT / "constraints.txt").read_text())
    pins["setuptools"] = "84.2.1"
    roots = wheelhouse.root_requirements(PYPROJECT)
    return dict(wheelhouse.resolve(roots, pins, wheelhouse.target_environment("3.12"), installed_requires))


def test_every_dependency_the_host_lacks_is_in_at_its_pin(chosen: dict[str, str]) -> None:
    pins = wheelhouse.read_pins((ROOT / "constraints.txt").read_text())
    direct = {canonicalize_name(Requirement(d).name) for d in PYPROJECT["project"]["dependencies"]}
    expected = direct - wheelhouse.HOST_SHIPS
    assert expected <= chosen.keys(), expected - chosen.keys()
    assert all(chosen[name] == pins[name] for name in chosen if name != "setuptools")
    # the build backend and the generator of cheems.v1 (a dev dependency) come too
    assert {"setuptools", "grpcio-tools", "psycopg-binary", "grpcio-health-checking"} <= chosen.keys()


def test_nothing_the_host_ships_nor_only_they_need(chosen: dict[str, str]) -> None:
    assert not wheelhouse.HOST_SHIPS & chosen.keys()
    assert {"torch", "numpy", "transformers", "tokenizers", "safetensors", "huggingface-hub"} == wheelhouse.HOST_SHIPS
    # pyyaml is no longer theirs alone: peft and accelerate (LoRA training) need it too, so it is carried (small;
    # pip on the host keeps the host's copy where it satisfies them)
    only_theirs = {"hf-xet", "sympy", "mpmath", "jinja2", "fsspec", "filelock"}
    assert {"peft", "accelerate", "pyyaml"} <= chosen.keys()
    assert not only_theirs & chosen.keys()
    assert not [n for n in chosen if n.startswith("nvidia-") or n == "triton"]


def test_no_extra_comes_unasked(chosen: dict[str, str]) -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    for extra in ["triton", "charts", "broker", "kubernetes"]:
        for line in extras[extra]:
            assert canonicalize_name(Requirement(line).name) not in chosen, (extra, line)


def test_the_pip_download_command_for_python_3_12(tmp_path: Path) -> None:
    command = wheelhouse.download_command([("grpcio", "1.81.1")], tmp_path, "3.12", "2.28")
    assert command[1:5] == ["-m", "pip", "download", "--quiet"]
    assert {"--no-deps", "--only-binary=:all:"} <= set(command)
    at = command.index("--python-version")
    assert command[at + 1] == "3.12" and command[command.index("--implementation") + 1] == "cp"
    assert command[command.index("--dest") + 1] == str(tmp_path) and command[-1] == "grpcio==1.81.1"
    asked = {command[i + 1] for i, word in enumerate(command) if word == "--platform"}
    assert {"manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"} <= asked
    assert "manylinux_2_29_x86_64" not in asked and not any("aarch64" in p for p in asked)


def test_markers_are_those_of_the_target_python() -> None:
    env = wheelhouse.target_environment("3.12")
    old = Requirement('tomli>=1; python_version < "3.11"')
    extra = Requirement('psycopg-binary==3.3.9; implementation_name != "pypy" and extra == "binary"')
    assert not wheelhouse.applies(old, env, [])
    assert wheelhouse.applies(old, wheelhouse.target_environment("3.10"), [])
    assert wheelhouse.applies(extra, env, ["binary"]) and not wheelhouse.applies(extra, env, [])


def test_a_missing_or_clashing_pin_is_refused() -> None:
    env = wheelhouse.target_environment("3.12")
    with pytest.raises(wheelhouse.WheelhouseError, match=r"no pin in constraints\.txt"):
        wheelhouse.resolve([Requirement("alpha==1")], {}, env, lambda packages: {})
    with pytest.raises(wheelhouse.WheelhouseError, match=r"constraints\.txt pins alpha==2"):
        wheelhouse.resolve([Requirement("alpha<2")], {"alpha": "2"}, env, lambda packages: {})


def fake_wheel(folder: Path, name: str, version: str, requires: list[str], tag: str = "py3-none-any") -> None:
    dist = f"{name.replace('-', '_')}-{version}"
    with zipfile.ZipFile(folder / f"{dist}-{tag}.whl", "w") as archive:
        lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        archive.writestr(f"{dist}.dist-info/METADATA", "\n".join(lines + [f"Requires-Dist: {r}" for r in requires]))
        archive.writestr(f"{dist}.dist-info/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tag}\n")
        archive.writestr(f"{dist}.dist-info/RECORD", "")


def test_the_script_against_a_fake_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project, index, dest = tmp_path / "project", tmp_path / "index", tmp_path / "wheelhouse"
    for folder in [project / "docker", index, dest]:
        folder.mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=70.1"]\n'
        '[project]\nname = "p"\nversion = "1"\nrequires-python = ">=3.11,<3.13"\n'
        'dependencies = ["alpha==1.0", "torch>=2.11", "beta[x]==2.0"]\n'
        '[project.optional-dependencies]\nheavy = ["epsilon==1.0"]\n'
    )
    pins = [
        "alpha==1.0",
        "beta==2.0",
        "gamma==3.0",
        "delta==1.0",
        "torch==2.13.0",
        "grpcio-tools==1.81.1",
        "epsilon==1.0",
    ]
    (project / "constraints.txt").write_text("# pins\n" + "\n".join(pins) + "\n")
    (project / "docker" / "Dockerfile").write_text("FROM x\nARG SETUPTOOLS_VERSION=84.2.1\n")
    fake_wheel(index, "alpha", "1.0", ["gamma>=3", 'oldthing; python_version < "3.12"'])
    fake_wheel(index, "beta", "2.0", ['delta; extra == "x"', 'unused; extra == "y"'])
    fake_wheel(index, "gamma", "3.0", ["torch"])
    fake_wheel(index, "delta", "1.0", [])
    fake_wheel(index, "torch", "2.13.0", ["nvidia-cublas"])  # never fetched: the host has it
    fake_wheel(index, "grpcio-tools", "1.81.1", ["setuptools"])
    fake_wheel(index, "setuptools", "84.2.1", [])
    fake_wheel(index, "epsilon", "1.0", [])
    fake_wheel(dest, "alpha", "0.9", [])  # an older run's: removed
    fake_wheel(dest, "delta", "1.0", [], tag="cp311-cp311-manylinux_2_17_x86_64")  # for 3.11: removed
    for name in ["PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    argv = ["--project", str(project), "--dest", str(dest), "--python-version", "3.12"]
    assert wheelhouse.main(argv) == 0
    assert sorted(p.name for p in dest.iterdir()) == [
        "alpha-1.0-py3-none-any.whl",
        "beta-2.0-py3-none-any.whl",
        "delta-1.0-py3-none-any.whl",
        "gamma-3.0-py3-none-any.whl",
        "grpcio_tools-1.81.1-py3-none-any.whl",
        "setuptools-84.2.1-py3-none-any.whl",
    ]
    assert wheelhouse.main([*argv, "--extra", "heavy"]) == 0
    assert (dest / "epsilon-1.0-py3-none-any.whl").exists()
    assert wheelhouse.main([*argv[:-1], "3.13"]) == 1  # outside requires-python
