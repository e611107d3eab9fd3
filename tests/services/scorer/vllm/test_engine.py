"""The engine's command line and environment, and finding vLLM's Python: pure, no vLLM started."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cheems.errors import ConfigError
from services.scorer.config import ScorerConfig
from services.scorer.vllm.available import DEFAULT_PYTHON, vllm_python
from services.scorer.vllm.engine import EngineOptions, VllmEngine, cpu_binding, engine_command, engine_environment
from services.scorer.vllm.serving import options_of


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_engine_pools_the_last_token_without_activation_on_loopback() -> None:
    options = EngineOptions("py", tensor_parallel_size=4, dtype="bfloat16", max_model_len=4096)
    command = engine_command("/models/rm", "cheems_rm", 8123, options)
    assert command[:3] == ["py", "-W", "ignore::DeprecationWarning"]
    assert flag(command, "--runner") == "pooling"
    assert json.loads(flag(command, "--pooler-config")) == {"pooling_type": "LAST", "use_activation": False}
    assert (flag(command, "--tensor-parallel-size"), flag(command, "--dtype")) == ("4", "bfloat16")
    assert (flag(command, "--host"), flag(command, "--port")) == ("127.0.0.1", "8123")
    assert "--enable-prefix-caching" in command and "-O0" not in command
    # a scheduler step must hold the longest sequence
    assert int(flag(command, "--max-num-batched-tokens")) >= 4096


def test_prefix_caching_off_and_quick_start() -> None:
    options = EngineOptions("py", prefix_caching=False, quick_start=True, max_num_batched_tokens=100)
    command = engine_command("m", "n", 1, options)
    assert "--no-enable-prefix-caching" in command and "--enable-prefix-caching" not in command
    assert "-O0" in command and flag(command, "--distributed-executor-backend") == "uni"
    assert flag(command, "--max-num-batched-tokens") == "2048"  # raised to max_model_len
    tp2 = EngineOptions("py", tensor_parallel_size=2, quick_start=True)  # tensor parallel needs its workers
    assert "--distributed-executor-backend" not in engine_command("m", "n", 1, tp2)
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in engine_environment(options)  # it would change nothing (docstring)


def test_a_traced_scorer_gives_its_engine_the_otlp_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    plain = EngineOptions("py")
    assert "--otlp-traces-endpoint" not in engine_command("m", "n", 1, plain)
    assert "OTEL_SERVICE_NAME" not in engine_environment(plain)
    traced = EngineOptions("py", otlp_traces_endpoint="http://collector:4317")
    assert flag(engine_command("m", "n", 1, traced), "--otlp-traces-endpoint") == "http://collector:4317"
    assert engine_environment(traced)["OTEL_SERVICE_NAME"] == "scorer-vllm"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "rm-a")  # the operator's name wins
    assert engine_environment(traced)["OTEL_SERVICE_NAME"] == "rm-a"


def test_options_follow_the_scorer_config() -> None:
    config = ScorerConfig(backend="vllm", max_length=512, prefix_sharing=False, max_batch_size=7)
    options = options_of(config)  # .venv-vllm's Python: `make test` runs `make setup-vllm` first
    assert options.python == str(DEFAULT_PYTHON)
    assert (options.max_model_len, options.prefix_caching, options.max_num_seqs) == (512, False, 7)
    assert (options.dtype, options.memory_fraction, options.tensor_parallel_size) == ("float32", 0.5, 1)
    assert options.otlp_traces_endpoint == ""  # this process does not trace
    with pytest.raises(ConfigError, match="has no vllm package"):  # the test's own Python has none
        options_of(config.model_copy(update={"vllm_python": sys.executable}))


def test_a_missing_vllm_python_names_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="make setup-vllm") as missing:
        vllm_python(str(tmp_path / "nowhere" / "python"))
    assert "\n" not in str(missing.value) and "--vllm-python" in str(missing.value)


def test_vllm_url_is_checked_and_not_with_follow() -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        ScorerConfig(backend="vllm", vllm_url="not a url")
    with pytest.raises(ValueError, match="--vllm-url"):
        ScorerConfig(backend="vllm", vllm_url="127.0.0.1:8000", follow=True, bootstrap="127.0.0.1:9092")
    assert ScorerConfig(backend="vllm", vllm_url="http://127.0.0.1:8000/").vllm_url


def test_cpu_workers_are_bound_to_their_share_of_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [cpu_binding([0, 1], 2), cpu_binding(list(range(8)), 2), cpu_binding([0, 2, 3, 5], 2)] == [
        "0|1", "0-3|4-7", "0,2|3,5",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="needs 4 cores"):
        cpu_binding([0, 1], 4)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    assert "VLLM_CPU_OMP_THREADS_BIND" in engine_environment(EngineOptions("py", device="cpu", tensor_parallel_size=2))
    assert "VLLM_CPU_OMP_THREADS_BIND" not in engine_environment(EngineOptions("py", tensor_parallel_size=2))  # GPU
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    assert engine_environment(EngineOptions("py", device="cpu"))["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"  # every core
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "1")  # the user's own setting wins
    assert engine_environment(EngineOptions("py", device="cpu"))["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1"


def test_a_failed_start_names_the_root_cause_from_the_log(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text(
        "(APIServer pid=1) WARNING [x.py:1] limit. This can cause fd limit errors like `OSError: [Errno 24] Too many`\n"
        "(EngineCore pid=2) ERROR [core.py:1] EngineCore failed to start.\n"
        "Traceback (most recent call last):\n"
        '  File "core.py", line 1, in run\n'
        "(EngineCore pid=2) ERROR [core.py:1] AssertionError: Not enough allowed NUMA nodes\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n"
    )
    engine = VllmEngine("m", "n", EngineOptions("py"))
    engine.log_file = str(log)
    said = engine._tail()
    assert said.startswith("AssertionError: Not enough allowed NUMA nodes") and str(log) in said


def test_cheems_serve_without_vllm_says_what_to_run(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "cheems_cli", "serve", "--backend", "vllm", "--vllm-python", str(tmp_path / "python"),
         "--model", str(tmp_path), "--grpc-port", "0", "--http-port", "-1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "make setup-vllm" in lines[0] and "Traceback" not in run.stderr
