"""Synthetic Chinese data at the paper's sizes, in the official CheemsBench layout, for the benchmarks.

CheemsPreference: 27,861 prompts x 7 responses of 350-900 characters (about 372 MB, about 1,000 tokens a
sequence with Qwen's tokenizer); CheemsBench: 2,492 prompts x 5 responses. The text is seeded random Chinese
(GB2312's characters and punctuation in sentence-sized runs, one token a character with Qwen's tokenizer, so the
paper's 27,861 x 7 file holds about 150 M tokens; `--chars 500,1250` gives its 195 M): it means nothing.

    python bench/paper_data.py --out out/bench/preference.jsonl                 # 27,861 x 7 (372 MB)
    python bench/paper_data.py --out out/bench/bench.jsonl --prompts 2492 --responses 5
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PREFERENCE_PROMPTS = 27_861
PREFERENCE_RESPONSES = 7
BENCH_PROMPTS = 2_492
BENCH_RESPONSES = 5
# GB2312's 6,763 characters (its first level, 3,755 common ones, then 3,008 rarer), decoded once from the table's rows.
# Drawn at random, each is one token of Qwen's tokenizer (a sequence of 350-900 characters: 400-950 tokens).
_COMMON = bytes(b for row in range(0xB0, 0xF8) for col in range(0xA1, 0xFF) for b in (row, col)).decode(
    "gb2312", errors="ignore"
)
_PUNCTUATION = "，。、；：？！"
CATEGORIES = [["推理", "逻辑推理"], ["知识", "常识"], ["创作", "写作"], ["代码", "编程"], ["数学", "计算"]]


def sentences(rng: random.Random, count: int = 4096) -> list[str]:
    """A pool of `count` sentence-like runs of 6-30 common characters, each ending in punctuation."""
    pool = []
    for _ in range(count):
        body = "".join(rng.choices(_COMMON, k=rng.randint(6, 30)))
        pool.append(body + rng.choice(_PUNCTUATION))
    return pool


def text(rng: random.Random, pool: list[str], low: int, high: int) -> str:
    """Sentences from the pool until the text is between `low` and `high` characters long."""
    target = rng.randint(low, high)
    parts: list[str] = []
    size = 0
    while size < target:
        part = rng.choice(pool)
        parts.append(part)
        size += len(part)
    return "".join(parts)[:target]


def records(prompts: int, responses: int, seed: int, low: int, high: int) -> Iterator[dict[str, Any]]:
    rng = random.Random(seed)
    pool = sentences(rng)
    for n in range(prompts):
        ids = [f"r{i + 1}" for i in range(responses)]
        yield {
            "input": f"{n}. " + text(rng, pool, 20, 200),
            "responses": [{"id": i, "content": text(rng, pool, low, high)} for i in ids],
            "rank": {i: rng.randint(1, 4) for i in ids},  # a partial ranking: ties allowed, as the paper's
            "category": CATEGORIES[n % len(CATEGORIES)],
        }


def write(out: Path, prompts: int, responses: int, seed: int = 0, low: int = 350, high: int = 900) -> Path:
    """Write the file (skipped when one of the same name and settings is there: its sidecar `.json` says)."""
    settings = {"prompts": prompts, "responses": responses, "seed": seed, "chars": [low, high], "version": 1}
    sidecar = out.with_suffix(out.suffix + ".json")
    if out.exists() and sidecar.exists() and json.loads(sidecar.read_text()) == settings:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for record in records(prompts, responses, seed, low, high):
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    sidecar.write_text(json.dumps(settings))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts", type=int, default=PREFERENCE_PROMPTS)
    parser.add_argument("--responses", type=int, default=PREFERENCE_RESPONSES)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chars", default="350,900", help="LOW,HIGH: a response's length in characters")
    args = parser.parse_args(argv)
    low, high = (int(x) for x in args.chars.split(","))
    start = time.perf_counter()
    path = write(args.out, args.prompts, args.responses, args.seed, low, high)
    size = path.stat().st_size / 2**20
    print(f"{path}: {args.prompts} prompts x {args.responses} responses, {size:.0f} MiB", file=sys.stderr)
    print(f"({time.perf_counter() - start:.1f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
