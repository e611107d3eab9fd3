"""How much KV cache a vLLM CPU engine's workers take: a share of this host's free memory, divided among them.

    kv = kv_cache_per_worker(available=20 * GiB, weights=1 * GiB, workers=2, fraction=0.5)   # 4.75 GiB each
    check_fits(kv, workers=2, weights=1 * GiB, available=20 * GiB)   # ConfigError, one line, when it cannot
    kv = cpu_kv_cache(model_dir, options)    # the same, from the checkpoint's files and the host's memory now

vLLM's CPU build sizes each worker's KV cache from the NUMA node's total memory (`--gpu-memory-utilization` of it,
0.5 by default here), once per worker: at tensor parallel 2 on one host both workers asked for half of the whole
machine (10.8 GiB each on a 24 GiB host) and, beside 3 GB of other processes, the kernel killed one at start. So on
the CPU the scorer gives each worker an explicit size (`--kv-cache-memory-bytes`): `fraction` (--vllm-memory-fraction,
0.5 by default) of the memory available now (MemAvailable, or the container's limit less its use when that is less),
less the model's weights, divided among the `tensor_parallel_size` workers, which all run on this host. A size asked
for in VLLM_CPU_KVCACHE_SPACE (GiB per worker, vLLM's own setting, which wins over the flag) is taken as it is. Either
is refused before the engine starts when the workers' caches and the weights do not fit in what is available.
On CUDA nothing here applies: `--gpu-memory-utilization` is vLLM's share of each GPU, as before.
"""

from __future__ import annotations

import json
from pathlib import Path

from cheems.errors import ConfigError

GiB = 1 << 30
ASKED = "VLLM_CPU_KVCACHE_SPACE"  # vLLM's own: GiB of KV cache per CPU worker
WEIGHT_FILES = (".safetensors", ".bin", ".pt", ".pth")
BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}
CGROUP = Path("/sys/fs/cgroup")


def kv_cache_per_worker(available: int, weights: int, workers: int, fraction: float) -> int:
    """Bytes of KV cache for each of `workers` processes on one host: `fraction` of what `available` leaves beside
    the weights, divided among them (0 when the weights alone do not fit)."""
    return max(0, int((available - weights) * fraction) // workers)


def check_fits(kv_per_worker: int, workers: int, weights: int, available: int, source: str = "") -> None:
    """ConfigError, in one line, when `workers` caches of `kv_per_worker` bytes and the weights exceed `available`
    (or leave no cache at all); `source` says where the size came from."""
    needed = kv_per_worker * workers + weights
    if kv_per_worker > 0 and needed <= available:
        return
    where = f" ({source})" if source else ""
    raise ConfigError(
        f"the vLLM CPU engine cannot fit: {workers} worker(s) x {gib(kv_per_worker)} GiB of KV cache{where} + "
        f"{gib(weights)} GiB of weights = {gib(needed)} GiB, but {gib(available)} GiB is available; "
        f"lower --vllm-memory-fraction or {ASKED}, --tensor-parallel-size, or free memory"
    )


def gib(size: int) -> str:
    return f"{size / GiB:.1f}"


def meminfo_available(text: str) -> int:
    """MemAvailable of a /proc/meminfo text, in bytes."""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise ValueError("no MemAvailable line in /proc/meminfo")


def cgroup_room(limit: str, used: str) -> int | None:
    """What a cgroup v2 memory limit leaves (memory.max less memory.current); None without a limit ("max")."""
    limit = limit.strip()
    return None if limit == "max" else max(0, int(limit) - int(used.strip()))


def available_memory(root: Path = Path("/")) -> int:
    """Bytes this host (or this container, when its limit leaves less) can give a new process now."""
    available = meminfo_available((root / "proc/meminfo").read_text())
    group = root / CGROUP.relative_to("/")
    try:
        room = cgroup_room((group / "memory.max").read_text(), (group / "memory.current").read_text())
    except (OSError, ValueError):  # no cgroup v2 memory controller here
        room = None
    return available if room is None else min(available, room)


def weights_bytes(model_dir: str | Path, dtype: str) -> int:
    """The size of the checkpoint's weights once loaded in `dtype`: its weight files, scaled when they are stored in
    another width (config.json's `dtype` / `torch_dtype`)."""
    folder = Path(model_dir)
    stored = sum(f.stat().st_size for f in folder.iterdir() if f.is_file() and f.suffix in WEIGHT_FILES)
    try:
        config = json.loads((folder / "config.json").read_text())
        width = BYTES[str(config.get("dtype") or config.get("torch_dtype"))]
    except (OSError, ValueError, KeyError):
        return stored  # the width it is stored in is unknown: taken as it is
    return stored * BYTES.get(dtype, width) // width


def asked_per_worker(environment: dict[str, str]) -> int | None:
    """VLLM_CPU_KVCACHE_SPACE in bytes (None when not set); ConfigError when it is not whole GiB."""
    value = environment.get(ASKED, "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise ConfigError(f"{ASKED}: expected whole GiB of KV cache per worker (vLLM's setting), got {value[:20]!r}")
    return int(value) * GiB


def cpu_kv_cache(model_dir: str, workers: int, fraction: float, dtype: str, environment: dict[str, str]) -> int:
    """Bytes of KV cache each CPU worker of an engine for `model_dir` gets, checked against this host's memory now."""
    available, weights = available_memory(), weights_bytes(model_dir, dtype)
    asked = asked_per_worker(environment)
    kv = asked if asked is not None else kv_cache_per_worker(available, weights, workers, fraction)
    source = f"{ASKED}={asked // GiB}" if asked is not None else f"the default: {fraction:g} of what is free, shared"
    check_fits(kv, workers, weights, available, source)
    return kv
