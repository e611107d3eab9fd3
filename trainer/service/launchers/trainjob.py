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

import yaml
from urllib3.exceptions import HTTPError

from cheems.errors import InvalidInput
from trainer.service.launchers import LaunchError, LaunchSpec, Status
from trainer.service.launchers.kubernetes import api_message, job_args, job_name, training_labels

log = logging.getLogger(__name__)
MANIFEST = Path(__file__).resolve().parents[3] / "k8s" / "training" / "trainjob" / "trainjob.yaml"
GROUP, VERSION, PLURAL = "trainer.kubeflow.org", "v1alpha1", "trainjobs"


def load_trainjob(path: str | Path = MANIFEST) -> dict[str, Any]:
    """The TrainJob manifest to fill; InvalidInput when it cannot be read or is no TrainJob."""
    try:
        manifest = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise InvalidInput(f"trainjob manifest {path}: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != "TrainJob":
        raise InvalidInput(f"trainjob manifest {path}: expected a {GROUP}/{VERSION} TrainJob")
    return manifest


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


class TrainJobLauncher:
    kind = "kubernetes"  # stored with each training: a Kubernetes workload, whichever kind

    def __init__(self, client: Any, namespace: str, manifest: dict[str, Any], image: str = "", nodes: int = 1) -> None:
        from kubernetes.client import CustomObjectsApi

        if nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {nodes}")
        self.api = CustomObjectsApi(client)
        self.namespace, self.manifest, self.image, self.nodes = namespace, manifest, image, nodes

    def start(self, spec: LaunchSpec) -> str:
        from kubernetes.client.exceptions import ApiException

        body = trainjob_manifest(self.manifest, spec, self.namespace, self.image, self.nodes)
        name = str(body["metadata"]["name"])
        try:
            self.api.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body)
        except ApiException as e:
            if e.status == 409:  # created before a restart of the service: watch that one
                log.info("training %s: TrainJob %s exists already", spec.training_id, name)
                return name
            raise LaunchError(
                f"the Kubernetes API refused to create TrainJob {name} in namespace {self.namespace}: "
                f"{api_message(e)}" + (" (is Kubeflow Trainer v2 installed?)" if e.status == 404 else "")
            ) from None
        except (HTTPError, OSError) as e:
            raise LaunchError(f"cannot reach the Kubernetes API to create TrainJob {name}: {e}") from None
        log.info("training %s: created TrainJob %s/%s", spec.training_id, self.namespace, name)
        return name

    def status(self, handle: str, out_dir: str) -> Status:
        from kubernetes.client.exceptions import ApiException

        try:
            job = self.api.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, handle)
        except ApiException as e:
            if e.status == 404:
                return Status("gone")
            log.warning("reading TrainJob %s: %s", handle, api_message(e))
            return Status("running")  # a passing API error is not the training's end
        except Exception as e:
            log.warning("reading TrainJob %s: %s", handle, e)
            return Status("running")
        return trainjob_status(cast(dict[str, Any], job))

    def stop(self, handle: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.delete_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, handle, propagation_policy="Background"
            )
        except ApiException as e:
            if e.status != 404:
                raise LaunchError(f"the Kubernetes API refused to delete TrainJob {handle}: {api_message(e)}") from None
