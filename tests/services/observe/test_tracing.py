"""services.observe.tracing: which environment turns tracing on, W3C context in Kafka record headers (with the bus
codec), nothing set up while it is off, and a traced process's spans reaching a real OTLP receiver over gRPC,
flushed at its clean exit."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from cheems.errors import ConfigError
from cheems.v1 import common_pb2, events_pb2
from services.bus import topics
from services.bus.codec import decode, encode
from services.observe import tracing
from tests.services.observe.collector import Collector

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_OTLP_PORT = 4317  # the SDK's default endpoint: localhost:4317
OTEL = [k for k in os.environ if k.startswith("OTEL_")]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, []),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_EXPORTER_OTLP_HEADERS": "a=b"}, []),  # no endpoint: off
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, ["otlp", "console"]),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_EXPORTER": "none"}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_SDK_DISABLED": "true"}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, ["otlp"]),
    ],
)
def test_the_standard_variables_turn_tracing_on_and_off(env: dict[str, str], expected: list[str]) -> None:
    assert tracing.exporters(env) == expected


def test_what_this_build_cannot_do_is_refused_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER: unknown exporter 'zipkin'"):
        tracing.exporters({"OTEL_TRACES_EXPORTER": "zipkin"})
    http = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    with pytest.raises(ConfigError, match=r"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf: .* gRPC only"):
        tracing.exporters(http)
    assert tracing.traces_endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1"}) == "http://a:1"
    both = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:2"}
    assert tracing.traces_endpoint(both) == "http://b:2"  # the signal's own wins, as in the SDK


def sample() -> events_pb2.SampleEvent:
    return events_pb2.SampleEvent(sample=common_pb2.Sample(prompt_id="p1", prompt="你好"))


def test_the_codec_headers_carry_the_current_span_and_give_it_back() -> None:
    tracer = TracerProvider().get_tracer("test")  # a provider of the test's own: the global one stays unset
    event = sample()
    encoded = encode(topics.SAMPLES, event)  # fills the event's header
    untraced = list(encoded.headers)
    tracing.inject(untraced)
    assert untraced == encoded.headers  # no span: nothing added
    with tracer.start_as_current_span("ingest") as span:
        headers = list(encoded.headers)
        tracing.inject(headers)
    names = [k for k, _ in headers]
    assert names[:3] == [k for k, _ in encoded.headers] and "traceparent" in names
    ours = span.get_span_context()
    flags = f"{ours.trace_flags:02x}"
    assert dict(headers)["traceparent"] == f"00-{ours.trace_id:032x}-{ours.span_id:016x}-{flags}".encode()
    assert decode(topics.SAMPLES, encoded.value, headers) == event  # the codec reads past them
    parent = trace.get_current_span(tracing.extract(headers)).get_span_context()
    assert (parent.trace_id, parent.span_id, parent.is_remote) == (ours.trace_id, ours.span_id, True)
    assert not trace.get_current_span(tracing.extract(untraced)).get_span_context().is_valid
    assert not trace.get_current_span(tracing.extract(None)).get_span_context().is_valid


def test_tracestate_travels_and_a_header_is_replaced_not_repeated() -> None:
    tracer = TracerProvider().get_tracer("test")
    remote = tracing.extract(
        [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), ("tracestate", b"v=1")]
    )
    with tracer.start_as_current_span("child", context=remote) as span:
        headers = [("traceparent", b"00-11111111111111111111111111111111-2222222222222222-01")]  # a stale one
        tracing.inject(headers)
    found = dict(headers)
    assert [k for k, _ in headers].count("traceparent") == 1
    assert found["traceparent"].startswith(b"00-0af7651916cd43dd8448eb211c80319c-")
    assert found["tracestate"] == b"v=1" and span.get_span_context().trace_state.get("v") == "1"
    assert tracing.carried(remote)["traceparent"] == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_off_nothing_is_set_up(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "not-on-by-itself")
    assert tracing.setup_tracing("test") is False and not tracing.enabled()
    assert tracing.server_interceptor() is None and tracing.client_interceptor() is None
    assert tracing.aio_client_interceptors() == []
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)  # the API's proxy: no SDK
    assert not [t.name for t in threading.enumerate() if t.name.startswith("OtelBatch")]


TRACED_PROCESS = """
import threading, grpc
from services.observe import tracing
from services.hosting import GrpcHost, HostConfig
from services.channels import open_channel
from grpc_health.v1 import health_pb2, health_pb2_grpc
from cheems.v1 import reward_pb2_grpc, reward_pb2
on = tracing.setup_tracing("probe")
def refuse(request, context):
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "prompt: required")
score = grpc.unary_unary_rpc_method_handler(refuse, reward_pb2.ScoreRequest.FromString)
handler = grpc.method_handlers_generic_handler("cheems.v1.RewardService", {"Score": score})
host = GrpcHost(HostConfig(port=0), lambda server: server.add_generic_rpc_handlers([handler])).start()
with open_channel(f"127.0.0.1:{host.port}", token="tok-SECRET") as channel:
    health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())       # not traced: a probe
    try:
        reward_pb2_grpc.RewardServiceStub(channel).Score(reward_pb2.ScoreRequest())  # traced: refused
    except grpc.RpcError as e:
        print("code", e.code().name)
