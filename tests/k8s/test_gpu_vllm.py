"""k8s/overlays/gpu-vllm: the scorer runs one vLLM engine over the pod's GPUs (docs/kubernetes.md: "Serving a large RM
with vLLM on GPUs"). Its rendering, schemas, hardening and command line are checked with the other overlays
(test_render.py, test_consistency.py); here, what the vLLM variant itself must get right, and the manual's
table of GPUs per model size, recomputed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.k8s.manifests import APP_OVERLAYS, ROOT, by_kind, render
from tests.k8s.test_consistency import resolve

OVERLAY = "overlays/gpu-vllm"
ENGINE_STOP_SECONDS = 15  # services/scorer/vllm/engine.py: SIGTERM, then 15 s before the kill
DEFAULT_GPU_FRACTION = 0.9  # services/scorer/vllm/serving.py: --vllm-memory-fraction 0 on a GPU
UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "": 1}


def quantity(value: str | int) -> int:
    """Bytes of a Kubernetes quantity in binary units (`16Gi`)."""
    found = re.fullmatch(r"(\d+)([KMGT]i)?", str(value))
    assert found, f"not a quantity in binary units: {value!r}"
    return int(found.group(1)) * UNITS[found.group(2) or ""]


def deployment() -> dict[str, Any]:
    return by_kind(render(OVERLAY), "Deployment")["cheems-scorer"]


def scorer() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(pod spec, scorer container, its parsed `cheems serve` options)."""
    pod = deployment()["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    _, _, values = resolve(container["args"])
    return pod, container, values


def test_the_overlay_is_checked_with_the_others() -> None:
    assert OVERLAY in APP_OVERLAYS, "ports, environment, Secrets, policies, image user: test_consistency.py"
    assert render(OVERLAY), f"k8s/{OVERLAY} renders nothing"


def test_one_vllm_engine_spreads_over_the_pods_gpus() -> None:
    _, container, values = scorer()
    assert values.get("backend") == "vllm", "the scorer's backend is vLLM"
    assert not values.get("vllm_url"), "this scorer starts its engine (--follow refuses --vllm-url)"
    assert values.get("follow") is True
    assert str(values.get("device", "")).startswith("cuda") and values.get("dtype") == "bfloat16"
    gpus = {side: int(container["resources"][side].get("nvidia.com/gpu", 0)) for side in ("requests", "limits")}
    tensor_parallel = int(values.get("tensor_parallel_size", 1))
    assert gpus["requests"] == gpus["limits"] == tensor_parallel > 1, f"GPUs {gpus} != --tensor-parallel-size"


def test_the_image_has_the_vllm_the_scorer_names() -> None:
    """The vLLM image (docker/Dockerfile, WITH_VLLM=on) and its venv are what the scorer starts the engine with."""
    _, container, values = scorer()
    image = container["image"].rsplit("/", 1)[-1].split(":")[0]
    assert image == "cheems-gpu-vllm", container["image"]
    venv = Path(str(values.get("vllm_python", ""))).parents[1]
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    vllm_step = dockerfile.split('RUN if [ "$WITH_VLLM" = on ]', 1)[1].split("\nCOPY ", 1)[0]  # the build stage's
    assert f"python -m venv {venv} " in vllm_step, f"--vllm-python is not in the vLLM venv the image builds ({venv})"
    assert "--build-arg WITH_VLLM=on" in (ROOT / "k8s" / OVERLAY / "kustomization.yaml").read_text()


def test_tensor_parallel_workers_have_shared_memory() -> None:
    pod, container, _ = scorer()
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert "/dev/shm" in mounts, "no /dev/shm: the runtime's 64 MiB is too small for the workers"
    (volume,) = [v for v in pod["volumes"] if v["name"] == mounts["/dev/shm"]]
    shm = volume.get("emptyDir", {})
    assert shm.get("medium") == "Memory", "/dev/shm is memory-backed"
    assert quantity(shm["sizeLimit"]) >= 16 * 2**30, "4 tensor-parallel workers: 16 GiB (prod's 8 GiB is for Triton)"
    memory = quantity(container["resources"]["limits"]["memory"])
    assert memory >= quantity(shm["sizeLimit"]) + 32 * 2**30, "shared memory counts in the container's memory"


def test_probes_follow_the_engine_and_wait_for_a_large_load() -> None:
    """Readiness is the scorer's health, which follows the engine's /health; the startup probe outlasts
    --vllm-start-seconds, so a load that fails is reported by the scorer, not cut by the kubelet."""
    pod, container, values = scorer()
    assert container["readinessProbe"]["grpc"].get("service", "") == ""
    assert container["livenessProbe"]["grpc"]["service"] == "liveness"
    startup = container["startupProbe"]
    assert startup["grpc"]["service"] == "liveness", "the gRPC port opens once the engine is up"
    budget = startup["periodSeconds"] * startup["failureThreshold"]
    start = float(values.get("vllm_start_seconds", 900))
    assert 15 * 60 <= start < budget, f"startup probe {budget} s, engine start {start} s: a 72B load takes minutes"
    drain = float(values.get("drain_seconds", 10))
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    grace = pod["terminationGracePeriodSeconds"]
    assert grace >= pre_stop + drain + ENGINE_STOP_SECONDS, "calls in flight and the engine's stop fit the grace"


def test_promotion_either_rolls_the_pods_or_fits_the_engines() -> None:
    """A promotion starts the new model's engine beside those held (up to --max-models, one more starting): when
    two do not fit on the GPUs, the pod holds one model and a rolling update (a new pod ready before an old one
    goes) switches engines; otherwise every engine that may run at once fits."""
    _, _, values = scorer()
    fraction = float(values.get("vllm_memory_fraction", 0)) or DEFAULT_GPU_FRACTION
    models = int(values.get("max_models", 3))
    spec = deployment()["spec"]
    if 2 * fraction > 0.95:
        assert models == 1, "no second model fits beside one that fills the GPUs"
        strategy = spec["strategy"]
        assert strategy["type"] == "RollingUpdate"
        assert strategy["rollingUpdate"]["maxUnavailable"] == 0 and strategy["rollingUpdate"]["maxSurge"] >= 1
        assert spec["progressDeadlineSeconds"] >= 2 * float(values.get("vllm_start_seconds", 900))
    else:
        assert fraction * (models + 1) <= 0.95, f"{models} held + 1 starting at {fraction} do not fit"


def test_the_pods_land_on_gpu_nodes() -> None:
    pod, _, _ = scorer()
    assert any(t["key"] == "nvidia.com/gpu" and t["effect"] == "NoSchedule" for t in pod["tolerations"])
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    memory = [e for t in terms for e in t["matchExpressions"] if e["key"] == "nvidia.com/gpu.memory"]
    assert memory and all(e["operator"] == "Gt" and int(e["values"][0]) >= 79_000 for e in memory), "80 GB cards"


# The README's table, recomputed. Shapes from the Qwen2.5 models' config.json: parameters of the language model
# (billions), tied embeddings, vocabulary, hidden size, layers, attention heads, KV heads, head size. As an RM
# (AutoModelForSequenceClassification) an untied output layer (vocabulary x hidden) is replaced by a 1-row head.
QWEN25 = {
    "0.5B": (0.494, True, 151936, 896, 24, 14, 2, 64),
    "1.5B": (1.544, True, 151936, 1536, 28, 12, 2, 128),
    "3B": (3.086, True, 151936, 2048, 36, 16, 2, 128),
    "7B": (7.616, False, 152064, 3584, 28, 28, 4, 128),
    "14B": (14.77, False, 152064, 5120, 48, 40, 8, 128),
    "32B": (32.76, False, 152064, 5120, 64, 40, 8, 128),
    "72B": (72.71, False, 152064, 8192, 80, 64, 8, 128),
}
OVERHEAD_GB = 5.0  # a GPU's share of activations at 32,768 tokens a step, CUDA graphs, NCCL, the CUDA context
MIN_KV_TOKENS = 32_768  # room for at least one full step (--max-batch-tokens)


def weights_gb(size: str) -> float:
    params, tied, vocab, hidden, *_ = QWEN25[size]
    return 2 * (params - (0 if tied else vocab * hidden / 1e9))  # bf16: 2 bytes a parameter


def kv_bytes_per_token(size: str) -> int:
    *_, layers, _heads, kv_heads, head = QWEN25[size]
    return 2 * layers * kv_heads * head * 2  # K and V, bf16


def kv_tokens(size: str, gpus: int, card_gb: float, fraction: float) -> float:
    """Tokens of KV cache an engine over `gpus` cards has left after its weights and overhead (0: does not fit)."""
    free = fraction * card_gb - weights_gb(size) / gpus - OVERHEAD_GB
    return max(free, 0) * gpus * 1e9 / kv_bytes_per_token(size)


def gpus_for(size: str, card_gb: float, fraction: float) -> int:
    *_, heads, kv_heads, _ = QWEN25[size]
    for gpus in (1, 2, 4, 8):
        splits = heads % gpus == 0 and (kv_heads % gpus == 0 or gpus % kv_heads == 0)  # tensor parallel splits heads
        if splits and kv_tokens(size, gpus, card_gb, fraction) >= MIN_KV_TOKENS:
            return gpus
    raise AssertionError(f"{size} fits on no 8 GPUs of {card_gb} GB")


def readme_rows() -> dict[str, list[str]]:
    readme = (ROOT / "docs" / "kubernetes.md").read_text()  # the manual's Kubernetes page
    section = readme.split("\n## Serving a large RM with vLLM on GPUs", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()]
    return {row[0]: row for row in rows if row and row[0] in QWEN25}


def test_the_readme_table_is_the_arithmetic() -> None:
    rows = readme_rows()
    assert list(rows) == list(QWEN25), "one row per Qwen2.5 size"
    for size, (_, weights, kv, one, room, two, h200) in rows.items():
        digits = 0 if weights_gb(size) >= 10 else 1
        assert weights == f"{weights_gb(size):.{digits}f} GB", size
        assert kv == f"{kv_bytes_per_token(size) // 1024} KiB", size
        gpus = gpus_for(size, 80, DEFAULT_GPU_FRACTION)
        assert one == str(gpus), f"{size}: {one} x 80 GB in docs/kubernetes.md, {gpus} by the arithmetic"
        assert room == f"{kv_tokens(size, gpus, 80, DEFAULT_GPU_FRACTION) / 1e6:.1f} M", size
        assert two == str(gpus_for(size, 80, 0.45)), f"{size}: two engines at 0.45"
        assert h200 == str(gpus_for(size, 141, DEFAULT_GPU_FRACTION)), f"{size}: 141 GB cards"


def test_the_overlay_is_the_tables_72b_row() -> None:
    """The overlay serves the largest size: its GPUs are the table's, and two engines would not fit on them."""
    _, _, values = scorer()
    assert int(values["tensor_parallel_size"]) == gpus_for("72B", 80, DEFAULT_GPU_FRACTION) == 4
    assert gpus_for("72B", 80, 0.45) > 4, "two 72B engines do not fit on 4 cards: the overlay rolls its pods"
