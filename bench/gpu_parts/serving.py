"""Part a: the scorer served against in-process scoring, in bf16, at concurrency 32 (issue 29's goals).

`bench/gpu_bench.py`'s own measurement, on the CheemsBench-like shape only and in the report's dtype: in-process
`score_in_groups` of all the requests in one call, then a `ScorerServer` on the torch backend in this process,
Score calls at concurrency 1 and 32. Rows: served at 32 / in-process batched (goal >= 0.8) and the p50 latency at
32 / at 1 (goal < 4x).
"""

from __future__ import annotations

from pathlib import Path

from gpu_parts.rows import Cell
from gpu_parts.setting import Setting

# requests and the concurrency levels: 64 on the card (32 calls in flight at once); on the CPU a quick 8 at 8
LOAD = {"cuda": (64, "1,32"), "cpu": (8, "1,8")}


def measure(setting: Setting) -> dict[str, Cell]:
    import gpu_bench
    from transformers import AutoConfig, AutoTokenizer

    requests, levels = LOAD[setting.device]
    argv = ["--device", setting.device, "--dtypes", setting.dtype, "--shapes", "cheemsbench", "--concurrency", levels]
    args = gpu_bench.parse_args([*argv, "--requests", str(requests), *setting.shape_argv()])
    tokenizer = AutoTokenizer.from_pretrained(setting.model)
    config = AutoConfig.from_pretrained(setting.model)
    work = gpu_bench.workload("cheemsbench", requests, tokenizer, config, args.share)
    result = gpu_bench.measure(args, Path(setting.model), setting.dtype, {"cheemsbench": work})
    inside = work.responses() / result["in"]["cheemsbench"]["batched"]
    level = result["served"]["cheemsbench"]["levels"]
    low, high = min(args.concurrency), max(args.concurrency)
    served = level[high]["rps"]
    p50 = level[high]["p50"] / level[low]["p50"]
    figures = {"served_rps": served, "in_process_rps": inside, "concurrency": high, "dtype": setting.dtype}
    return {
        "served": Cell(
            f"{served / inside:.2f} ({served:,.0f} / {inside:,.0f} responses/s at concurrency {high}, "
            f"{setting.dtype}, {requests} CheemsBench-like calls of 5 responses)",
            figures,
        ),
        "served_p50": Cell(
            f"{p50:.2f}x ({level[high]['p50'] * 1e3:,.0f} / {level[low]['p50'] * 1e3:,.0f} ms at {high} / {low})",
            {"p50_high_s": level[high]["p50"], "p50_low_s": level[low]["p50"], "concurrency": [low, high]},
        ),
    }
