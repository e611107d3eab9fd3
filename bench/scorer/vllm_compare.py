"""`scorer_bench.py --backend vllm`: two scorers on one checkpoint, the torch backend against the vLLM one, on the
CheemsBench-like and RLHF-like shapes, then vLLM's offline throughput on the same sequences (`vllm_offline.py`
in vLLM's environment); the script's docstring says what is printed and the goals."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from model_options import describe_device, describe_dtype  # bench/ is on the path when a benchmark runs

from scorer.options import server_config
from scorer.timing import run
from scorer.workloads import (
    VLLM_SHAPES,
    Call,
    largest_difference,
    responses_of,
    scorer,
    sequences_of,
    shared_prefix,
)
from services.scorer.client import RewardClient
from services.scorer.runtime import ScorerServer
from services.scorer.vllm.engine import EXCEPTION, POOLER, WRAPPER, VllmEngine, engine_environment
from services.scorer.vllm.serving import options_of

VLLM_LEVELS = (1, 8, 16, 32)
GOAL_LEVEL, GOAL_SHAPE = 16, "RLHF-like"  # the CPU goal: vLLM/torch >= 1.5x there


def require_vllm(python: str, bench: str) -> str:
    """vLLM's Python (`available.vllm_python`), else exit with one line saying what is missing."""
    from cheems.errors import ConfigError
    from services.scorer.vllm.available import vllm_python

    try:
        return vllm_python(python)
    except ConfigError as e:
        raise SystemExit(f"{bench} --backend vllm: {e}") from None


def worker_cores(engine: Any) -> str:
    """The cores vLLM's CPU worker binds its threads to, from its engine's log ("" when it does not say)."""
    if not isinstance(engine, VllmEngine):
        return ""
    with contextlib.suppress(OSError):
        said = [line for line in Path(engine.log_file).read_text(errors="replace").splitlines() if "core ids=" in line]
        return said[-1].split("core ids=")[-1].strip() if said else ""
    return ""


def torch_against_vllm(
    args: argparse.Namespace, directory: Path, tokenizer: Any, dtype: str, levels: Sequence[int]
) -> None:
    """Two scorers on `directory`, torch and vLLM backends in `dtype`: rewards compared, Score at each level on
    each shape (calls new to both, the backends alternating), then vLLM offline on the highest level's calls."""
    device = describe_device(args.device).split(";")[0]
    measured = sorted({min(c, args.requests) for c in levels})  # N calls keep at most N in flight
    shapes = VLLM_SHAPES.items()
    checks = {label: calls(3, 101) for label, calls in shapes}
    fresh = {label: {c: calls(args.requests, 10 + i) for i, c in enumerate(measured)} for label, calls in shapes}
    for label, calls in checks.items():
        ids = sequences_of(tokenizer, calls)
        prefix = min(shared_prefix(call) for call in ids)
        tails = [len(s) - prefix for call in ids for s in call]
        print(
            f"{label}: {responses_of(calls[0])} responses a call sharing {prefix:,} prompt tokens, "
            f"{min(tails)}-{max(tails)} tokens each past it; {args.requests} calls a level"
        )
    torch_config = server_config(args, directory, "torch", dtype)
    vllm_config = server_config(args, directory, "vllm", dtype)
    engine = options_of(vllm_config)
    print(
        f"dtype {describe_dtype(dtype, args.device)}; both scorers: a forward (vLLM: a step) of at most "
        f"{torch_config.max_batch_size} sequences and {torch_config.max_batch_tokens:,} tokens, prefix sharing "
        f"{'on' if torch_config.prefix_sharing else 'off'} (vLLM: its prefix cache); vLLM memory share "
        f"{engine.memory_fraction:g}, {'quick start (not compiled)' if engine.quick_start else 'compiled'}"
    )
    if measured != sorted(levels):
        asked, done = (" / ".join(map(str, c)) for c in (levels, measured))
        print(f"concurrency {asked} asked, {done} measured (--requests {args.requests})")
    with contextlib.ExitStack() as stack:
        started = time.perf_counter()
        servers = [stack.enter_context(ScorerServer(config)) for config in (torch_config, vllm_config)]
        print(f"scorers ready in {time.perf_counter() - started:.0f} s (vLLM's engine started, compiled, warmed)")
        clients = [stack.enter_context(RewardClient(f"127.0.0.1:{s.grpc_port}", timeout=600)) for s in servers]
        if cores := worker_cores(servers[1].host):
            threads = torch.get_num_threads()
            print(f"vLLM's CPU worker computes on cores {cores} (its log), the torch backend on {threads} threads")
        rewards = {label: [[scorer(c)(*call) for call in calls] for c in clients] for label, calls in checks.items()}
        for _, calls in shapes:  # warm-up at concurrency, on calls of their own
            for client in clients:
                run(scorer(client), calls(4, 100), 4)
        torch_rewards = [r for label in checks for r in rewards[label][0]]
        vllm_rewards = [r for label in checks for r in rewards[label][1]]
        print(
            f"rewards, torch vs vLLM backend, {len(torch_rewards)} calls of the two shapes "
            f"({sum(map(len, torch_rewards))} responses), {describe_dtype(dtype, args.device)}: max |difference| "
            f"{largest_difference(torch_rewards, vllm_rewards):.1e} (goal <= 1e-4 in float32)"
        )
        print(f"\n{'shape':<17} {'conc':>4}  {'torch backend':>24}  {'vLLM backend':>24}  vLLM/torch")
        results: dict[tuple[str, int], tuple[dict, dict]] = {}
        for label in VLLM_SHAPES:
            for c in measured:
                t = run(scorer(clients[0]), fresh[label][c], c)
                v = run(scorer(clients[1]), fresh[label][c], c)
                results[label, c] = t, v
                cells = "  ".join(f"{r['rps']:8.1f}/s p50 {r['p50']:6.3f}s" for r in (t, v))
                print(f"{label:<17} {c:>4}  {cells}  {v['rps'] / t['rps']:.2f}x", flush=True)
        print(f"cells: responses/s and p50 call latency; {device}")
    if GOAL_LEVEL in measured:
        t, v = results[GOAL_SHAPE, GOAL_LEVEL]
        print(
            f"goal (CPU): vLLM/torch at concurrency {GOAL_LEVEL}, {GOAL_SHAPE}: {v['rps'] / t['rps']:.2f}x "
            f"(goal >= 1.5x); {device}"
        )
    top = measured[-1]
    served = {label: fresh[label][top] for label in VLLM_SHAPES}
    offline = vllm_offline(args, directory, engine, checks, served, tokenizer)
    rounds = len(next(iter(offline["shapes"].values()))["seconds"])
    print(
        f"vLLM offline ({offline['vllm']}): `LLM.encode` of the sequences served at concurrency {top}, all in one "
        f"call, with the served engine's options (median of {rounds}); {device}"
    )
    for label, calls in served.items():
        seconds = statistics.median(offline["shapes"][label]["seconds"])
        rate = sum(map(responses_of, calls)) / seconds
        print(
            f"  {label}: {rate:.1f} responses/s offline; served at concurrency {top} / offline "
            f"{results[label, top][1]['rps'] / rate:.2f} (goal on a GPU >= 0.8)"
        )
    print(
        f"rewards, torch backend vs vLLM offline, the same {len(torch_rewards)} calls: max |difference| "
        f"{largest_difference(torch_rewards, offline['check']):.1e}"
    )


