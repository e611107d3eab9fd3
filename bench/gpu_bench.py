"""The scorer against the device's limit, in one run: issue 29's table, for a GPU (and, smaller, the CPU).

Two shapes of request, N of each (`--requests`):
  CheemsBench-like  a prompt of ~190 Chinese characters, 5 responses of 400-500
  RLHF-like         a system prompt of ~1,040 characters + a question of 40, 8 completions of ~40
For each dtype (`--dtypes`, default float32 and bfloat16), on a random-weight RM of the options' shape
(`bench/model_options.py`):
  in-process   `cheems.forward.score_in_groups` on tokens encoded beforehand: one request at a time
               (ms a request), and all N requests in one call (responses/s)
  served       a `ScorerServer` on the torch backend in this process, on the same device and dtype: Score
               calls at each `--concurrency` (responses/s, p50 latency; a level above N is measured at N), and
               ScoreBatch of 32 items a call (N when fewer)
  ratios       served / in-process batched in the same dtype; p50 at the highest concurrency / p50 at 1
  MFU          model FLOP utilisation, 2 x non-embedding parameters x tokens / time against `--peak-tflops`
               (default 790: an H100's or H200's dense bf16 peak, whatever the dtype measured); the tokens
               are those computed (with prefix sharing a request's prompt once), attention not counted
Prefix sharing is on for both (the scorer's default); `--prefix-sharing off` turns it off for both.

`--backend vllm` runs instead, for each dtype, `scorer_bench.py --backend vllm`'s comparison on this model: a
torch-backend and a vLLM-backend scorer served at each `--concurrency` on its two shapes (its RLHF-like one has
completions of ~100-200 tokens), vLLM/torch, and served vLLM at the highest level / vLLM offline (`LLM.encode`
of the same sequences; goal >= 0.8 on a GPU). It needs vLLM (`make setup-vllm VLLM=vllm`, or --vllm-python)
and stops in one line without it; --shapes, --rounds, --max-batch*, --prefix-sharing and --queue-delay-us are
not used there.

    python bench/gpu_bench.py                  # CPU: 8 requests of each shape, hidden 256, 4 layers (minutes)
    python bench/gpu_bench.py --device cuda --hidden 896 --layers 24 --heads 14 --kv-heads 2 --intermediate 4864
        [--requests 64] [--dtypes float32,bfloat16] [--shapes cheemsbench,rlhf] [--concurrency 1,8,32]
        [--skip-served] [--peak-tflops 790] [--rounds 3] [--max-batch 64] [--max-batch-tokens 32768]
        [--prefix-sharing on|off] [--queue-delay-us US]
    python bench/gpu_bench.py --backend vllm --device cuda --dtypes bfloat16 --hidden 896 --layers 24 --heads 14 \
        --kv-heads 2 --intermediate 4864 [--vllm-python PATH] [--vllm-memory-fraction 0.5] [--vllm-quick-start]
"""

from __future__ import annotations

import argparse
import functools
import gc
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from model_options import (
    DTYPES,
    add_model_options,
    describe_device,
    describe_dtype,
    describe_shape,
    load_on,
    random_model,
    synchronize,
)
from prefix_bench import alternate, requests
from scorer_bench import add_vllm_options, require_vllm, run, torch_against_vllm

from cheems.chat import Conversation, encode_many
from cheems.forward import MAX_BATCH_TOKENS, can_share, score_in_groups
from cheems.model import save_model
from cheems.packing import Cost, plan_rows
from cheems.v1 import reward_pb2
from services.scorer.client import RewardClient, chunks
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer
from trainer.tiny import build_tokenizer

SHAPES = {  # option name: (label, (system prompt chars, question chars, responses, response chars +-10%))
    "cheemsbench": ("CheemsBench-like", (0, 190, 5, 450)),
    "rlhf": ("RLHF-like", (1040, 40, 8, 40)),
}
BATCH_ITEMS = 32  # ScoreBatch items a call (at most)
Request = tuple[str, str, list[str]]  # (system prompt, question, responses)


def non_embedding_parameters(model: Any) -> int:
    """Parameters a token's forward multiplies by: all but the input embedding table (a lookup)."""
    embedding = {id(p) for p in model.get_input_embeddings().parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in embedding)


def mfu(parameters: int, tokens: int, seconds: float, peak_tflops: float) -> float:
    """Model FLOP utilisation: 2 FLOPs per parameter per token over the time taken, as a share of the peak."""
    return 2 * parameters * tokens / seconds / (peak_tflops * 1e12)


