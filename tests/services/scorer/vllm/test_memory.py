"""The KV cache of a vLLM CPU engine's workers: the default divided among the workers that share the host, and a
one-line refusal of what cannot fit, before anything starts (pure, no vLLM started)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cheems.errors import ConfigError
from services.scorer.vllm.engine import EngineOptions, VllmEngine, engine_command
from services.scorer.vllm.memory import (
    GiB,
    asked_per_worker,
    available_memory,
    cgroup_room,
    check_fits,
    cpu_kv_cache,
    kv_cache_per_worker,
    meminfo_available,
    weights_bytes,
)


def test_the_default_share_is_divided_among_the_workers_of_one_host() -> None:
    # the host: 24 GiB, 3 GB taken by other processes, a 1 GiB model at tensor parallel 2
    available, weights = 21 * GiB, 1 * GiB
    each = kv_cache_per_worker(available, weights, workers=2, fraction=0.5)
    assert each == 5 * GiB  # half of the 20 GiB the weights leave, shared by 2
    check_fits(each, 2, weights, available)
    assert kv_cache_per_worker(available, weights, workers=1, fraction=0.5) == 10 * GiB
    assert kv_cache_per_worker(available, weights, workers=4, fraction=0.5) == int(2.5 * GiB)
    assert kv_cache_per_worker(GiB, 2 * GiB, workers=1, fraction=0.5) == 0  # the weights alone do not fit


def test_what_cannot_fit_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as refused:  # what each worker took before: half of the node, twice
        check_fits(int(10.8 * GiB), 2, 1 * GiB, 21 * GiB, "VLLM_CPU_KVCACHE_SPACE=10")
    said = str(refused.value)
    assert "\n" not in said
    assert "2 worker(s) x 10.8 GiB of KV cache (VLLM_CPU_KVCACHE_SPACE=10) + 1.0 GiB of weights = 22.6 GiB" in said
    assert "21.0 GiB is available" in said and "--vllm-memory-fraction" in said
    with pytest.raises(ConfigError, match=r"0\.0 GiB of KV cache"):  # no room for any cache
        check_fits(0, 1, 3 * GiB, 2 * GiB)


def test_the_hosts_memory_is_memavailable_or_the_containers_room(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal:       25165824 kB\nMemAvailable:   20971520 kB\n")
    assert meminfo_available((tmp_path / "proc/meminfo").read_text()) == 20 * GiB
    assert available_memory(tmp_path) == 20 * GiB  # no cgroup v2 files: the host's figure
    group = tmp_path / "sys/fs/cgroup"
    group.mkdir(parents=True)
    (group / "memory.max").write_text(f"{8 * GiB}\n")
    (group / "memory.current").write_text(f"{2 * GiB}\n")
    assert available_memory(tmp_path) == 6 * GiB  # the container's limit leaves less
    (group / "memory.max").write_text("max\n")
    assert available_memory(tmp_path) == 20 * GiB and cgroup_room("max", "5") is None
    assert available_memory() > 0  # this machine's


def test_the_weights_are_counted_as_they_will_be_loaded(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 4000)
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "config.json").write_text(json.dumps({"dtype": "float32"}))
    assert weights_bytes(tmp_path, "float32") == 4000
    assert weights_bytes(tmp_path, "bfloat16") == 2000  # served in half the width
    (tmp_path / "config.json").write_text("{}")
    assert weights_bytes(tmp_path, "bfloat16") == 4000  # the stored width unknown: as stored


def test_a_size_asked_in_vllms_variable_is_checked_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 1000)
    assert asked_per_worker({}) is None and asked_per_worker({"VLLM_CPU_KVCACHE_SPACE": "4"}) == 4 * GiB
    with pytest.raises(ConfigError, match="whole GiB"):
        asked_per_worker({"VLLM_CPU_KVCACHE_SPACE": "1.5"})
    assert cpu_kv_cache(str(tmp_path), 2, 0.5, "float32", {"VLLM_CPU_KVCACHE_SPACE": "1"}) == GiB
    with pytest.raises(ConfigError, match=r"2 worker\(s\) x 100000.0 GiB .*VLLM_CPU_KVCACHE_SPACE=100000"):
        cpu_kv_cache(str(tmp_path), 2, 0.5, "float32", {"VLLM_CPU_KVCACHE_SPACE": "100000"})
    default = cpu_kv_cache(str(tmp_path), 2, 0.5, "float32", {})
    assert 0 < default * 2 <= available_memory() // 2 + GiB  # half of what is free now, shared by the 2 workers


def test_the_engine_sizes_its_cpu_workers_at_start_and_refuses_before_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 1000)
    options = EngineOptions(str(tmp_path / "no-python"), device="cpu", tensor_parallel_size=2, memory_fraction=0.5)
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    sized = VllmEngine(str(tmp_path), "rm", options)._sized()
    assert 0 < sized.kv_cache_bytes <= available_memory() // 4 + GiB
    command = engine_command(str(tmp_path), "rm", 8000, sized)
    assert command[command.index("--kv-cache-memory-bytes") + 1] == str(sized.kv_cache_bytes)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "100000")
    with pytest.raises(ConfigError, match="cannot fit"):  # refused before the (missing) Python is ever run
        VllmEngine(str(tmp_path), "rm", options).start()
    gpu = EngineOptions("py", device="cuda", tensor_parallel_size=2, memory_fraction=0.9)
    assert VllmEngine(str(tmp_path), "rm", gpu)._sized() is gpu  # on CUDA: --gpu-memory-utilization, as before
    command = engine_command("m", "rm", 8000, gpu)
    assert "--kv-cache-memory-bytes" not in command and command[command.index("--gpu-memory-utilization") + 1] == "0.9"
