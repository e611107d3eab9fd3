"""Sample-based batching (each response encoded once per epoch) against pairwise batching.

On CheemsBench-shaped data (5 responses per prompt, about 7 ranked pairs each), one epoch of
forward+backward with the same tiny RM and batch size (in responses), in one run:
  pairwise - every pair is a (chosen, rejected) item; a response is re-encoded for each of its pairs
             (how OpenRLHF and TRL batch preference data)
  sample   - trainer.sampler's greedy sample-based batches
Prints response encodings per epoch, pairs trained, and wall time, with ratios pairwise / sample.
Then tokens/s per process of `trainer.train` with 1 and 2 torchrun processes (gloo on CPU).

    python bench/sampler_bench.py [--prompts 48] [--batch 10]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from cheems.formats.cheemsbench import BenchItem, write_bench
from cheems.formats.responses import Response
from cheems.forward import forward_rewards
from trainer.data import read_groups, tokenize_groups
from trainer.loss import bt_loss
from trainer.sampler import SamplerConfig, epoch_batches, pairs_in_batch
from trainer.tiny import build_model, build_tokenizer, init_tiny_model

RANKINGS = [[1, 2, 3, 3, 3], [1, 1, 2, 3, 3], [1, 2, 2, 3, 4], [1, 2, 3, 4, 4]]  # 7, 8, 9, 9 pairs
WORDS = "今天我们讨论这个问题的答案需要从多个角度分析首先其次最后总结一下可以看到结果非常清楚"


def synth(path: Path, prompts: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    items = []
    for n in range(prompts):
        ranks = rng.choice(RANKINGS)
        responses = tuple(Response(f"r{i}", "".join(rng.choices(WORDS, k=rng.randint(60, 160)))) for i in range(5))
        items.append(
            BenchItem(
                f"问题{n}：" + "".join(rng.choices(WORDS, k=20)),
                responses,
                {r.id: k for r, k in zip(responses, ranks, strict=True)},
                ("推理",),
            )
        )
    write_bench(path, items)
    return path


def run_epoch(model, optimizer, data, batches) -> tuple[int, int, float]:  # type: ignore[no-untyped-def]
    """(encodings, pairs trained, seconds) for batches of (example ids, pair positions)."""
    encodings = pairs = 0
    start = time.perf_counter()
    for ids, batch_pairs in batches:
        out = forward_rewards(model, [data.examples[x].input_ids for x in ids])
        bt_loss(out, batch_pairs).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        encodings += len(ids)
        pairs += len(batch_pairs)
    return encodings, pairs, time.perf_counter() - start


def in_process(train_file: Path, batch: int) -> dict[str, tuple[int, int, float]]:
    tokenizer = build_tokenizer()
    data = tokenize_groups(read_groups(train_file), tokenizer, max_length=512)
    group_of = data.group_of
    sample = [
        (b, pairs_in_batch(b, data.pairs, group_of))
        for b in epoch_batches(data.groups, data.pairs, SamplerConfig(batch, seed=0), 0)
    ]
    flat = [p for group in data.pairs for p in group]
    random.Random(0).shuffle(flat)
    per = max(1, batch // 2)
    pairwise = []
    for i in range(0, len(flat), per):
        chunk = flat[i : i + per]
        pairwise.append(([x for p in chunk for x in p], [(2 * k, 2 * k + 1) for k in range(len(chunk))]))
    results = {}
    for name, batches in (("pairwise", pairwise), ("sample", sample)):
        torch.manual_seed(0)
        model = build_model(tokenizer, hidden_size=64, layers=2)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        run_epoch(model, optimizer, data, batches[:2])  # warm-up
        results[name] = run_epoch(model, optimizer, data, batches)
    return results


def tokens_per_second(model: Path, train_file: Path, nproc: int, out: Path) -> float:
    sets = [
        f"model={model}",
        f"train_files={train_file}",
        "eval_files=[]",
        f"out_dir={out}",
        "epochs=1",
        "micro_batch_size=5",
        "progress=false",
        "max_length=512",
        "resume=false",
    ]
    args = ["--recipe", "tiny-cpu"] + [x for s in sets for x in ("--set", s)]
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] if nproc > 1 else []
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, *launcher, "-m", "trainer.train", *args], check=True, env=env, capture_output=True)
    log = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return statistics.median(r["tokens_per_s"] for r in log[1:])  # skip the first (warm-up) step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument("--batch", type=int, default=10, help="responses per batch (forward)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        train_file = synth(Path(tmp) / "train.jsonl", args.prompts)
        res = in_process(train_file, args.batch)
        model = init_tiny_model(Path(tmp) / "tiny")
        tps = {n: tokens_per_second(model, train_file, n, Path(tmp) / f"run{n}") for n in (1, 2)}
    (pe, pp, pt), (se, sp, st) = res["pairwise"], res["sample"]
    print(f"{args.prompts} prompts x 5 responses, batch {args.batch} responses, one epoch, 1 thread")
    print(f"  pairwise: {pe:6d} encodings  {pp:5d} pairs trained  {pt:7.2f} s")
    print(f"  sample:   {se:6d} encodings  {sp:5d} pairs trained  {st:7.2f} s")
    print(
        f"encodings pairwise/sample = {pe / se:.2f}x; wall time pairwise/sample = {pt / st:.2f}x; "
        f"pairs kept by sample batching = {sp / pp:.1%}"
    )
    print(
        f"tokens/s per process: 1 process {tps[1]:.0f}, 2 processes {tps[2]:.0f} "
        f"(ratio {tps[2] / tps[1]:.2f}; this machine has {os.cpu_count()} cores)"
    )


if __name__ == "__main__":
    main()
