"""Every kustomization renders, validates against Kubernetes' schemas offline, and is hardened."""

from __future__ import annotations

import kubernetes_validate
import pytest

from tests.k8s.manifests import (
    APP_OVERLAYS,
    KUBERNETES_VERSION,
    KUSTOMIZATIONS,
    TRAINING,
    by_kind,
    containers,
    pod_specs,
    render,
)

CUSTOM_KINDS = {
    "PyTorchJob",
    "TrainJob",
    "TrainingRuntime",
    "KafkaTopic",
    "Kafka",
    "KafkaNodePool",
    "KafkaUser",
    "ServiceMonitor",
    "PodMonitor",
    "PrometheusRule",
}  # validated in test_custom_resources.py


def test_every_kustomization_is_listed() -> None:
    assert set(KUSTOMIZATIONS) >= {"base", "kafka", *APP_OVERLAYS, *TRAINING}


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_renders_and_validates_strictly(path: str) -> None:
    docs = render(path)
    assert docs, f"k8s/{path} renders nothing"
    for doc in docs:
        if doc["kind"] in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"k8s/{path}: {doc['kind']}/{doc['metadata']['name']}: {e.message} at {list(e.path)}")


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_pod_templates_of_custom_resources_validate_as_pod_templates(path: str) -> None:
    for doc in render(path):
        if doc["kind"] not in ("PyTorchJob", "TrainingRuntime"):
            continue
        for where, pod in pod_specs(doc):
            template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": {"spec": pod}}
            try:
                kubernetes_validate.validate(template, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"k8s/{path}: {where}: {e.message} at {list(e.path)}")