def computed_tokens(sequences: Sequence[Sequence[int]], config: Any, share: bool) -> int:
    """Tokens a forward computes for one request's sequences: with sharing, a packed row's prefix once."""
    if not share:
        return sum(len(s) for s in sequences)
    return sum(row.length(sequences) for row in plan_rows(sequences, Cost.of(config)))


@dataclass
class Workload:
    """One shape's requests, their token ids (encoded beforehand) and the tokens each costs the model."""

    label: str
    requests: list[Request]
    sequences: list[list[list[int]]]  # per request, per response
    tokens: list[int]  # computed per request

    def responses(self) -> int:
        return sum(len(r) for _, _, r in self.requests)


def workload(name: str, count: int, tokenizer: Any, config: Any, share: bool) -> Workload:
    label, shape = SHAPES[name]
    work = requests(shape, count)
    sequences = [
        [e.input_ids for e in encode_many(tokenizer, [Conversation(q, r, s or None) for r in rs])] for s, q, rs in work
    ]
    return Workload(label, work, sequences, [computed_tokens(s, config, share) for s in sequences])


def in_process(model: Any, work: Workload, args: argparse.Namespace) -> dict[str, float]:
    """Seconds (medians of `--rounds`) of the requests one at a time, and of all of them in one call."""
    score = functools.partial(
        score_in_groups,
        model,
        max_batch=args.max_batch,
        device=args.device,
        share=args.share,
        max_tokens=args.max_batch_tokens,
    )

    def one_by_one() -> None:
        for sequences in work.sequences:
            score(sequences)

    def batched() -> None:
        score([s for sequences in work.sequences for s in sequences])

    for sequences in work.sequences[:2]:  # warm-up: kernels chosen, caches allocated, alone and batched
        score(sequences)
    score([s for sequences in work.sequences[:4] for s in sequences])
    runs = {"one": one_by_one, "batched": batched}
    return alternate(runs, args.rounds, lambda: synchronize(args.device), warm_ups=args.warm_ups)


def served(client: RewardClient, work: Workload, concurrency: Sequence[int], batch_items: int) -> dict[str, Any]:
    """Score at each concurrency, then ScoreBatch of `batch_items` items a call, one call at a time."""

    def score(system: str, question: str, responses: list[str]) -> object:
        return client.score(question, responses, system_prompt=system)

    def responses(call: tuple[Any, ...]) -> int:
        return sum(len(item.responses) for item in call[0])

    run(score, work.requests[:4], 4)  # warm-up
    levels = {c: run(score, work.requests, c) for c in concurrency}
    items = [reward_pb2.ScoreRequest(prompt=q, responses=r, system_prompt=s) for s, q, r in work.requests]
    batch = run(client.score_batch, [(chunk,) for chunk in chunks(items, batch_items)], 1, responses)
    return {"levels": levels, "batch": batch}


def served_rows(args: argparse.Namespace, directory: Path, dtype: str, works: dict[str, Workload]) -> dict[str, Any]:
    """The served figures of each workload, from one scorer on the device in `dtype`."""
    config = ScorerConfig(
        model=str(directory),
        backend="torch",
        device=args.device,
        dtype=dtype,
        host="127.0.0.1",
        grpc_port=0,
        http_port=-1,
        max_batch_size=args.max_batch,
        max_batch_tokens=args.max_batch_tokens,
        prefix_sharing=args.share,
        **({"queue_delay_us": args.queue_delay_us} if args.queue_delay_us is not None else {}),
    )
    with ScorerServer(config) as server, RewardClient(f"127.0.0.1:{server.grpc_port}", timeout=600) as client:
        print(f"  served {dtype}: GetModelInfo says dtype {client.model_info().dtype}")
        return {name: served(client, work, args.concurrency, args.batch_items) for name, work in works.items()}


def measure(args: argparse.Namespace, directory: Path, dtype: str, works: dict[str, Workload]) -> dict[str, Any]:
    """In-process seconds of each workload, then (unless --skip-served) the served figures, in `dtype`."""
    model, _ = load_on(directory, dtype, args.device)
    seconds = {}
    for name, work in works.items():
        seconds[name] = in_process(model, work, args)
        print(f"  in-process {dtype}, {work.label}: {seconds[name]['batched']:.2f} s for all {len(work.requests)}")
    del model  # the served copy alone on the device
    gc.collect()
    if torch.device(args.device).type == "cuda":
        torch.cuda.empty_cache()
    return {"in": seconds, "served": None if args.skip_served else served_rows(args, directory, dtype, works)}


def rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def dtype_rows(
    args: argparse.Namespace, dtype: str, works: dict[str, Workload], result: dict[str, Any], parameters: int
) -> list[tuple[str, list[str]]]:
    """The table's rows for one dtype: (label, a cell for each workload)."""
    inside, outside = result["in"], result["served"]
    batched = {n: w.responses() / inside[n]["batched"] for n, w in works.items()}

    def used(tokens: int, seconds: float) -> str:
        return f"{mfu(parameters, tokens, seconds, args.peak_tflops) * 100:.3g}%"  # 3 figures: 45.3%, 0.00121%

    rows = [
        (
            f"in-process `score_in_groups`, one request at a time, {dtype}",
            [f"{inside[n]['one'] / len(w.requests) * 1e3:,.1f} ms a request" for n, w in works.items()],
        ),
        (
            f"in-process, all {args.requests} requests in one call, {dtype}",
            [
                f"{rate(batched[n])} responses/s, MFU {used(sum(w.tokens), inside[n]['batched'])}"
                for n, w in works.items()
            ],
        ),
    ]
    if outside is None:
        return rows

    def per_level(figure: Callable[[str, Workload, int, dict[str, float]], str]) -> list[str]:
        """A cell of each workload: `figure` at each concurrency level, joined by " / "."""
        return [
            " / ".join(figure(n, w, c, outside[n]["levels"][c]) for c in args.concurrency) for n, w in works.items()
        ]

    levels = " / ".join(str(c) for c in args.concurrency)
    low, high = min(args.concurrency), max(args.concurrency)
    batch = {n: outside[n]["batch"] for n in works}
    rows += [
        (
            f"served (torch backend), Score at concurrency {levels}, {dtype}, responses/s",
            per_level(lambda n, w, c, r: rate(r["rps"])),
        ),
        (f"p50 latency at concurrency {levels}, {dtype}, ms", per_level(lambda n, w, c, r: f"{r['p50'] * 1e3:,.0f}")),
        (
            f"MFU served at concurrency {levels}, {dtype}",
            per_level(lambda n, w, c, r: used(sum(w.tokens), r["seconds"])),
        ),
        (
            f"ScoreBatch, {args.batch_items} items a call, {dtype}",
            [
                f"{rate(batch[n]['rps'])} responses/s, MFU {used(sum(w.tokens), batch[n]['seconds'])}"
                for n, w in works.items()
            ],
        ),
        (
            f"served at concurrency {levels} / in-process batched, {dtype}",
            per_level(lambda n, w, c, r: f"{r['rps'] / batched[n]:.2f}"),
        ),
        (f"ScoreBatch / in-process batched, {dtype}", [f"{batch[n]['rps'] / batched[n]:.2f}" for n in works]),
        (
            f"p50 at concurrency {high} / p50 at concurrency {low}, {dtype}",
            [f"{outside[n]['levels'][high]['p50'] / outside[n]['levels'][low]['p50']:.2f}x" for n in works],
        ),
    ]
    return rows


def speedup_rows(args: argparse.Namespace, works: dict[str, Workload], results: dict[str, Any]) -> list:
    """In-process batched throughput of each later dtype against the first."""
    base = args.dtypes[0]
    return [
        (
            f"in-process batched, {dtype} / {base}",
            [f"{results[base]['in'][n]['batched'] / results[dtype]['in'][n]['batched']:.2f}x" for n in works],
        )
        for dtype in args.dtypes[1:]
    ]


def describe_work(name: str, work: Workload) -> str:
    system, question, count, chars = SHAPES[name][1]
    prompt = f"system ~{system:,} + question {question}" if system else f"prompt ~{question} chars"
    tokens = sum(work.tokens) / len(work.tokens)
    return f"{work.label} ({prompt}, {count} responses of ~{chars}; ~{tokens:,.0f} tokens computed a request)"


def print_table(rows: list[tuple[str, list[str]]], works: dict[str, Workload]) -> None:
    print("\n| | " + " | ".join(describe_work(n, w) for n, w in works.items()) + " |")
    print("| --- |" + " --- |" * len(works))
    for label, cells in rows:
        print(f"| {label} | " + " | ".join(cells) + " |")


