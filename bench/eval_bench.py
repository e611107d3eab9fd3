"""How much of `cheems eval` is metric computation, on a CheemsBench-sized input.

CheemsBench has 2,492 prompts with 5 responses each (~17.6k ranked pairs after gold ties). This
writes a synthetic benchmark of that size (two subsets, like open/human), then times in one run:
  raw    - json.loads of every line of the bench and rewards files (the floor of any loader)
  load   - read_bench + read_rewards (validated loading)
  metric - `evaluate`: joining rewards and computing every metric on already-loaded data
  eval   - evaluate_files end to end (load + metric)
and prints medians and ratios against `load`. Absolute times vary between machines; ratios are the figure.

    python bench/eval_bench.py [--prompts 2492] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cheems.formats.cheemsbench import BenchItem, read_bench, write_bench
from cheems.formats.responses import Response
from cheems.formats.rewards_file import read_rewards, write_rewards
from evaluator.evaluate import evaluate, evaluate_files

CATEGORIES = ["推理", "数学", "代码", "知识", "语言", "安全", "理解", "复杂指令"]
CHARS = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到"
    "作地于出就分对成会可主发年动同工也能下过子说产种面"
    "而方后多定行学法所民得经"
)


def synthesize(directory: Path, prompts: int, seed: int = 0) -> tuple[list[Path], Path]:
    rng = random.Random(seed)
    subsets: dict[str, list[BenchItem]] = {"open": [], "human": []}
    rewards = []
    for n in range(prompts):
        text = f"{n}:" + "".join(rng.choices(CHARS, k=rng.randint(20, 120)))
        responses = tuple(Response(f"r{i}", "".join(rng.choices(CHARS, k=rng.randint(100, 600)))) for i in range(5))
        rank = {r.id: rng.randint(1, 4) for r in responses}
        item = BenchItem(text, responses, rank, (rng.choice(CATEGORIES), "二级"))
        subsets["open" if n % 2 else "human"].append(item)
        rewards += [(text, r.id, rng.gauss(-rank[r.id], 1.0)) for r in responses]
    paths = [directory / f"{name}.jsonl" for name in subsets]
    for path, items in zip(paths, subsets.values(), strict=True):
        write_bench(path, items)
    write_rewards(directory / "rewards.jsonl", rewards)
    return paths, directory / "rewards.jsonl"


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=2492)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bench, rewards_path = synthesize(Path(tmp), args.prompts)
        files = [*bench, rewards_path]
        loaded = {p.stem: (str(p), read_bench(p)) for p in bench}
        rewards = read_rewards(rewards_path)
        pairs = evaluate(loaded, rewards)
        cases: dict[str, Callable[[], object]] = {
            "raw": lambda: [json.loads(line) for p in files for line in p.open(encoding="utf-8")],
            "load": lambda: ([read_bench(p) for p in bench], read_rewards(rewards_path)),
            "metric": lambda: evaluate(loaded, rewards),
            "eval": lambda: evaluate_files(bench, rewards_path),
        }
        size_mb = sum(p.stat().st_size for p in files) / 1e6
        timings = {name: median_seconds(fn, args.repeats) for name, fn in cases.items()}
    total_pairs = sum(s.pairs for s in pairs.subsets.values())
    print(
        f"input: {args.prompts} prompts x 5 responses, {total_pairs} ranked pairs, "
        f"{size_mb:.1f} MB of jsonl, median of {args.repeats} runs"
    )
    for name, seconds in timings.items():
        print(f"  {name:<7} {seconds * 1000:8.1f} ms   {seconds / timings['load']:5.2f}x load")
    print(
        f"metric / load = {timings['metric'] / timings['load']:.3f}; "
        f"eval / load = {timings['eval'] / timings['load']:.3f}"
    )


if __name__ == "__main__":
    main()
