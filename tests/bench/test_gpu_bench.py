"""bench/gpu_bench.py's pure pieces: options, parameter count, MFU, tokens computed, the table. No timings."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_bench import (
    Workload,
    computed_tokens,
    dtype_rows,
    main,
    mfu,
    non_embedding_parameters,
    parse_args,
    print_table,
    speedup_rows,
)

from trainer.tiny import build_model, tiny_config


def test_defaults_on_the_cpu_and_on_cuda() -> None:
    args = parse_args([])
    assert (args.device, args.requests, args.rounds, args.warm_ups, args.peak_tflops) == ("cpu", 8, 1, 0, 790.0)
    assert (args.dtypes, args.shapes) == (["float32", "bfloat16"], ["cheemsbench", "rlhf"])
    assert (args.asked, args.concurrency, args.batch_items) == ([1, 8, 32], [1, 8], 8)  # 8 requests: 8 in flight
    assert (args.skip_served, args.share, args.max_batch, args.queue_delay_us, args.max_batch_tokens) == (
        False,
        True,
        64,
        None,
        32768,
    )
    assert (args.hidden, args.layers, args.heads, args.kv_heads, args.intermediate) == (256, 4, 4, 2, None)
    qwen = ["--hidden", "896", "--layers", "24", "--heads", "14", "--kv-heads", "2", "--intermediate", "4864"]
    cuda = parse_args(["--device", "cuda", *qwen])
    assert (cuda.requests, cuda.rounds, cuda.warm_ups, cuda.concurrency, cuda.batch_items) == (64, 3, 1, [1, 8, 32], 32)
    assert (cuda.hidden, cuda.layers, cuda.heads, cuda.kv_heads, cuda.intermediate) == (896, 24, 14, 2, 4864)


def test_the_vllm_backend_is_an_option_and_stops_in_one_line_without_vllm(tmp_path: Path) -> None:
    assert parse_args([]).backend == "torch"
    args = parse_args(["--backend", "vllm", "--vllm-memory-fraction", "0.4", "--vllm-quick-start"])
    assert (args.backend, args.vllm_python, args.vllm_memory_fraction, args.vllm_quick_start) == ("vllm", "", 0.4, True)
    with pytest.raises(SystemExit) as stopped:  # a GPU host without vLLM: refused before any model is built
        main(["--backend", "vllm", "--vllm-python", str(tmp_path / "no-python")])
    assert str(stopped.value).startswith("gpu_bench.py --backend vllm: ") and "\n" not in str(stopped.value)


def test_lists_are_read() -> None:
    args = parse_args(
        ["--dtypes", "bfloat16", "--shapes", "rlhf", "--concurrency", "1, 16", "--skip-served", "--requests", "16"]
    )
    assert (args.dtypes, args.shapes, args.concurrency, args.skip_served) == (["bfloat16"], ["rlhf"], [1, 16], True)


@pytest.mark.parametrize(
    "argv", [["--dtypes", "float32,bf16"], ["--shapes", "rlhf,chat"], ["--concurrency", "1,x"], ["--dtypes", ","]]
)
def test_bad_lists_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert f"argument {argv[0]}" in capsys.readouterr().err


def test_mfu_is_two_flops_per_parameter_and_token_over_the_peak() -> None:
    assert mfu(parameters=10**9, tokens=1000, seconds=1.0, peak_tflops=1.0) == pytest.approx(2.0)
    # Qwen2.5-0.5B's 358M non-embedding parameters, 100k tokens a second, on 790 TFLOPS: 9.1%
    assert mfu(358_000_000, 100_000, 1.0, 790.0) == pytest.approx(0.0906, abs=1e-4)


def test_non_embedding_parameters_leave_out_only_the_embedding_table(tokenizer: object) -> None:
    model = build_model(tokenizer, hidden_size=32, layers=1, heads=4, kv_heads=2, intermediate=64)
    attention = (32 * 32 + 32) + 2 * (32 * 16 + 16) + 32 * 32  # q, k, v with biases; o without (head_dim 8, 2 KV)
    layer = attention + 3 * 32 * 64 + 2 * 32  # gate, up, down; two norms
    assert non_embedding_parameters(model) == layer + 32 + 32  # + final norm + reward head
    assert sum(p.numel() for p in model.parameters()) - non_embedding_parameters(model) == 512 * 32


def test_computed_tokens_count_a_shared_prefix_once(tokenizer: object) -> None:
    config = tiny_config(tokenizer, hidden_size=32, layers=1)
    prompt = list(range(2, 202))
    sequences = [[*prompt, *range(300 + 5 * k, 305 + 5 * k)] for k in range(3)]
    assert computed_tokens(sequences, config, share=False) == 615
    assert computed_tokens(sequences, config, share=True) == 200 + 3 * 5


def test_a_workload_counts_its_responses() -> None:
    work = Workload("RLHF-like", [("系统", "问题", ["一", "二"]), ("", "问", ["三"])], [[], []], [10, 7])
    assert work.responses() == 3


def test_the_table_has_each_row_and_the_ratios_of_the_figures(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_args(["--concurrency", "1,2,8", "--requests", "2"])  # 8: at most 2 in flight
    works = {"rlhf": Workload("RLHF-like", [("系统", "问题", ["一", "二"])] * 2, [[], []], [100, 100])}
    level = {"rps": 2.0, "p50": 0.5, "seconds": 2.0}
    results = {
        "float32": {"in": {"rlhf": {"one": 1.0, "batched": 1.0}}, "served": None},
        "bfloat16": {
            "in": {"rlhf": {"one": 0.5, "batched": 0.25}},
            "served": {"rlhf": {"levels": {1: level, 2: {**level, "rps": 8.0, "p50": 1.5}}, "batch": level}},
        },
    }
    rows = [row for dtype in args.dtypes for row in dtype_rows(args, dtype, works, results[dtype], 10**9)]
    rows += speedup_rows(args, works, results)
    table = dict(rows)
    assert table["in-process `score_in_groups`, one request at a time, float32"] == ["500.0 ms a request"]
    assert table["in-process, all 2 requests in one call, bfloat16"] == ["16.0 responses/s, MFU 0.203%"]
    assert table["served at concurrency 1 / 2 / in-process batched, bfloat16"] == ["0.12 / 0.50"]
    assert table["p50 at concurrency 2 / p50 at concurrency 1, bfloat16"] == ["3.00x"]
    assert table["in-process batched, bfloat16 / float32"] == ["4.00x"]
    assert table["ScoreBatch, 2 items a call, bfloat16"] == ["2.0 responses/s, MFU 0.0253%"]
    assert not any("served" in label and "float32" in label for label in table)  # float32 was not served
    print_table(rows, works)
    printed = capsys.readouterr().out
    assert (
        "| | RLHF-like (system ~1,040 + question 40, 8 responses of ~40; ~100 tokens computed a request) |" in printed
    )
    assert printed.count("\n|") == len(rows) + 2
