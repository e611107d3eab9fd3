"""bench/scorer_bench.py: its options (defaults of before, the model's options reaching the scorer's config) and
the responses/s count of `run`. No timings asserted."""

from __future__ import annotations

from pathlib import Path

import pytest
from scorer.overhead import tracing_on
from scorer_bench import (
    VLLM_SHAPES,
    largest_difference,
    parse_args,
    require_vllm,
    responses_of,
    rlhf_workload,
    root_cause,
    run,
    server_config,
    shared_prefix,
    workload,
)


def test_defaults_are_those_of_before() -> None:
    args = parse_args([])
    assert (args.requests, args.backend, args.device, args.dtype) == (48, "triton", "cpu", "auto")
    assert (args.hidden, args.layers, args.heads, args.kv_heads, args.intermediate) == (256, 4, 4, 2, None)
    assert (args.trl_only, args.big_only, args.small_only) == (False, False, False)
    assert (args.small_calls, args.small_concurrency) == (200, 16)


def test_small_calls_and_the_metrics_cost_default_to_the_torch_backend_unless_told() -> None:
    assert parse_args(["--small-only"]).backend == "torch"
    assert parse_args(["--small-only", "--backend", "triton"]).backend == "triton"
    assert parse_args(["--metrics-only"]).backend == "torch"
    args = parse_args(["--metrics-only", "--backend", "triton", "--metrics-rounds", "3"])
    assert (args.backend, args.metrics_rounds, args.otlp_endpoint) == ("triton", 3, "")


def test_the_metrics_cost_compares_a_scorer_with_metrics_off(tmp_path: Path) -> None:
    args = parse_args(["--metrics-only"])
    on, off = server_config(args, tmp_path, http_port=0), server_config(args, tmp_path, metrics=False)
    assert (on.metrics, on.http_port, off.metrics) == (True, 0, False)  # the "on" one is scraped over HTTP
    assert on.model_dump(exclude={"metrics", "http_port"}) == off.model_dump(exclude={"metrics", "http_port"})
    assert tracing_on("") == "tracing off in both"


@pytest.mark.parametrize("option", [["--dtype", "fp16"], ["--backend", "onnx"]])
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


def test_the_vllm_comparison_configures_both_scorers_alike(tmp_path: Path) -> None:
    args = parse_args(["--backend", "vllm", "--vllm-python", "/opt/vllm/bin/python"])
    assert (args.backend, args.vllm_memory_fraction, args.vllm_quick_start) == ("vllm", None, False)
    torch_side, vllm_side = (server_config(args, tmp_path, backend, "float32") for backend in ("torch", "vllm"))
    assert (torch_side.backend, vllm_side.backend, torch_side.dtype, vllm_side.dtype) == (
        "torch",
        "vllm",
        "float32",
        "float32",
    )
    assert (vllm_side.vllm_python, vllm_side.vllm_memory_fraction, vllm_side.vllm_quick_start) == (
        "/opt/vllm/bin/python",
        0.15,  # of the CPU's NUMA node: 0.9 fails there
        False,
    )
    engine_only = {"backend", "vllm_python", "vllm_memory_fraction"}
    assert torch_side.model_dump(exclude=engine_only) == vllm_side.model_dump(exclude=engine_only)
    cuda = parse_args(["--backend", "vllm", "--device", "cuda"])
    assert server_config(cuda, tmp_path).vllm_memory_fraction == 0.5  # the torch scorer holds the card too
    given = parse_args(["--backend", "vllm", "--vllm-memory-fraction", "0.3", "--vllm-quick-start"])
    assert (server_config(given, tmp_path).vllm_memory_fraction, server_config(given, tmp_path).vllm_quick_start) == (
        0.3,
        True,
    )


def test_the_two_shapes_of_the_vllm_comparison() -> None:
    cheems = VLLM_SHAPES["CheemsBench-like"](3, 5)
    assert cheems == [("", prompt, responses) for prompt, responses in workload(3, 5)]
    calls = rlhf_workload(4, seed=1)
    assert calls == VLLM_SHAPES["RLHF-like"](4, 1) and calls != rlhf_workload(4, seed=2)
    for system, question, responses in calls:
        assert (len(system), len(question), len(responses)) == (1040, 40, 8)
        assert all(110 <= len(r) <= 220 for r in responses)


def test_shared_prefix_and_largest_difference() -> None:
    assert shared_prefix([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 9]]) == 2
    assert shared_prefix([[1, 2], [1, 2, 3]]) == 2
    assert largest_difference([[0.5, 1.0], [2.0]], [[0.5, 1.25], [1.9]]) == pytest.approx(0.25)


def test_a_missing_vllm_stops_the_comparison_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as stopped:
        require_vllm(str(tmp_path / "no-python"), "scorer_bench.py")
    message = str(stopped.value)
    assert message.startswith("scorer_bench.py --backend vllm: ") and "\n" not in message
    assert "make setup-vllm" in message


def test_a_failed_offline_run_names_its_root_cause(tmp_path: Path) -> None:
    log = tmp_path / "offline.log"
    log.write_text(
        "(EngineCore pid=1) INFO 11-27 starting\n"
        "(EngineCore pid=1) ERROR ValueError: Available memory on node 0 (0.2/13.09 GiB) is less than requested\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n"
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the "
        "root cause.\n"
    )
    assert root_cause(log).startswith("ValueError: Available memory on node 0")
    log.write_text("killed\n")
    assert root_cause(log) == "killed"


def test_the_local_otlp_receiver_counts_the_spans_sent_to_it() -> None:
    """`--otlp-endpoint local`: a real OTLP/gRPC exporter's batch reaches the bench's receiver and is counted."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from scorer.otlp_sink import receiver

    with receiver() as (endpoint, spans):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True)))
        for name in ("a", "b", "c"):
            provider.get_tracer("bench").start_span(name).end()
        provider.shutdown()
        assert spans() == 3