def root_cause(log_file: Path) -> str:
    """The first exception a vLLM log names that is not one pointing elsewhere, else its last line."""
    lines = [line.strip() for line in log_file.read_text(errors="replace").splitlines() if line.strip()]
    raised = [m.group(0) for line in lines if (m := EXCEPTION.search(line)) and not WRAPPER.search(line)]
    return raised[0] if raised else (lines[-1] if lines else "nothing logged")


def vllm_offline(
    args: argparse.Namespace,
    directory: Path,
    engine: Any,
    checks: dict[str, list[Call]],
    served: dict[str, list[Call]],
    tokenizer: Any,
) -> dict[str, Any]:
    """`bench/vllm_offline.py` in vLLM's environment on `served`'s sequences, with `engine`'s options (an
    `EngineOptions`); the check calls are its warm-up, their rewards returned per call as "check"."""
    check_ids = [sequences_of(tokenizer, calls) for calls in checks.values()]
    spec = {
        "engine": {
            "model": str(directory),
            "runner": "pooling",
            "tensor_parallel_size": engine.tensor_parallel_size,
            "dtype": engine.dtype,
            "max_model_len": engine.max_model_len,
            "enable_prefix_caching": engine.prefix_caching,
            "gpu_memory_utilization": engine.memory_fraction,
            "max_num_seqs": engine.max_num_seqs,
            "max_num_batched_tokens": max(engine.max_num_batched_tokens, engine.max_model_len),
            "enforce_eager": engine.quick_start,
            **({"optimization_level": 0} if engine.quick_start else {}),
            **(
                {"distributed_executor_backend": "uni"}
                if engine.quick_start and engine.tensor_parallel_size == 1
                else {}
            ),
        },
        "pooler": POOLER,
        "warm": [s for ids in check_ids for call in ids for s in call],
        "shapes": {
            label: [s for call in sequences_of(tokenizer, calls) for s in call] for label, calls in served.items()
        },
        "rounds": 3,
    }
    log_file = Path(tempfile.gettempdir()) / f"cheems-vllm-offline-{os.getpid()}.log"  # kept: what went wrong
    with tempfile.TemporaryDirectory() as tmp:
        spec_file, out_file = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec_file.write_text(json.dumps(spec))
        script = Path(__file__).resolve().parent / "vllm_offline.py"
        env = engine_environment(engine)  # the served engine's: its cores bound alike at tensor parallel > 1
        with open(log_file, "wb") as log:
            command = [engine.python, "-W", "ignore::DeprecationWarning", str(script), str(spec_file), str(out_file)]
            done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=1800)
        if done.returncode != 0:
            sys.exit(f"vLLM offline failed (status {done.returncode}): {root_cause(log_file)} (log: {log_file})")
        out = json.loads(out_file.read_text())
    flat = iter(out.pop("warm"))
    out["check"] = [[next(flat) for _ in call] for ids in check_ids for call in ids]
    return out
