"""bench/lora_bench.py: the two runs differ only in the adapters and their learning rate; the table and its ratios.
No timing asserted (the runs themselves: `python bench/lora_bench.py`, README)."""

from __future__ import annotations

from pathlib import Path

from lora_bench import parse_args, run_config, table

from trainer.recipes import tiny_cpu


def test_the_two_runs_differ_only_in_the_adapters_and_their_learning_rate(tmp_path: Path) -> None:
    args = parse_args([])
    full = run_config(args, tmp_path / "m", tmp_path / "full", lora=False)
    lora = run_config(args, tmp_path / "m", tmp_path / "lora", lora=True)
    differ = {k for k in full if full[k] != lora[k]}
    assert differ == {"out_dir", "lora_rank", "lr"}
    assert (full["lora_rank"], lora["lora_rank"]) == (0, 16)
    assert (full["lr"], lora["lr"]) == (tiny_cpu().lr, 0.0)  # 0: the trainer's default for adapters
    assert full["eval_files"] == [str(args.eval)]
    assert (args.train.name, args.eval.name) == ("open.jsonl", "human.jsonl")  # the held-out subset evaluates
    given = parse_args(["--lora-lr", "3e-4", "--full-lr", "1e-3", "--rank", "8"])
    assert run_config(given, tmp_path, tmp_path, lora=True)["lr"] == 3e-4
    assert run_config(given, tmp_path, tmp_path, lora=False)["lr"] == 1e-3


def test_the_table_gives_the_lora_run_against_the_full_one() -> None:
    subsets = {"human": {"accuracy": 0.75, "exact_match": 0.25}}
    full = {"overall": 0.5, "subsets": subsets, "peak_bytes": 2 * 2**20, "seconds_per_step": 2.0, "lr": 2e-3}
    lora = {**full, "overall": 0.4, "peak_bytes": 2**20, "seconds_per_step": 1.5, "lr": 1e-4}
    text = table({"full": full, "lora": lora}, 16)
    assert "human Acc." in text
    assert "| full fine-tuning (lr 0.002) | 0.5000 | 0.7500 | 0.2500 | 2 MiB | 2.000 s |" in text
    assert "| LoRA r16 (lr 0.0001) | 0.4000 | 0.7500 | 0.2500 | 1 MiB (0.50x) | 1.500 s (0.75x) |" in text
