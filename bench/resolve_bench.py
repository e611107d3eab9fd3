"""Conflict resolution at CheemsPreference scale: 27,861 prompts with about 11 AI comparisons each.

Times, in one run: building every prompt's preference graph (the baseline) and the full
resolution (graph + merge cycles + peel layers + conflict count), and prints prompts/s and the
ratio resolve / build.

    python bench/resolve_bench.py [--prompts 27861]
"""

from __future__ import annotations

import argparse
import random
import time

from services.annotation.algorithm.resolve import Relation, preference_graph, resolve


def synth(prompts: int, seed: int = 0) -> list[list[Relation]]:
    """Per prompt: 5-7 responses, ~11 noisy pairwise verdicts (10% ties, 15% flipped against a hidden order)."""
    rng = random.Random(seed)
    data = []
    for _ in range(prompts):
        ids = [f"r{i}" for i in range(rng.randint(5, 7))]
        quality = {i: rng.random() for i in ids}
        relations = []
        for _ in range(rng.randint(9, 13)):
            a, b = rng.sample(ids, 2)
            if rng.random() < 0.1:
                relations.append(Relation(a, b, tie=True))
                continue
            better, worse = (a, b) if quality[a] > quality[b] else (b, a)
            relations.append(Relation(worse, better) if rng.random() < 0.15 else Relation(better, worse))
        data.append(relations)
    return data


def seconds(fn, data) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    for relations in data:
        fn(relations)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=27861)
    args = parser.parse_args()
    data = synth(args.prompts)
    build = min(seconds(preference_graph, data) for _ in range(2))
    full = min(seconds(resolve, data) for _ in range(2))
    conflicts = sum(resolve(r).conflicts for r in data[:2000]) / sum(len(r) for r in data[:2000])
    print(
        f"{args.prompts} prompts, {sum(len(r) for r in data) / len(data):.1f} comparisons each "
        f"(conflict ratio of this synthetic judge: {conflicts:.3f})"
    )
    print(f"  build graphs: {build:6.2f} s  {args.prompts / build:8.0f} prompts/s")
    print(f"  resolve:      {full:6.2f} s  {args.prompts / full:8.0f} prompts/s")
    print(f"resolve / build = {full / build:.2f}x")


if __name__ == "__main__":
    main()
