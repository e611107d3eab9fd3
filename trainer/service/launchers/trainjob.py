"""The Kubernetes launcher on Kubeflow Trainer v2: each training is a TrainJob made from k8s/training/trainjob/.

    launcher = TrainJobLauncher(api_client(), namespace="cheems", manifest=load_trainjob())

The TrainJob (trainer.kubeflow.org/v1alpha1) names the project's TrainingRuntime `cheems-torch`, which holds the
image, the shared volume and the pods' hardening; per training it is named cheems-train-<training id> and gets
`numNodes` (`nodes`), `numProcPerNode` (the run's processes) and the `cheems train` arguments. The runtime's torch
policy gives every node the rendezvous (PET_MASTER_ADDR, PET_MASTER_PORT, PET_NNODES), which `cheems train` reads,
so the arguments carry none. Calls go through the official client's CustomObjectsApi: create, read and delete
`trainjobs` in one namespace (the Role in k8s/base/training.yaml allows it). The handle is the TrainJob's name.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any, cast

from trainer.service.launchers import LaunchSpec, Status, run_env
from trainer.service.launchers.kubernetes import (
    WorkloadLauncher,
    job_args,
    job_name,
    load_workload,
    training_labels,
)

log = logging.getLogger(__name__)
MANIFEST = Path(__file__).resolve().parents[3] / "k8s" / "training" / "trainjob" / "trainjob.yaml"
GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"


def load_trainjob(path: str | Path = MANIFEST) -> dict[str, Any]:
    """The TrainJob manifest to fill."""
    return load_workload(path, "TrainJob", f"{GROUP}/{VERSION}")


def trainjob_manifest(
    manifest: dict[str, Any], spec: LaunchSpec, namespace: str, image: str = "", nodes: int = 1
) -> dict[str, Any]:
    """The manifest filled for one training: name, labels, nodes, processes per node, image and arguments."""
    name = job_name(spec.training_id)
    job = copy.deepcopy(manifest)
    job["apiVersion"] = f"{GROUP}/{VERSION}"
    job["metadata"] = {"name": name, "namespace": namespace, "labels": training_labels(spec)}
    trainer = job["spec"].setdefault("trainer", {})
    trainer["numNodes"], trainer["numProcPerNode"] = nodes, spec.nproc
    trainer["args"] = job_args(spec, name, 1)  # one node's arguments: the runtime gives the rendezvous
    trainer["env"] = run_env(trainer.get("env"), spec)
    if image:
        trainer["image"] = image
    for side in ("requests", "limits"):
        amounts = trainer.get("resourcesPerNode", {}).get(side, {})
        amounts.update({k: str(v) for k, v in amounts.items()})
    return job


def trainjob_status(job: dict[str, Any]) -> Status:
    """A TrainJob's phase from its conditions (Complete, Failed); anything else is still running."""
    for condition in job.get("status", {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return Status("succeeded")
        if condition.get("type") == "Failed":
            why = ": ".join(x for x in (condition.get("reason"), condition.get("message")) if x)
            return Status("failed", f"TrainJob {job['metadata']['name']} failed: {why or 'no reason given'}")
    return Status("running")


class TrainJobLauncher(WorkloadLauncher):
    """Each training a Kubeflow Trainer v2 TrainJob."""

    workload = "TrainJob"

    def __init__(self, client: Any, namespace: str, manifest: dict[str, Any], image: str = "", nodes: int = 1) -> None:
        from kubernetes.client import CustomObjectsApi

        super().__init__(namespace, manifest, image, nodes)
        self.api = CustomObjectsApi(client)

    def body(self, spec: LaunchSpec) -> dict[str, Any]:
        return trainjob_manifest(self.manifest, spec, self.namespace, self.image, self.nodes)

    def create(self, body: dict[str, Any]) -> None:
        self.api.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body)

    def read(self, name: str) -> Status:
        job = self.api.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        return trainjob_status(cast(dict[str, Any], job))

    def delete(self, name: str) -> None:
        self.api.delete_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, propagation_policy="Background"
        )

    def refused_hint(self, status: int) -> str:
        return " (is Kubeflow Trainer v2 installed?)" if status == 404 else ""
