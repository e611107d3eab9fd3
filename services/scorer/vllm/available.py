"""Where vLLM is: the Python of its own environment, checked before anything loads.

vLLM (numpy 2, its own transformers) cannot share the scorer's environment with PyTriton, so it lives in
`.venv-vllm/` beside the project (`make setup-vllm`) or wherever `--vllm-python` says, and the scorer starts
its server with that Python. A running server (`--vllm-url`) needs neither.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from cheems.errors import ConfigError

PROJECT = Path(__file__).resolve().parents[3]
DEFAULT_PYTHON = PROJECT / ".venv-vllm" / "bin" / "python"
HOW = (
    "run `make setup-vllm` (vLLM into .venv-vllm/), give --vllm-python PATH, or --vllm-url HOST:PORT of a running vLLM"
)


def vllm_python(configured: str = "") -> str:
    """The Python that has vLLM: `configured` (--vllm-python), else .venv-vllm's. ConfigError, in one line naming
    what to run, when that Python is missing or cannot find vllm (the check does not import it: seconds)."""
    python = configured or str(DEFAULT_PYTHON)
    if not Path(python).is_file():
        where = f"--vllm-python {python} does not exist" if configured else f"{python} does not exist"
        raise ConfigError(f"--backend vllm needs vLLM in its own environment ({where}): {HOW}")
    found = subprocess.run(
        [python, "-c", "import importlib.util as u, sys; sys.exit(0 if u.find_spec('vllm') else 3)"],
        capture_output=True,
        timeout=60,
    )
    if found.returncode != 0:
        raise ConfigError(f"--backend vllm: {python} has no vllm package: {HOW}")
    return python
