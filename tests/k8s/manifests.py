"""Rendering the kustomizations under k8s/ with the real `kubectl kustomize` (offline), and walking them."""

from __future__ import annotations

import functools
import shutil
import subprocess
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


@functools.cache
def render(path: str) -> tuple[dict[str, Any], ...]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is missing: `make setup` installs Debian's kubernetes-client"
    done = subprocess.run([kubectl, "kustomize", str(K8S / path)], capture_output=True, text=True, timeout=60)
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
