"""services/scorer/telemetry/backends.py: engines' metrics read over real HTTP at scrape time and re-exported.

First against small HTTP servers that answer as an engine would (or fail, or hang), then against the real
Triton a scorer started (the session's `triton_server`): its /metrics shows Triton's own `nv_inference_*`
families, the served model's samples labelled with its model id, and passes promtool.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from services.scorer.client import RewardClient
from services.scorer.runtime import ScorerServer
from services.scorer.telemetry.backends import BackendExport, Source, merge, triton_source, vllm_source
from tests.services.scorer.telemetry.scraping import family_names, labelled, promtool_check, scrape, value

TRITON_TEXT = """# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="rm-1",version="1"} 3
nv_inference_request_success{model="rm-2",version="1"} 5
# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in microseconds
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="rm-1",version="1"} 120
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1e9
"""
VLLM_TEXT = """# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="rm"} 42.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.5",model_name="rm"} 1.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="rm"} 2.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="rm"} 2.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="rm"} 0.75
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 7.0
"""


class Engines:
    """One HTTP server answering GET /<path> with a body, an error status, or nothing until released."""

    def __init__(self) -> None:
        self.bodies: dict[str, tuple[int, str]] = {}
        self.release = threading.Event()
        engines = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/hang":
                    engines.release.wait(30)
                    return
                status, body = engines.bodies.get(self.path, (404, "no such path"))
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def engines() -> Iterator[Engines]:
    running = Engines()
    yield running
    running.close()


def exported(sources: list[Source], timeout: float = 2.0) -> tuple[str, Counter]:
    registry = CollectorRegistry()
    errors = Counter("cheems_scorer_backend_metrics_errors", "failed reads", ["backend"], registry=registry)
    registry.register(BackendExport(lambda: sources, errors, timeout))
    return generate_latest(registry).decode(), errors


def test_families_are_re_exported_with_the_model_id_of_the_samples_that_name_one(engines: Engines) -> None:
    engines.bodies = {"/triton": (200, TRITON_TEXT), "/vllm": (200, VLLM_TEXT)}
    triton = Source("triton", engines.url("/triton"), ("nv_",), "model", {"rm-1": "m-one"})
    vllm = Source("vllm", engines.url("/vllm"), ("vllm:",), "model_name", {"rm": "m-two"})
    text, errors = exported([triton, vllm])
    # Triton's counters keep their names (no _total added), the sample naming rm-1 gains model_id
    assert 'nv_inference_request_success{model="rm-1",model_id="m-one",version="1"} 3.0' in text
    assert 'nv_inference_request_success{model="rm-2",version="1"} 5.0' in text  # not one of the scorer's
    assert value(text, "nv_inference_queue_duration_us", model_id="m-one") == 120
    assert value(text, "vllm:prompt_tokens_total", model_id="m-two", engine="0") == 42
    assert value(text, "vllm:e2e_request_latency_seconds_bucket", model_id="m-two", le="0.5") == 1
    assert value(text, "vllm:e2e_request_latency_seconds_sum", model_id="m-two") == 0.75
    # the engines' process and GC metrics would collide with the scorer's own: left out
    assert "process_resident_memory_bytes" not in text and "python_gc_objects" not in text
    assert errors.labels("triton")._value.get() == 0 and errors.labels("vllm")._value.get() == 0
    promtool_check(text)


def test_a_source_that_fails_counts_an_error_and_the_others_still_come(engines: Engines) -> None:
    engines.bodies = {"/vllm": (200, VLLM_TEXT), "/broken": (500, "engine dead"), "/garbage": (200, "{not: metrics")}
    sources = [
        vllm_source(f"127.0.0.1:{engines.port}", {"rm": "m"}),  # /metrics: 404
        Source("vllm", engines.url("/vllm"), ("vllm:",), "model_name"),
        Source("triton", engines.url("/broken"), ("nv_",), "model"),
        Source("triton", engines.url("/garbage"), ("nv_",), "model"),
        Source("triton", engines.url("/hang"), ("nv_",), "model"),  # past the timeout
    ]
    text, errors = exported(sources, timeout=0.3)
    assert value(text, "vllm:prompt_tokens_total") == 42
    assert (errors.labels("vllm")._value.get(), errors.labels("triton")._value.get()) == (1, 3)


def test_one_triton_serving_several_models_is_read_once_with_each_models_id(engines: Engines) -> None:
    engines.bodies = {"/metrics": (200, TRITON_TEXT)}
    url = f"127.0.0.1:{engines.port}"
    merged = merge([triton_source(url, {"rm-1": "m-one"}), triton_source(url, {"rm-2": "m-two"})])
    assert len(merged) == 1 and merged[0].models == {"rm-1": "m-one", "rm-2": "m-two"}
    text, _ = exported(merged)
    assert value(text, "nv_inference_request_success", model_id="m-one") == 3
    assert value(text, "nv_inference_request_success", model_id="m-two") == 5


def test_two_engines_of_one_kind_share_each_family(engines: Engines) -> None:
    engines.bodies = {"/a": (200, VLLM_TEXT), "/b": (200, VLLM_TEXT.replace('model_name="rm"', 'model_name="rm2"'))}
    sources = [
        Source("vllm", engines.url("/a"), ("vllm:",), "model_name", {"rm": "m-a"}),
        Source("vllm", engines.url("/b"), ("vllm:",), "model_name", {"rm2": "m-b"}),
    ]
    text, _ = exported(sources)
    assert text.count("# TYPE vllm:prompt_tokens_total counter") == 1
    assert {s.labels["model_id"] for s in labelled(text, "vllm:prompt_tokens_total")} == {"m-a", "m-b"}
    promtool_check(text)


def test_a_triton_backed_scorer_shows_tritons_own_metrics(triton_server: ScorerServer) -> None:
    current = triton_server.models.current
    assert current is not None
    model_id, name = current.ref.model_id, current.host.name
    before = scrape(triton_server.http_port)
    with RewardClient(f"127.0.0.1:{triton_server.grpc_port}", timeout=60) as client:
        for _ in range(3):
            client.score("你好", ["您好，有什么可以帮您？", "走开"])
    text = scrape(triton_server.http_port)
    names = family_names(text)
    assert {"nv_inference_request_success", "nv_inference_queue_duration_us", "nv_inference_count"} <= names
    ours = {"model": name, "model_id": model_id}
    # each Score of one prompt's two short responses is one Triton request (one 512-token bucket, one row plan)
    requests = value(text, "nv_inference_request_success", **ours) - value(
        before, "nv_inference_request_success", **ours
    )
    assert requests == 3
    assert value(text, "nv_inference_count", **ours) - value(before, "nv_inference_count", **ours) == 6
    assert value(text, "cheems_scorer_backend_metrics_errors_total") == 0
    promtool_check(text)
