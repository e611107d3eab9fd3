"""The Kubernetes launcher: each training is an Indexed Job made from k8s/training/base/job.yaml.

    launcher = KubernetesLauncher(api_client(), namespace="cheems", manifest=load_manifest())

The manifest is loaded and filled (`job_manifest`): the Job is named cheems-train-<training id>, runs
the same image, volumes (the PVC the training service shares) and hardening as the manifest, with
`cheems train` arguments for this run; one pod per node (`nodes`), torchrun's c10d rendezvous on
pod 0 when there are several (through the headless Service `cheems-train` of k8s/training/base,
which selects every training pod). The handle is the Job's name. Calls go through the official
client (`kubernetes` on PyPI): create, read and delete `batch/v1` Jobs in one namespace, which is
all the training service's Role allows (k8s/base/training.yaml).
"""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any, cast

import yaml
from urllib3.exceptions import HTTPError

from cheems.errors import InvalidInput
from trainer.service.launchers import LaunchError, LaunchSpec, Status, run_env, set_args

log = logging.getLogger(__name__)
MANIFEST = Path(__file__).resolve().parents[3] / "k8s" / "training" / "base" / "job.yaml"
RDZV_SERVICE = "cheems-train"  # the headless Service giving pods DNS names (k8s/training/base/service.yaml)
RDZV_PORT = 29400
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def load_workload(path: str | Path, kind: str, api: str) -> dict[str, Any]:
    """The manifest of a `kind` to fill; InvalidInput when it cannot be read or is of another kind."""
    label = f"{kind.lower()} manifest {path}"
    try:
        manifest = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise InvalidInput(f"{label}: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != kind:
        raise InvalidInput(f"{label}: expected a {api} {kind}")
    return manifest


def load_manifest(path: str | Path = MANIFEST) -> dict[str, Any]:
    """The Job manifest to fill."""
    return load_workload(path, "Job", "batch/v1")


def job_name(training_id: str) -> str:
    return f"cheems-train-{training_id}"


def training_labels(spec: LaunchSpec) -> dict[str, str]:
    return {
        "app.kubernetes.io/part-of": "cheems",
        "app.kubernetes.io/component": "training",
        "cheems.io/training-id": spec.training_id,
    }


def job_args(spec: LaunchSpec, name: str, nodes: int) -> list[str]:
    args = ["train", f"--recipe={spec.recipe}", f"--nproc={spec.nproc}"]
    if nodes > 1:
        endpoint = f"{name}-0.{RDZV_SERVICE}:{RDZV_PORT}"
        args += [f"--nnodes={nodes}", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={name}"]
    return args + set_args(spec)


def job_manifest(manifest: dict[str, Any], spec: LaunchSpec, namespace: str, image: str = "", nodes: int = 1) -> dict:
    """The manifest filled for one training: name, labels, pods, image and arguments."""
    name = job_name(spec.training_id)
    job = copy.deepcopy(manifest)
    labels = training_labels(spec)
    job["metadata"] = {"name": name, "namespace": namespace, "labels": labels}
    job["spec"]["completions"] = job["spec"]["parallelism"] = nodes
    template = job["spec"]["template"]
    template.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    if nodes > 1:
        template["spec"]["subdomain"] = RDZV_SERVICE
    else:
        template["spec"].pop("subdomain", None)
    container = template["spec"]["containers"][0]
    container["image"] = image or container["image"]
    container["args"] = job_args(spec, name, nodes)
    container["env"] = run_env(container.get("env"), spec)
    for side in ("requests", "limits"):  # quantities are strings to the client (YAML reads `8` as an int)
        amounts = container.get("resources", {}).get(side, {})
        amounts.update({k: str(v) for k, v in amounts.items()})
    return job


def api_client() -> Any:
    """A client for the cluster this runs in (its service account), else the current kubeconfig context."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config()
        except (config.ConfigException, OSError) as e:
            raise LaunchError(f"no Kubernetes API: not in a cluster, and no usable kubeconfig ({e})") from None
    return client.ApiClient()


def current_namespace(default: str = "default") -> str:
    """The pod's own namespace when running in one."""
    try:
        return NAMESPACE_FILE.read_text(encoding="utf-8").strip() or default
    except OSError:
        return default


def api_message(error: Any) -> str:
    """`<status> <reason>: <message>` of an ApiException (the Status object's message when it sent one)."""
    try:
        message = json.loads(error.body or "{}").get("message", "")
    except (ValueError, AttributeError):
        message = str(error.body or "")
    return f"{error.status} {error.reason}" + (f": {message}" if message else "")


class WorkloadLauncher:
    """What the Job and TrainJob launchers share: create (409: made before a restart of the service, watch it),
    read (404: gone; a passing API error: still running), delete (404: already gone); every refusal a LaunchError
    naming the workload. A subclass says how to make, create, read and delete its kind."""

    kind = "kubernetes"  # stored with each training, whichever workload
    workload = "Job"

    def __init__(self, namespace: str, manifest: dict[str, Any], image: str = "", nodes: int = 1) -> None:
        if nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {nodes}")
        self.namespace, self.manifest, self.image, self.nodes = namespace, manifest, image, nodes

    def body(self, spec: LaunchSpec) -> dict[str, Any]:
        raise NotImplementedError

    def create(self, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def read(self, name: str) -> Status:
        raise NotImplementedError

    def delete(self, name: str) -> None:
        raise NotImplementedError

    def refused_hint(self, status: int) -> str:
        """Words added to a refusal with this HTTP status (a missing CRD, say)."""
        return ""

    def start(self, spec: LaunchSpec) -> str:
        from kubernetes.client.exceptions import ApiException

        body = self.body(spec)
        name, what = str(body["metadata"]["name"]), self.workload
        try:
            self.create(body)
        except ApiException as e:
            if e.status == 409:  # created before a restart of the service: watch that one
                log.info("training %s: %s %s exists already", spec.training_id, what, name)
                return name
            raise LaunchError(
                f"the Kubernetes API refused to create {what} {name} in namespace {self.namespace}: "
                f"{api_message(e)}{self.refused_hint(e.status)}"
            ) from None
        except (HTTPError, OSError) as e:  # no API server there
            raise LaunchError(f"cannot reach the Kubernetes API to create {what} {name}: {e}") from None
        except ValueError as e:  # the client's own check of the object (pydantic)
            raise LaunchError(f"the {what} made from the manifest is not valid: {e}") from None
        log.info("training %s: created %s %s/%s", spec.training_id, what, self.namespace, name)
        return name

    def status(self, handle: str, out_dir: str) -> Status:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.read(handle)
        except ApiException as e:
            if e.status == 404:
                return Status("gone")
            log.warning("reading %s %s: %s", self.workload, handle, api_message(e))
        except Exception as e:
            log.warning("reading %s %s: %s", self.workload, handle, e)
        return Status("running")  # a passing API error is not the training's end

    def stop(self, handle: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.delete(handle)
        except ApiException as e:
            if e.status != 404:
                raise LaunchError(
                    f"the Kubernetes API refused to delete {self.workload} {handle}: {api_message(e)}"
                ) from None


class KubernetesLauncher(WorkloadLauncher):
    """Each training an Indexed Job (batch/v1)."""

    def __init__(self, client: Any, namespace: str, manifest: dict[str, Any], image: str = "", nodes: int = 1) -> None:
        from kubernetes.client import BatchV1Api

        super().__init__(namespace, manifest, image, nodes)
        self.batch = BatchV1Api(client)

    def body(self, spec: LaunchSpec) -> dict[str, Any]:
        return job_manifest(self.manifest, spec, self.namespace, self.image, self.nodes)

    def create(self, body: dict[str, Any]) -> None:
        self.batch.create_namespaced_job(self.namespace, cast(Any, body))  # the client takes the plain dict

    def read(self, name: str) -> Status:
        return job_status(self.batch.read_namespaced_job(name, self.namespace))

    def delete(self, name: str) -> None:
        self.batch.delete_namespaced_job(name, self.namespace, propagation_policy="Background")


def job_status(job: Any) -> Status:
    """A Job's phase from its status: the Complete or Failed condition, else the succeeded count."""
    status = job.status
    for condition in status.conditions or []:
        if condition.status != "True":
            continue
        if condition.type in ("Complete", "SuccessCriteriaMet"):
            return Status("succeeded")
        if condition.type in ("Failed", "FailureTarget"):
            why = ": ".join(x for x in (condition.reason, condition.message) if x)
            return Status("failed", f"Job {job.metadata.name} failed: {why or 'no reason given'}")
    completions = job.spec.completions or 1
    if (status.succeeded or 0) >= completions:
        return Status("succeeded")
    return Status("running")
