"""What the manifests name exists in the code: CLI commands and options, ports, environment, paths.

The image's ENTRYPOINT is `cheems`, so a container's args are a `cheems` command line; they are
parsed here by the CLI's own click parser, exactly as the container would.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

from cheems.settings import Settings, env_name
from cheems_cli.main import app
from services import hosting
from tests.k8s.manifests import (
    APP_OVERLAYS,
    KUSTOMIZATIONS,
    ROOT,
    TRAINING,
    by_kind,
    containers,
    is_cheems,
    pod_specs,
    render,
)
from trainer.recipes import recipe

CLI = typer.main.get_command(app)
STRIMZI_METRICS_PORT = 9404  # tcp-prometheus on the brokers and the Kafka Exporter
SOURCES = [
    p for d in ("cheems", "cheems_cli", "services", "evaluator", "trainer", "system") for p in (ROOT / d).rglob("*.py")
]
KNOWN_ENV = {env_name(f) for f in Settings.model_fields}  # what cheems.settings reads
CODE = "\n".join(p.read_text(encoding="utf-8") for p in SOURCES if "/v1/" not in str(p))
PORT_OPTIONS = ("port", "grpc_port", "http_port", "health_port")
ROLE_PORTS = {  # command -> the ports it must listen on (services/hosting.py)
    ("serve",): {hosting.SCORER_GRPC_PORT, hosting.SCORER_HTTP_PORT},
    ("service", "ingestion"): {hosting.INGESTION_PORT},
    ("service", "annotation"): {hosting.ANNOTATION_PORT, hosting.ANNOTATION_HTTP_PORT},
    ("service", "eval-worker"): {hosting.EVAL_WORKER_HEALTH_PORT},
    ("service", "eval-sink"): {hosting.EVAL_SINK_HEALTH_PORT},
    ("service", "evaluation"): {hosting.EVALUATION_PORT, hosting.EVALUATION_HTTP_PORT},
    ("service", "training"): {hosting.TRAINING_PORT},
    ("service", "judge"): {hosting.JUDGE_HEALTH_PORT},
}
METRICS_PORTS = {  # command -> its Prometheus /metrics port where it has no HTTP port for it (`--metrics-port`)
    ("service", "ingestion"): hosting.INGESTION_METRICS_PORT,
    ("service", "eval-worker"): hosting.EVAL_WORKER_METRICS_PORT,
    ("service", "eval-sink"): hosting.EVAL_SINK_METRICS_PORT,
    ("service", "training"): hosting.TRAINING_METRICS_PORT,
    ("service", "judge"): hosting.JUDGE_METRICS_PORT,
}


def resolve(args: list[str]) -> tuple[tuple[str, ...], Any, dict[str, Any]]:
    """(subcommand path, command, parsed option values) of `cheems ARGS`, or a test failure.

    Typer carries its own copy of click, so groups, paths and errors are recognised by shape.
    """
    command: Any = CLI
    path: list[str] = []
    rest = list(args)
    while hasattr(command, "list_commands"):
        assert rest, f"`cheems {' '.join(args)}` names a command group, not a command"
        sub = command.get_command(context(command), rest[0])
        assert sub is not None, (
            f"`cheems {' '.join(args)}`: no subcommand {rest[0]!r} (has {command.list_commands(context(command))})"
        )
        path.append(rest.pop(0))
        command = sub
    ctx = context(command)
    parser = command.make_parser(ctx)
    try:
        values, leftover, _ = parser.parse_args(rest)
    except Exception as e:  # click's UsageError family
        pytest.fail(f"`cheems {' '.join(args)}`: {e.format_message()}")
    assert not leftover or any(p.param_type_name == "argument" for p in command.params), f"stray args {leftover}"
    for param in command.params:
        value = values.get(param.name)
        if value is None or param.type_descriptor.annotation is Path or "$(" in str(value):
            continue
        try:
            param.process_value(ctx, value)
        except Exception as e:  # click's BadParameter
            pytest.fail(f"`cheems {' '.join(args)}`: --{param.name}: {e.format_message()}")
    return tuple(path), command, values


def context(command: Any) -> Any:
    return type(CLI).context_class(command)


def cheems_containers(path: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [
        (where, pod, container)
        for doc in render(path)
        for where, pod in pod_specs(doc)
        for container in containers(pod)
        if is_cheems(container)
    ]


def provided_env(container: dict[str, Any], docs: tuple[dict[str, Any], ...]) -> set[str]:
    names = {e["name"] for e in container.get("env", [])}
    config_maps = by_kind(docs, "ConfigMap")
    for source in container.get("envFrom", []):
        name = source["configMapRef"]["name"]
        assert name in config_maps, f"envFrom names a ConfigMap {name!r} that is not rendered"
        names |= set(config_maps[name]["data"])
    return names


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_commands_parse_with_the_cli(path: str) -> None:
    for where, _, container in cheems_containers(path):
        assert "command" not in container, f"{where}: keep the image's ENTRYPOINT (cheems)"
        resolve(container["args"])


@pytest.mark.parametrize("path", APP_OVERLAYS)
def test_ports_equal_the_code(path: str) -> None:
    docs = render(path)
    for where, _pod, container in cheems_containers(path):
        command, cli_command, values = resolve(container["args"])
        if command not in ROLE_PORTS:
            continue
        listening = {int(values[o]) for o in PORT_OPTIONS if values.get(o) not in (None, "-1")}
        defaults = {p.default for p in cli_command.params if p.name in PORT_OPTIONS and p.name not in values}
        assert listening | defaults == ROLE_PORTS[command], f"{where}: `cheems {' '.join(command)}` ports"
        metrics = {METRICS_PORTS[command]} if command in METRICS_PORTS else set()
        given = {int(values["metrics_port"])} if values.get("metrics_port") is not None else set()
        assert given == metrics, f"{where}: --metrics-port {given} != {metrics}"
        declared = {p["containerPort"] for p in container["ports"]}
        assert declared == ROLE_PORTS[command] | metrics, f"{where}: containerPorts {declared}"
        named = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert not metrics or named.get("metrics") in metrics, f"{where}: the metrics port is named `metrics`"
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            if probe in container:
                assert container[probe]["grpc"]["port"] in declared, f"{where}: {probe} port"
    services = by_kind(docs, "Service")
    for name, service in services.items():
        pods = [
            d["spec"]["template"]
            for d in docs
            if d["kind"] in ("Deployment", "StatefulSet")
            and all(
                d["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in service["spec"]["selector"].items()
            )
        ]
        assert pods, f"Service {name} selects no pod"
        named = {p["name"]: p["containerPort"] for pod in pods for c in pod["spec"]["containers"] for p in c["ports"]}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in named and named[port["targetPort"]] == port["port"], f"Service {name}"


@pytest.mark.parametrize("path", APP_OVERLAYS)
def test_listeners_bind_every_interface_in_pods(path: str) -> None:
    """Services listen on 127.0.0.1 unless told otherwise; in a pod, probes and peers need the pod IP."""
    for where, _pod, container in cheems_containers(path):
        command, _cli_command, values = resolve(container["args"])
        if command in ROLE_PORTS:
            assert values.get("host") == "0.0.0.0", f"{where}: `cheems {' '.join(command)}` needs --host=0.0.0.0"


def test_the_cli_defaults_are_the_hosting_ports() -> None:
    for command, ports in ROLE_PORTS.items():
        _, cli_command, _ = resolve(list(command))
        defaults = {p.default for p in cli_command.params if p.name in PORT_OPTIONS}
        assert defaults == ports, f"`cheems {' '.join(command)}` defaults {defaults} != {ports}"
        metrics = [p.default for p in cli_command.params if p.name == "metrics_port" and p.default is not None]
        assert metrics in ([], [METRICS_PORTS.get(command)]), f"`cheems {' '.join(command)}` --metrics-port {metrics}"


@pytest.mark.parametrize("path", APP_OVERLAYS)
def test_network_policies_open_real_ports(path: str) -> None:
    docs = render(path)
    pods = [d["spec"]["template"] for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    for name, policy in by_kind(docs, "NetworkPolicy").items():
        selector = policy["spec"]["podSelector"].get("matchLabels", {})
        if any(label.startswith("strimzi.io/") for label in selector):  # pods Strimzi makes: its metrics port only
            ports = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
            assert ports == {STRIMZI_METRICS_PORT}, f"NetworkPolicy {name} opens {ports} on Strimzi's pods"
            continue
        selected = [p for p in pods if all(p["metadata"]["labels"].get(k) == v for k, v in selector.items())]
        assert selected, f"NetworkPolicy {name} selects no pod"
        ports = {p["containerPort"] for pod in selected for c in pod["spec"]["containers"] for p in c["ports"]}
        for rule in policy["spec"].get("ingress", []):
            for port in rule.get("ports", []):
                assert port["port"] in ports, f"NetworkPolicy {name} opens {port['port']}, pods listen on {ports}"


@pytest.mark.parametrize("path", APP_OVERLAYS)
def test_environment_exists_in_the_code_and_commands_get_theirs(path: str) -> None:
    docs = render(path)
    for where, _, container in cheems_containers(path):
        env = provided_env(container, docs)
        for name in sorted(n for n in env if n.startswith("CHEEMS_")):
            assert name in KNOWN_ENV, f"{where}: {name} is read nowhere in the code"
        _, cli_command, values = resolve(container["args"])
        for param in cli_command.params:
            envvar = getattr(param, "envvar", None)
            # a *_FILE variable is the alternative to its secret's own variable (which the pods set from a Secret);
            # a pod given the file (a mounted Secret: `--token-file`) needs not the variable
            if envvar and param.name not in values and not envvar.endswith("_FILE"):
                if f"{param.name}_file" in values:
                    continue
                assert envvar in env, f"{where}: `--{param.name}` comes from {envvar}, which the pod does not set"


def instructions_of(path: str) -> str:
    """The comments of an overlay's kustomization and of the overlays it builds on (gpu-vllm: prod's commands)."""
    file = ROOT / "k8s" / path / "kustomization.yaml"
    text = file.read_text()
    for resource in yaml.safe_load(text).get("resources", []):
        parent = (file.parent / resource).resolve()
        if parent.parent.name == "overlays" and (parent / "kustomization.yaml").exists():
            text += instructions_of(str(parent.relative_to(ROOT / "k8s")))
    return text


@pytest.mark.parametrize("path", APP_OVERLAYS)
def test_secret_keys_are_provided(path: str) -> None:
    """Dev generates every Secret and key the pods read (as variables or mounted files); prod's README commands
    create every one."""
    docs = render(path)
    wanted: set[tuple[str, str]] = set()  # (Secret, key)
    for doc in docs:
        for _, pod in pod_specs(doc):
            for c in containers(pod):
                refs = [
                    e["valueFrom"]["secretKeyRef"] for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})
                ]
                wanted |= {(r["name"], r["key"]) for r in refs}
            for secret in (v["secret"] for v in pod.get("volumes", []) if "secret" in v):
                keys = [item["key"] for item in secret.get("items", [])] or ["token"]  # a service account's: token
                wanted |= {(secret["secretName"], key) for key in keys}
    # Strimzi's operators write these: a KafkaUser's password, the cluster CA's certificate
    strimzi = {(name, "password") for name in by_kind(docs, "KafkaUser")}
    strimzi |= {(f"{name}-cluster-ca-cert", "ca.crt") for name in by_kind(docs, "Kafka")}
    assert {w for w in wanted if w[1] in ("password", "ca.crt")} <= strimzi, "a Kafka Secret no Strimzi resource makes"
    wanted -= strimzi
    assert {name for name, _ in wanted} >= {"cheems-secrets", "cheems-account-eval-worker"} or path.endswith("dev")
    if path.endswith("dev"):  # generated, with a content hash after the name
        secrets = [d for d in docs if d["kind"] == "Secret"]
        for name, key in wanted:
            [secret] = [s for s in secrets if s["metadata"]["name"] == name]
            assert key in secret["data"], (name, key)
    else:
        instructions = instructions_of(path)
        commands = instructions.split("create secret generic ")[1:]  # each: its name, then its literals
        created = {(c.split()[0], key) for c in commands for key in re.findall(r"--from-literal=([a-z-]+)=", c)}
        assert wanted <= created


def test_kafka_bootstrap_points_at_the_broker() -> None:
    """Dev and prod connect to Strimzi's one listener: TLS with SCRAM-SHA-512, the clients set to match."""
    dev, prod = render("overlays/dev"), render("overlays/prod")
    for docs in (dev, prod):
        kafka = next(iter(by_kind(docs, "Kafka").values()))
        [listener] = kafka["spec"]["kafka"]["listeners"]  # no plaintext listener beside it
        assert listener["tls"] is True and listener["authentication"] == {"type": "scram-sha-512"}
        assert kafka["spec"]["kafka"]["authorization"] == {"type": "simple"}  # no super users
        config = next(c for n, c in by_kind(docs, "ConfigMap").items() if n.startswith("cheems-config"))["data"]
        assert config["CHEEMS_KAFKA_BOOTSTRAP"] == f"{kafka['metadata']['name']}-kafka-bootstrap:{listener['port']}"
        assert config["CHEEMS_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
        assert config["CHEEMS_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    services = by_kind(prod, "Service")
    headless = services["cheems-scorer-headless"]
    assert headless["spec"]["clusterIP"] == "None"  # DNS gives every pod: the clients spread over them
    assert headless["spec"]["selector"] == services["cheems-scorer"]["spec"]["selector"]
    port = headless["spec"]["ports"][0]["port"]
    assert port == services["cheems-scorer"]["spec"]["ports"][0]["port"]
    assert config["CHEEMS_SCORER_URL"] == f"dns:///cheems-scorer-headless:{port}"  # prod's


def _train(path: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [(w, p, c) for w, p, c in cheems_containers(path) if c["args"][0] == "train"]


@pytest.mark.parametrize("path", TRAINING)
def test_training_jobs_agree_with_the_trainer(path: str) -> None:
    """Recipe and overrides load; nodes x processes fit the GPUs and the recipe's global batch."""
    docs = render(path)
    jobs = _train(path)
    assert jobs, f"k8s/{path} runs no `cheems train`"
    for where, pod, container in jobs:
        _, _, values = resolve(container["args"])
        config = recipe(values["recipe"]).with_overrides(list(values.get("set_") or []))
        nproc, nnodes = int(values["nproc"]), int(values["nnodes"])
        config.forward_batch(nproc * nnodes)  # raises when global_batch_size does not fit the world size
        gpus = container["resources"]["limits"].get("nvidia.com/gpu")
        assert gpus in (None, nproc), f"{where}: --nproc {nproc} != {gpus} GPUs"
        job = next(d for d in docs if d["kind"] in ("Job", "PyTorchJob"))
        if job["kind"] == "Job":
            assert job["spec"]["completions"] == job["spec"]["parallelism"] == nnodes, where
            host = values["rdzv_endpoint"].split(":")[0]
            service = by_kind(docs, "Service")[pod["subdomain"]]
            assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
            assert host == f"{job['metadata']['name']}-0.{pod['subdomain']}", f"{where}: rendezvous on pod 0"
        else:
            assert nnodes == sum(r["replicas"] for r in job["spec"]["pytorchReplicaSpecs"].values()), where
            assert values["rdzv_endpoint"].startswith("$(MASTER_ADDR):"), where
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        for file in [config.out_dir, *([] if "models/tiny" in config.model else [config.model])]:
            assert any(file.startswith(m + "/") for m in mounts), f"{where}: {file} is on no volume"
        for file in [*config.train_files, *config.eval_files]:
            assert (file.startswith("/app/data/sample/") and (ROOT / file.removeprefix("/app/")).exists()) or any(
                file.startswith(m + "/") for m in mounts
            ), f"{where}: {file}"


def test_the_trainjob_agrees_with_its_runtime_and_the_trainer() -> None:
    """Kubeflow Trainer v2: the TrainJob names the runtime beside it, its `cheems train` arguments parse and carry
    no rendezvous (the runtime's PET_* give it), nodes x processes fit the recipe, GPUs per node = processes per
    node, and every file it names is on a volume of the runtime's pods."""
    docs = render("training/trainjob")
    (job,), (runtime,) = by_kind(docs, "TrainJob").values(), by_kind(docs, "TrainingRuntime").values()
    ref = job["spec"]["runtimeRef"]
    assert (ref["kind"], ref["name"]) == ("TrainingRuntime", runtime["metadata"]["name"])
    assert "torch" in runtime["spec"]["mlPolicy"], "the torch policy gives the PET_* rendezvous"
    trainer = job["spec"]["trainer"]
    _, _, values = resolve(trainer["args"])
    assert not values.get("rdzv_endpoint") and values.get("nnodes", 1) == 1, "the runtime gives the rendezvous"
    config = recipe(values["recipe"]).with_overrides(list(values.get("set_") or []))
    config.forward_batch(trainer["numNodes"] * trainer["numProcPerNode"])
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == trainer["numProcPerNode"]
    ((_, pod),) = pod_specs(runtime)
    (container,) = containers(pod)
    assert container["name"] == "node" and is_cheems(container), "Trainer v2's trainer container is `node`"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    for file in [config.out_dir, config.model, *config.train_files, *config.eval_files]:
        assert any(file.startswith(m + "/") for m in mounts), f"{file} is on no volume"
    claims = {v.get("persistentVolumeClaim", {}).get("claimName") for v in pod["volumes"]}
    assert "cheems-data" in claims, "the PVC the app overlays make and the training service shares"


@pytest.mark.parametrize("path", APP_OVERLAYS)
def test_the_scorer_follows_what_the_training_service_registers(path: str) -> None:
    """The scorer follows the registry, and the models the training service writes are on a volume it mounts."""
    docs = render(path)
    scorer = by_kind(docs, "Deployment")["cheems-scorer"]["spec"]["template"]["spec"]
    _, _, values = resolve(scorer["containers"][0]["args"])
    assert values.get("follow") is True, "the scorer does not follow the registry"
    training = by_kind(docs, "Deployment")["cheems-training"]["spec"]["template"]["spec"]
    _, _, train = resolve(training["containers"][0]["args"])

    def claim_of(pod: dict[str, Any], file: str) -> str:
        claims = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in pod["volumes"]}
        mounts = [
            m for c in pod["containers"] for m in c.get("volumeMounts", []) if file.startswith(m["mountPath"] + "/")
        ]
        assert mounts, f"{file} is on no volume"
        return str(claims[max(mounts, key=lambda m: len(m["mountPath"]))["name"]])

    models = (
        f"{train['data_dir']}/trainings/x/model"  # where the service's trainings export (trainer.service.trainings)
    )
    assert claim_of(training, models) == claim_of(scorer, models) in set(by_kind(docs, "PersistentVolumeClaim"))


def test_dockerfile_matches_the_manifests_and_pins() -> None:
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["cheems"]' in dockerfile
    user = re.search(r"^USER (\d+):(\d+)$", dockerfile, re.M)
    assert user and int(user.group(1)) != 0
    torch_pin = re.search(r"^torch==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
    assert torch_pin and f"ARG TORCH_VERSION={torch_pin.group(1)}" in dockerfile
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11\.\d+-slim-bookworm$", dockerfile, re.M), "pinned Python 3.11"
    exposed = {int(p) for line in re.findall(r"^EXPOSE (.+)$", dockerfile, re.M) for p in line.split()}
    for path in [*APP_OVERLAYS, *TRAINING]:
        for where, pod, container in cheems_containers(path):
            assert pod["securityContext"]["runAsUser"] == int(user.group(1)), f"{where}: the image's user"
            for port in container.get("ports", []):
                assert port["containerPort"] in exposed, f"{where}: {port['containerPort']} not EXPOSEd"
    for copied in re.findall(r"^COPY (?!--from)(\S+) ", dockerfile, re.M):
        assert (ROOT / copied).exists(), f"Dockerfile copies {copied}, which is not in the repository"


def test_every_named_source_exists() -> None:
    assert Path(ROOT / "k8s" / "kafka" / "topics.yaml").exists()