def test_validation_catches_a_broken_manifest() -> None:
    """The validator in use rejects what a cluster would reject (a test that can fail)."""
    deployment = next(d for d in render("overlays/dev") if d["kind"] == "Deployment")
    broken = {**deployment, "spec": {**deployment["spec"], "replicas": "two"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)
    typo = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_pods_are_hardened(path: str) -> None:
    """Non-root, default seccomp, no privilege escalation, read-only root, no capabilities, bounded resources."""
    for doc in render(path):
        for where, pod in pod_specs(doc):
            security = pod.get("securityContext", {})
            assert security.get("runAsNonRoot") is True, f"k8s/{path}: {where}: runAsNonRoot"
            assert security.get("seccompProfile") == {"type": "RuntimeDefault"}, f"k8s/{path}: {where}: seccomp"
            assert pod.get("automountServiceAccountToken") is False, f"k8s/{path}: {where}: service account token"
            for container in containers(pod):
                at = f"k8s/{path}: {where}: container {container['name']}"
                context = container.get("securityContext", {})
                assert context.get("allowPrivilegeEscalation") is False, f"{at}: allowPrivilegeEscalation"
                assert context.get("readOnlyRootFilesystem") is True, f"{at}: readOnlyRootFilesystem"
                assert context.get("capabilities", {}).get("drop") == ["ALL"], f"{at}: capabilities"
                resources = container.get("resources", {})
                for side in ("requests", "limits"):
                    assert {"cpu", "memory"} <= set(resources.get(side, {})), f"{at}: {side} cpu and memory"
                mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
                assert "/tmp" in mounts, f"{at}: a writable /tmp over the read-only root"


@pytest.mark.parametrize("path", APP_OVERLAYS)
def test_services_have_probes_disruption_budgets_and_policies(path: str) -> None:
    docs = render(path)
    budgets = [d["spec"]["selector"]["matchLabels"] for d in docs if d["kind"] == "PodDisruptionBudget"]
    policies = by_kind(docs, "NetworkPolicy")
    assert any(p["spec"]["podSelector"] == {} and p["spec"]["policyTypes"] == ["Ingress"] for p in policies.values())
    for name, deployment in by_kind(docs, "Deployment").items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert "readinessProbe" in container and "livenessProbe" in container, f"{name}: probes"
        if name.startswith("cheems-kafka"):
            continue  # the dev broker: one replica, Recreate, TCP probes
        for probe in ("readinessProbe", "livenessProbe"):
            assert "grpc" in container[probe], f"{name}: {probe} goes through gRPC health"
        assert container["livenessProbe"]["grpc"].get("service") == "liveness", f"{name}: liveness service"
        assert any(all(labels.get(k) == v for k, v in b.items()) for b in budgets), f"{name}: no PodDisruptionBudget"
    hpa = by_kind(docs, "HorizontalPodAutoscaler")["cheems-scorer"]
    assert hpa["spec"]["scaleTargetRef"]["name"] in by_kind(docs, "Deployment")


def test_dev_is_single_replica_and_prod_scales_on_gpus() -> None:
    dev, prod = render("overlays/dev"), render("overlays/prod")
    # at most one each; the AI judge starts at 0 until its LLM API is configured
    assert all(d["spec"].get("replicas", 1) == (0 if name == "cheems-judge" else 1)
               for name, d in by_kind(dev, "Deployment").items())  # fmt: skip
    assert by_kind(dev, "HorizontalPodAutoscaler")["cheems-scorer"]["spec"]["maxReplicas"] == 1
    singletons = {"cheems-training"}  # the one watcher of the training Jobs (Recreate)
    deployments = by_kind(prod, "Deployment")
    assert all(d["spec"]["replicas"] >= 2 for name, d in deployments.items() if name not in singletons)
    assert all(deployments[name]["spec"]["strategy"]["type"] == "Recreate" for name in singletons)
    hpa = by_kind(prod, "HorizontalPodAutoscaler")["cheems-scorer"]["spec"]
    assert 2 <= hpa["minReplicas"] < hpa["maxReplicas"]
    scorer = by_kind(prod, "Deployment")["cheems-scorer"]["spec"]["template"]["spec"]["containers"][0]
    assert scorer["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "--device=cuda" in scorer["args"] and "cheems-gpu" in scorer["image"]


def test_secrets_are_generated_in_dev_only() -> None:
    """Dev carries throwaway values; prod's Secrets are created out of band, never committed."""
    dev_secrets = sorted(
        d["metadata"]["name"].rsplit("-", 1)[0] for d in render("overlays/dev") if d["kind"] == "Secret"
    )
    assert dev_secrets == ["cheems-account-eval-worker", "cheems-account-judge", "cheems-secrets"]
    assert not [d for d in render("overlays/prod") if d["kind"] == "Secret"]


@pytest.mark.parametrize("path", ["overlays/dev", "overlays/prod"])
def test_service_accounts_are_files_and_the_scorer_takes_them(path: str) -> None:
    """One Secret per service account, mounted as a file (never an environment variable) where it is used and
    where the Job registers it in the store; the scorer takes the store's accounts beside its static token; the
    judge holds its account's token and no database URL."""
    docs = render(path)
    pods = {where: pod for doc in docs for where, pod in pod_specs(doc)}
    job = pods["Job/cheems-accounts"]
    for name in ("eval-worker", "judge"):
        user = pods[f"Deployment/cheems-{name}"]
        assert [
            v["secret"]["secretName"].startswith(f"cheems-account-{name}")
            for v in user["volumes"]
            if "secret" in v and not v["name"].startswith("kafka-")  # its Kafka user's password and the cluster CA
        ] == [True]
        assert "--token-file=/var/run/secrets/cheems/account/token" in user["containers"][0]["args"]
        assert not [e for e in user["containers"][0].get("env", []) if "TOKEN" in e["name"]]
    registrations = {c["name"]: c["args"][:4] for c in job["containers"]}
    assert registrations == {
        "eval-worker": ["accounts", "add", "eval-worker", "--role=scorer-client"],  # it only scores
        "judge": ["accounts", "add", "judge", "--role=service"],  # pairs: list, annotate, close
    }
    judge = pods["Deployment/cheems-judge"]["containers"][0]
    assert not [e for e in judge.get("env", []) if "DATABASE" in e["name"] or "KAFKA" in e["name"]]
    assert not judge.get("envFrom") and not [a for a in judge["args"] if "--db" in a or "--bootstrap" in a]
    assert "--accounts" in pods["Deployment/cheems-scorer"]["containers"][0]["args"]


def test_kustomize_is_new_enough() -> None:
    """The manifests use kustomize v5 features (labels with includeTemplates, inline JSON patches)."""
    import re
    import shutil
    import subprocess

    out = subprocess.run([shutil.which("kubectl") or "kubectl", "version", "--client"], capture_output=True, text=True)
    found = re.search(r"Kustomize Version: v(\d+)", out.stdout)
    assert found and int(found.group(1)) >= 5, f"kubectl's kustomize must be v5 or newer:\n{out.stdout}"