def listed(choices: Sequence[str] | None = None, kind: Callable[[str], Any] = str) -> Callable[[str], list[Any]]:
    """An argparse type: a comma-separated list, each item one of `choices` (when given) or of `kind`."""

    def parse(value: str) -> list[Any]:
        items = [item.strip() for item in value.split(",") if item.strip()]
        if not items or (choices is not None and any(item not in choices for item in items)):
            raise argparse.ArgumentTypeError(f"{value!r}: give a comma-separated list of {', '.join(choices or [])}")
        try:
            return [kind(item) for item in items]
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{value!r}: {e}") from None

    return parse


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_options(parser, dtype=False)
    parser.add_argument("--requests", type=int, help="requests of each shape (default 64 on CUDA, 8 on the CPU)")
    parser.add_argument("--rounds", type=int, help="in-process rounds, median (default 3 on CUDA, 1 on the CPU)")
    parser.add_argument("--dtypes", type=listed(DTYPES), default="float32,bfloat16", help="default float32,bfloat16")
    parser.add_argument("--shapes", type=listed(list(SHAPES)), default="cheemsbench,rlhf", help="default both")
    parser.add_argument("--concurrency", type=listed(kind=int), default="1,8,32", help="Score levels (default 1,8,32)")
    parser.add_argument("--skip-served", action="store_true", help="in-process figures only")
    parser.add_argument("--peak-tflops", type=float, default=790.0, help="the card's dense bf16 peak (default 790)")
    parser.add_argument("--max-batch", type=int, default=64, help="sequences a forward, both sides (default 64)")
    parser.add_argument(
        "--max-batch-tokens",
        type=int,
        default=MAX_BATCH_TOKENS,
        help="padded tokens a forward, both sides (default 32768)",
    )
    parser.add_argument("--prefix-sharing", choices=("on", "off"), default="on", help="both sides (default on)")
    parser.add_argument("--queue-delay-us", type=int, help="the scorer's batching wait (default: the scorer's)")
    parser.add_argument(
        "--backend", choices=("torch", "vllm"), default="torch", help="vllm: torch against vLLM (the docstring)"
    )
    add_vllm_options(parser)
    args = parser.parse_args(argv)
    cuda = torch.device(args.device).type == "cuda"
    args.requests = args.requests or (64 if cuda else 8)
    args.rounds = args.rounds or (3 if cuda else 1)
    args.warm_ups = 1 if cuda else 0  # a whole pass more: a GPU's first large batches allocate and pick kernels
    args.share = args.prefix_sharing == "on"
    args.asked = args.concurrency
    args.concurrency = sorted({min(c, args.requests) for c in args.concurrency})  # N requests: N in flight at most
    args.batch_items = min(BATCH_ITEMS, args.requests)
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.backend == "vllm":
        against_vllm(args)
        return
    tokenizer = build_tokenizer()
    model = random_model(args, tokenizer)
    parameters = non_embedding_parameters(model)
    share = args.share and can_share(model)
    works = {name: workload(name, args.requests, tokenizer, model.config, share) for name in args.shapes}
    print(describe_device(args.device))
    print(
        f"model: {describe_shape(args)}, vocabulary {len(tokenizer):,}, random weights: "
        f"{sum(p.numel() for p in model.parameters()) / 1e6:,.1f}M parameters, {parameters / 1e6:,.1f}M non-embedding"
    )
    print(
        f"dtypes {', '.join(describe_dtype(d, args.device) for d in args.dtypes)}; {args.requests} requests of each "
        f"shape; prefix sharing {args.prefix_sharing}; a forward of at most {args.max_batch} sequences and "
        f"{args.max_batch_tokens:,} padded tokens; MFU against {args.peak_tflops:g} TFLOPS"
    )
    if args.concurrency != sorted(args.asked):
        print(
            f"concurrency {' / '.join(map(str, args.asked))} asked, {' / '.join(map(str, args.concurrency))} measured: "
            f"{args.requests} requests keep at most {args.requests} calls in flight (more with --requests)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        directory = save_model(model, tokenizer, Path(tmp) / "rm")
        del model
        results = {dtype: measure(args, directory, dtype, works) for dtype in args.dtypes}
    rows = [row for dtype in args.dtypes for row in dtype_rows(args, dtype, works, results[dtype], parameters)]
    print_table(rows + speedup_rows(args, works, results), works)


def against_vllm(args: argparse.Namespace) -> None:
    """--backend vllm: `scorer_bench.py --backend vllm`'s comparison on the options' model, in each dtype."""
    require_vllm(args.vllm_python, "gpu_bench.py")  # before anything loads: one line when vLLM is missing
    tokenizer = build_tokenizer()
    print(describe_device(args.device))
    print(f"model: {describe_shape(args)}, vocabulary {len(tokenizer):,}, random weights")
    with tempfile.TemporaryDirectory() as tmp:
        directory = save_model(random_model(args, tokenizer), tokenizer, Path(tmp) / "rm")
        for dtype in args.dtypes:
            torch_against_vllm(args, directory, tokenizer, dtype, args.asked)


if __name__ == "__main__":
    main()