host.stop(0)
print("on", on, "threads", sorted(t.name for t in threading.enumerate() if t.name.startswith("Otel")))
"""


def run_traced(env: dict[str, str]) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    run = subprocess.run(
        [sys.executable, "-c", TRACED_PROCESS], env={**clean, "PYTHONPATH": str(ROOT), **env},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout


@pytest.mark.parametrize(("named", "service"), [({}, "probe"), ({"OTEL_SERVICE_NAME": "renamed"}, "renamed")])
def test_a_traced_process_exports_its_grpc_spans_over_otlp_at_exit(named: dict[str, str], service: str) -> None:
    with Collector() as collector:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint, **named}
        out = run_traced({**env, "OTEL_BSP_SCHEDULE_DELAY": "600000"})  # nothing sent before the exit's flush
        spans = collector.spans()
    assert "code INVALID_ARGUMENT" in out and "on True threads ['OtelBatchSpanRecordProcessor']" in out
    names = {(s.service, s.name, s.kind) for s in spans}
    assert names == {
        (service, "/cheems.v1.RewardService/Score", "client"),
        (service, "/cheems.v1.RewardService/Score", "server"),
    }  # the health probe left none
    assert "tok-SECRET" not in repr(spans)  # the bearer token is no span's attribute
    client, server = sorted(spans, key=lambda s: s.kind)
    assert server.trace_id == client.trace_id and server.parent_id == client.span_id  # traceparent in the metadata
    assert server.attributes["rpc.grpc.status_code"] == client.attributes["rpc.grpc.status_code"] == 3  # refused


def test_off_a_process_exports_nothing_and_starts_no_exporter_thread() -> None:
    with Collector(DEFAULT_OTLP_PORT) as collector:
        # everything but an endpoint: a collector where the SDK's default endpoint is (when free) gets nothing
        out = run_traced({"OTEL_SERVICE_NAME": "probe", "OTEL_EXPORTER_OTLP_INSECURE": "true"})
        assert "on False threads []" in out and "code INVALID_ARGUMENT" in out
        assert collector.spans() == []


@pytest.mark.parametrize("command", [["service", "eval-sink", "--db", "sqlite://"], ["serve", "--model", "."]])
def test_a_service_refuses_tracing_it_cannot_do_at_its_start_naming_the_variable(command: list[str]) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env = {**clean, "PYTHONPATH": str(ROOT), "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/protobuf"
    run = subprocess.run([sys.executable, "-m", "cheems_cli", *command], env=env, capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert run.returncode == 2, run.stderr[-2000:]
    assert run.stderr.strip().splitlines()[-1].startswith("error: OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf: ")
