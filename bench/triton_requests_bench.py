"""Triton requests with prefix sharing: one prompt's sequences kept in one request, against requests by bucket.

`TritonBackend` pads sequences to 512-token buckets so Triton can merge requests of one shape. A prompt
whose responses fall on both sides of a bucket boundary is then split over requests that Triton can
never merge (their shapes differ), and each part computes the prompt again. With prefix sharing on,
`batching.requests` keeps the sequences the model would pack in one request, padded to the bucket of
the longest. This runs what Triton's infer function would run for each request (`score_in_groups`,
one forward per request as when nothing else is merged in) on a Qwen2-architecture RM sized so compute
dominates on CPU, for three plans, in one run:
  unshared   requests by bucket, prefix sharing off (the baseline)
  by-bucket  requests by bucket, prefix sharing on in the forward
  together   one prompt's sequences in one request (what the scorer sends now), prefix sharing on
and prints the median time of each over alternating rounds and the ratios to `unshared` and `by-bucket`.

    python bench/triton_requests_bench.py [--prompts 8] [--hidden 256] [--layers 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from cheems.forward import score_in_groups
from cheems.packing import Cost, plan_rows
from services.scorer.batching import bucket_length, requests
from trainer.tiny import build_model, build_tokenizer

SHAPES = {  # name: (prompt tokens, responses per prompt, response tokens)
    "RLHF-like": ((300, 1200), 8, (20, 300)),
    "long prompt": ((900, 1800), 4, (50, 300)),
}
MAX_ROWS = 64  # --max-batch-size


def sequences(shape: tuple[tuple[int, int], int, tuple[int, int]], prompts: int, seed: int = 0) -> list[list[int]]:
    (p_lo, p_hi), n, (r_lo, r_hi) = shape
    rng = random.Random(seed)
    out = []
    for _ in range(prompts):
        prompt = [rng.randrange(1000, 100000) for _ in range(rng.randint(p_lo, p_hi))]
        out += [prompt + [rng.randrange(1000, 100000) for _ in range(rng.randint(r_lo, r_hi))] for _ in range(n)]
    return out


def plans(model: Any, seqs: list[list[int]]) -> dict[str, Callable[[], None]]:
    lengths = [len(s) for s in seqs]
    rows = plan_rows(seqs, Cost.of(model.config))
    by_bucket = requests(lengths, MAX_ROWS)
    together = requests(lengths, MAX_ROWS, [r.members for r in rows if len(r.members) > 1])

    def run(chosen: list[tuple[int, list[int]]], share: bool) -> Callable[[], None]:
        return lambda: [score_in_groups(model, [seqs[i] for i in m], MAX_ROWS, "cpu", share=share) for _, m in chosen]

    return {"unshared": run(by_bucket, False), "by-bucket": run(by_bucket, True), "together": run(together, True)}


def split_prompts(seqs: list[list[int]], per_prompt: int) -> int:
    """Prompts whose sequences fall in more than one bucket."""
    groups = [seqs[k : k + per_prompt] for k in range(0, len(seqs), per_prompt)]
    return sum(len({bucket_length(len(s)) for s in g}) > 1 for g in groups)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model = build_model(build_tokenizer(), args.hidden, args.layers).eval()
    for name, shape in SHAPES.items():
        seqs = sequences(shape, args.prompts)
        runs = plans(model, seqs)
        times: dict[str, list[float]] = {plan: [] for plan in runs}
        for _ in range(args.rounds):
            for plan, run in runs.items():
                started = time.perf_counter()
                with torch.no_grad():
                    run()
                times[plan].append(time.perf_counter() - started)
        t = {plan: statistics.median(v) for plan, v in times.items()}
        split = split_prompts(seqs, shape[1])
        print(f"{name}: {args.prompts} prompts, {len(seqs)} sequences, {split} prompts across a bucket boundary")
        print("  " + "  ".join(f"{plan} {t[plan]:.2f} s" for plan in runs))
        print(
            f"  unshared / together = {t['unshared'] / t['together']:.2f}x   "
            f"by-bucket / together = {t['by-bucket'] / t['together']:.2f}x"
        )


if __name__ == "__main__":
    main()
