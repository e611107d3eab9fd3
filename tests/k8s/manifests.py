"""Rendering the kustomizations under k8s/ with the real `kubectl kustomize` (offline), and walking them.

The dev overlay's Secrets come from git-ignored env files (`make dev-secrets`), so the kustomizations are rendered
from a copy of k8s/ in a temporary folder where scripts/dev_secrets.py has just written them, as a developer's
`make dev-secrets` would: the tests never depend on (or read) a checkout's own secrets.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
KUBERNETES_VERSION = "1.33.0"  # the oldest Kubernetes the manifests promise to work on (README)
KUSTOMIZATIONS = sorted(str(p.parent.relative_to(K8S)) for p in K8S.rglob("kustomization.yaml"))
APP_OVERLAYS = ["overlays/dev", "overlays/prod", "overlays/gpu-vllm"]
TRAINING = ["training/base", "training/overlays/tiny-cpu", "training/pytorchjob"]
CHEEMS_IMAGES = ("cheems", "cheems-gpu", "cheems-gpu-vllm")


def dev_secrets() -> Any:
    """scripts/dev_secrets.py as a module (scripts are not a package)."""
    spec = importlib.util.spec_from_file_location("dev_secrets", ROOT / "scripts" / "dev_secrets.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def tree() -> Path:
    """A copy of k8s/ (without any generated secrets of the checkout) with the dev Secrets' env files written."""
    folder = Path(tempfile.mkdtemp(prefix="cheems-k8s-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    copy = folder / "k8s"
    shutil.copytree(K8S, copy, ignore=shutil.ignore_patterns("secrets"))
    dev_secrets().write(copy / "overlays" / "dev" / "secrets")
    return copy


@functools.cache
def render(path: str) -> tuple[dict[str, Any], ...]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is missing: `make setup` installs Debian's kubernetes-client"
    done = subprocess.run([kubectl, "kustomize", str(tree() / path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"kubectl kustomize k8s/{path} failed:\n{done.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


def pod_specs(resource: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, pod spec) for every pod template a resource carries, CRDs included."""
    kind, name, spec = resource["kind"], resource["metadata"]["name"], resource.get("spec", {})
    if kind in ("Deployment", "StatefulSet", "Job"):
        yield f"{kind}/{name}", spec["template"]["spec"]
    elif kind == "PyTorchJob":
        for replica, replica_spec in spec["pytorchReplicaSpecs"].items():
            yield f"{kind}/{name}/{replica}", replica_spec["template"]["spec"]
    elif kind in ("TrainingRuntime", "ClusterTrainingRuntime"):  # Kubeflow Trainer v2: a JobSet's Jobs
        for job in spec["template"]["spec"]["replicatedJobs"]:
            yield f"{kind}/{name}/{job['name']}", job["template"]["spec"]["template"]["spec"]


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def is_cheems(container: dict[str, Any]) -> bool:
    """Runs our image (whose ENTRYPOINT is `cheems`), under any registry and tag."""
    image = container["image"].rsplit("/", 1)[-1].split(":")[0]
    return image in CHEEMS_IMAGES


def by_kind(docs: tuple[dict[str, Any], ...], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}
