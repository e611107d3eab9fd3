"""The training service's one config: where it stores, what it trains by default, when, and how it launches.

    TrainingConfig(data_dir="out/cheems", recipe="tiny-cpu", dataset_recipe="human+ai-distant-debias", auto_after=50)

`cheems service training` builds it from its options; every field has its default here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cheems.precision import check_dtype
from services.hosting import TRAINING_PORT
from services.store.models import LAUNCHERS
from trainer.datasets.recipes import PAPER_RECIPE, DistantSettings, dataset_recipe
from trainer.recipes import RECIPES

WORKLOADS = ("job", "trainjob")


@dataclass(frozen=True)
class TrainingConfig:
    data_dir: str = "out/cheems"  # datasets and trainings (<data_dir>/datasets, <data_dir>/trainings/<id>)
    recipe: str = "tiny-cpu"  # training recipe (trainer.recipes) of a request that names none, and of auto
    dataset_recipe: str = PAPER_RECIPE  # dataset recipe (trainer.datasets.recipes) of a request naming none, and auto
    supervisor: str = ""  # distant supervision's model (trained on human rankings); empty = the newest such model
    distant: DistantSettings = field(default_factory=DistantSettings)  # when the supervisor drops an AI relation
    auto_after: int = 0  # train when this many rankings came since the newest dataset; 0 = on request only
    launcher: str = "local"  # local: a process group here | kubernetes: an Indexed Job per training
    model: str = ""  # base model (directory or Hugging Face Hub id) every training starts from; empty = the recipe's
    nproc: int = 1  # training processes per node (one per GPU)
    port: int = TRAINING_PORT  # gRPC port (0 = any free one)
    host: str = "127.0.0.1"  # 0.0.0.0 in a pod
    metrics_port: int = -1  # HTTP port of Prometheus' /metrics on host (0 = any free one, -1 = none)
    tls_cert: str = ""  # PEM certificate: the gRPC port speaks TLS only (with tls_key)
    tls_key: str = ""
    poll_seconds: float = 2.0  # how often a running training's progress and state are read
    max_relaunches: int = 3  # relaunches (resuming from a checkpoint) of a run that vanished unfinished
    seed: int = 0  # length debiasing's sample
    namespace: str = ""  # kubernetes: where Jobs go; empty = this pod's namespace
    image: str = ""  # kubernetes: the trainer image; empty = the manifest's
    nodes: int = 1  # kubernetes: pods per Job (torchrun nodes)
    workload: str = "job"  # kubernetes: job (an Indexed Job, no operator) | trainjob (Kubeflow Trainer v2)
    job_manifest: str = (
        ""  # kubernetes: the manifest filled per training; empty = k8s/training/{base/job,trainjob/trainjob}.yaml
    )
    overrides: Mapping[str, str] = field(default_factory=dict)  # TrainConfig fields for every training; a request's win
    # a request's eval_files are names of files under here (`trainer.service.knobs`); empty = <data_dir>/bench
    bench_root: str = ""
    # RegisterModel takes checkpoints under data_dir, the base model's folder and these (`trainer.service.registration`)
    model_roots: tuple[str, ...] = ()
    # distant supervision scores in this service's process (`trainer.datasets.build`), before a training launches:
    supervision_device: str = "auto"  # auto = cuda when torch has CUDA here (the GPUs the local launcher trains on)
    supervision_dtype: str = "auto"  # auto = bfloat16 on CUDA (float16 on older cards), float32 on the CPU

    def __post_init__(self) -> None:
        if self.recipe not in RECIPES:
            raise ValueError(f"recipe: unknown training recipe {self.recipe!r}; known: {', '.join(RECIPES)}")
        dataset_recipe(self.dataset_recipe)  # raises naming the known ones
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {self.launcher!r}")
        if self.workload not in WORKLOADS:
            raise ValueError(f"workload must be one of {', '.join(WORKLOADS)}, got {self.workload!r}")
        for name in ("nproc", "nodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("auto_after", "max_relaunches", "seed"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if not -1 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics_port must be -1 (none) or in 0..65535, got {self.metrics_port}")
        if not self.poll_seconds > 0:
            raise ValueError(f"poll_seconds must be > 0, got {self.poll_seconds}")
        if not self.data_dir:
            raise ValueError("data_dir: required")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key must be given together")
        check_dtype(self.supervision_dtype, "supervision_dtype")  # `cheems.precision`'s names (a ValueError)
