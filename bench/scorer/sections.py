"""The sections of `scorer_bench.py` on one scorer: the concurrency table ((a) official, (b) the in-process limit,
(c) served), the TRL reward function against one Score, small calls under big requests, and small calls sharing
forwards (the script's docstring says what each measures and its goal)."""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import random
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import torch
from model_options import describe_shape, load_on, synchronize  # bench/ is on the path when a benchmark runs

from cheems.chat import Conversation, encode_many
from cheems.forward import forward_rewards, score_in_groups
from scorer.timing import run
from scorer.workloads import text, workload
from services.scorer.client import RewardClient


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
