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

The model's device, dtype and shape are options (`bench/model_options.py`):

    python bench/scorer_bench.py [--requests 48] [--trl-only] [--trl-chars 450] [--big-only] [--big-mb 50]
                                 [--big-rate 2] [--small-only] [--small-calls 200] [--small-concurrency 16]
                                 [--backend triton|torch] [--device cpu] [--dtype auto] [--hidden 256]
                                 [--layers 4] [--heads 4] [--kv-heads 2] [--intermediate 512]

and on a GPU, with Qwen2.5-0.5B's shape:

    python bench/scorer_bench.py --device cuda --backend torch --hidden 896 --layers 24 --heads 14 --kv-heads 2 \
                                 --intermediate 4864
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import random
import statistics
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=48)
    add_model_options(parser)
    parser.add_argument(
        "--backend", choices=("triton", "torch"), help="what serves (c): default triton, torch with --small-only"
    )
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


def server_config(args: argparse.Namespace, directory: Path) -> ScorerConfig:
    """The scorer of (c): the options' backend, device and dtype; Triton's batch of 64 within 5 ms."""
    return ScorerConfig(
        model=str(directory),
        backend=args.backend,
        device=args.device,
        dtype=args.dtype,
        host="127.0.0.1",
        grpc_port=0,
        http_port=-1,
        max_batch_size=64,
        queue_delay_us=5000,
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        directory = save_random_model(args, build_tokenizer(), Path(tmp) / "rm")
        print(f"{describe_device(args.device)}; dtype {describe_dtype(args.dtype, args.device)}")
        with (
            ScorerServer(server_config(args, directory)) as server,
            RewardClient(f"127.0.0.1:{server.grpc_port}", timeout=600) as client,
        ):
            only = args.trl_only or args.big_only or args.small_only
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


if __name__ == "__main__":
    main()
