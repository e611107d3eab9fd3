"""bench/scorer_bench.py: its options (defaults of before, the model's options reaching the scorer's config) and
the responses/s count of `run`. No timings asserted."""

from __future__ import annotations

from pathlib import Path

import pytest
from scorer_bench import parse_args, responses_of, run, server_config


def test_defaults_are_those_of_before() -> None:
    args = parse_args([])
    assert (args.requests, args.backend, args.device, args.dtype) == (48, "triton", "cpu", "auto")
    assert (args.hidden, args.layers, args.heads, args.kv_heads, args.intermediate) == (256, 4, 4, 2, None)
    assert (args.trl_only, args.big_only, args.small_only) == (False, False, False)
    assert (args.small_calls, args.small_concurrency) == (200, 16)


def test_small_calls_default_to_the_torch_backend_unless_told() -> None:
    assert parse_args(["--small-only"]).backend == "torch"
    assert parse_args(["--small-only", "--backend", "triton"]).backend == "triton"


@pytest.mark.parametrize("option", [["--dtype", "fp16"], ["--backend", "vllm"]])
def test_values_outside_the_choices_are_refused(option: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(option)
    assert "invalid choice" in capsys.readouterr().err


def test_device_dtype_and_backend_reach_the_scorer_config(tmp_path: Path) -> None:
    args = parse_args(["--device", "cuda:1", "--dtype", "bfloat16", "--backend", "torch"])
    config = server_config(args, tmp_path)
    assert (config.model, config.device, config.dtype, config.backend) == (str(tmp_path), "cuda:1", "bfloat16", "torch")
    assert (config.grpc_port, config.http_port) == (0, -1)


def test_run_counts_each_requests_responses() -> None:
    seen: list[str] = []
    synced: list[int] = []
    requests = [("问题", ["回答一", "回答二"]), ("问题", ["回答"]), ("系统", "问题", ["一", "二", "三"])]
    figures = run(lambda *item: seen.append(item[0]), requests, 2, sync=lambda: synced.append(1))
    assert sorted(seen) == sorted(["问题", "问题", "系统"])
    assert figures["rps"] * figures["seconds"] == pytest.approx(6)
    assert len(synced) == 4  # before the clock starts, and after each call
    assert figures["p50"] <= figures["p99"]
    assert [responses_of(r) for r in requests] == [2, 1, 3]
