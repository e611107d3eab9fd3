"""Score every response of bench files (CheemsBench or RewardBench) with an RM: the rewards file `cheems eval` reads.

    cheems rewards data/sample/open.jsonl data/sample/human.jsonl --model out/train-tiny/model --out r.jsonl
    cheems rewards ... --model-url localhost:50051        # through a running scorer

In-process scoring uses the scorer's own tokenization (left truncation at max_length) and the torch
backend's length-grouped batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from cheems.chat import Truncation
from cheems.formats.benchfile import read_bench_file
from cheems.formats.cheemsbench import BenchItem
from cheems.formats.rewards_file import write_rewards
from services.scorer.tokenization import make_job, tokenize_job


def _system(item: BenchItem) -> str:
    value = item.extra.get("sys_prompt")
    return value if isinstance(value, str) else ""


def score_items_in_process(items: Sequence[BenchItem], model_dir: str, max_length: int = 2048) -> list[list[float]]:
    from transformers import AutoTokenizer

    from services.scorer.backends import TorchBackend

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    backend = TorchBackend(model_dir)
    out = []
    for item in tqdm(items, desc="score", unit="prompt"):
        job = make_job(item.input, [r.content for r in item.responses], _system(item), max_responses=10**6)
        out.append(backend.score([e.input_ids for e in tokenize_job(tokenizer, job, max_length, Truncation.LEFT)]))
    return out


def score_items_remote(items: Sequence[BenchItem], url: str, token: str = "", model: str = "") -> list[list[float]]:
    """Scores through a running scorer; `model`: the model id (or alias) every call names ("" = its default)."""
    from services.scorer.client import RewardClient

    with RewardClient(url, token=token, timeout=300, model=model) as client:
        return [
            client.score(i.input, [r.content for r in i.responses], _system(i))
            for i in tqdm(items, desc="score", unit="prompt")
        ]


def write_bench_rewards(
    bench: Sequence[str | Path], out: str | Path, model_dir: str = "", url: str = "", token: str = ""
) -> int:
    items = [item for path in bench for item in read_bench_file(path)]  # CheemsBench or RewardBench, detected
    scores = score_items_remote(items, url, token) if url else score_items_in_process(items, model_dir)
    rows = [
        (i.input, r.id, s)
        for i, values in zip(items, scores, strict=True)
        for r, s in zip(i.responses, values, strict=True)
    ]
    return write_rewards(out, rows)
