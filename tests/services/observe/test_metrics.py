"""The gRPC RED metrics of a real server, scraped over HTTP: one call, one count, under the code the call ended with
(OK, an abort, an exception, a refusal by the access guard, a stream), in go-grpc-prometheus' names and labels;
the exposition passes `promtool check metrics`."""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from sqlalchemy import Engine

from cheems.errors import PortInUse
from cheems.roles import ANNOTATOR, OPERATOR
from cheems.v1 import common_pb2, ingestion_pb2, ingestion_pb2_grpc
from services.channels import open_channel
from services.hosting import GrpcHost, HostConfig
from services.ingestion.server import host as ingestion_host
from services.ingestion.service import IngestionService
from services.observe.metrics import ReadAtScrape, code_name, new_registry, serve_metrics
from services.store.accounts import AccountBook
from tests.services.observe.scrape import promtool_problems, sample_value, scrape

PROBE = "test.Probe"


def probe_handlers() -> grpc.GenericRpcHandler:
    """Methods ending every way a handler can: raising, setting a code and returning, streaming."""

    def boom(request: bytes, context: grpc.ServicerContext) -> bytes:
        raise RuntimeError("a bug")

    def quiet_not_found(request: bytes, context: grpc.ServicerContext) -> bytes:
        context.set_code(grpc.StatusCode.NOT_FOUND)
        return b""

    def count(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        for i in range(int(request or b"0")):
            yield str(i).encode()

    return grpc.method_handlers_generic_handler(
        PROBE,
        {
            "Boom": grpc.unary_unary_rpc_method_handler(boom),
            "QuietNotFound": grpc.unary_unary_rpc_method_handler(quiet_not_found),
            "Count": grpc.unary_stream_rpc_method_handler(count),
        },
    )


@pytest.fixture
def probe() -> Iterator[tuple[grpc.Channel, str]]:
    """A host of the probe methods (no guard) and the URL of its /metrics."""
    grpc_host = GrpcHost(HostConfig(port=0), lambda s: s.add_generic_rpc_handlers((probe_handlers(),))).start()
    exporter = serve_metrics(grpc_host.registry, "127.0.0.1", 0)
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_host.port}")
    try:
        yield channel, f"http://127.0.0.1:{exporter.port}/metrics"
    finally:
        channel.close()
        exporter.close()
        grpc_host.stop(0)


def handled(families: dict[str, Any], method: str, code: str, service: str = PROBE) -> float:
    labels = {"grpc_service": service, "grpc_method": method, "grpc_code": code}
    return sample_value(families, "grpc_server_handled_total", labels)


def test_each_call_is_counted_under_the_code_it_ended_with(probe: tuple[grpc.Channel, str]) -> None:
    channel, url = probe
    before = scrape(url)
    with pytest.raises(grpc.RpcError) as info:
        channel.unary_unary(f"/{PROBE}/Boom")(b"", timeout=10)
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    with pytest.raises(grpc.RpcError) as info:
        channel.unary_unary(f"/{PROBE}/QuietNotFound")(b"", timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert list(channel.unary_stream(f"/{PROBE}/Count")(b"3", timeout=10)) == [b"0", b"1", b"2"]
    after = scrape(url)
    assert handled(after, "Boom", "Unknown") - handled(before, "Boom", "Unknown") == 1
    assert handled(after, "QuietNotFound", "NotFound") - handled(before, "QuietNotFound", "NotFound") == 1
    assert handled(after, "Count", "OK") - handled(before, "Count", "OK") == 1
    streamed = {"grpc_type": "server_stream", "grpc_service": PROBE, "grpc_method": "Count"}
    assert sample_value(after, "grpc_server_started_total", streamed) == 1
    assert sample_value(after, "grpc_server_handling_seconds_count", streamed) == 1
    assert sample_value(after, "process_resident_memory_bytes", {}) > 0
    assert sample_value(after, "python_gc_collections_total", {"generation": "0"}) >= 0


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_refused_calls_are_counted_and_the_exposition_is_clean(
    engine: Engine, account: Callable[[str, str], str]
) -> None:
    grpc_host = ingestion_host(IngestionService(engine), HostConfig(port=0), AccountBook(engine)).start()
    exporter = serve_metrics(grpc_host.registry, "127.0.0.1", 0)
    url, address = f"http://127.0.0.1:{exporter.port}/metrics", f"127.0.0.1:{grpc_host.port}"
    service = "cheems.v1.IngestionService"
    sample = common_pb2.Sample(prompt="你好", responses=[common_pb2.Response(id="r1", content="好")])
    try:
        before = scrape(url)
        for token, code in (("", grpc.StatusCode.UNAUTHENTICATED), ("wrong-token-0123456789", None),
                            (account("anna", ANNOTATOR), grpc.StatusCode.PERMISSION_DENIED)):  # fmt: skip
            with open_channel(address, token=token) as channel, pytest.raises(grpc.RpcError) as info:
                ingestion_pb2_grpc.IngestionServiceStub(channel).GetSample(
                    ingestion_pb2.GetSampleRequest(prompt_id="x"), timeout=10
                )
            assert info.value.code() == (code or grpc.StatusCode.UNAUTHENTICATED)
        with open_channel(address, token=account("etl", OPERATOR)) as channel:
            stub = ingestion_pb2_grpc.IngestionServiceStub(channel)
            records = [ingestion_pb2.IngestRecord(sample=sample, line=n) for n in (1, 2)]
            records.append(ingestion_pb2.IngestRecord(sample=common_pb2.Sample(prompt="空"), line=3))
            summary = stub.Ingest(iter(records), timeout=30)
            assert (summary.stored, summary.duplicates, summary.rejected) == (1, 1, 1)
            with pytest.raises(grpc.RpcError):
                stub.GetSample(ingestion_pb2.GetSampleRequest(prompt_id="nope"), timeout=10)
        after = scrape(url)
        text = urllib.request.urlopen(url, timeout=10).read().decode()
    finally:
        exporter.close()
        grpc_host.stop(0)
    delta = {code: handled(after, "GetSample", code, service) - handled(before, "GetSample", code, service)
             for code in ("Unauthenticated", "PermissionDenied", "NotFound", "OK")}  # fmt: skip
    assert delta == {"Unauthenticated": 2, "PermissionDenied": 1, "NotFound": 1, "OK": 0}
    assert handled(after, "Ingest", "OK", service) - handled(before, "Ingest", "OK", service) == 1
    ingest = {"grpc_type": "client_stream", "grpc_service": service, "grpc_method": "Ingest", "grpc_code": "OK"}
    assert sample_value(after, "grpc_server_handled_total", ingest) == 1
    records = {r: sample_value(after, "cheems_ingest_records_total", {"result": r}) for r in ("stored", "duplicate")}
    assert records == {"stored": 1, "duplicate": 1}
    assert sample_value(after, "cheems_ingest_records_total", {"result": "rejected"}) == 1
    assert promtool_problems(text) == ""


def test_codes_are_spelled_as_go_grpc_prometheus_does() -> None:
    assert [code_name(c) for c in (grpc.StatusCode.OK, grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.DATA_LOSS)] == [
        "OK",
        "Unauthenticated",
        "DataLoss",
    ]


def test_a_reading_that_fails_leaves_only_itself_out() -> None:
    registry = new_registry()

    def broken() -> float:
        raise ConnectionError("the store is away")

    registry.register(ReadAtScrape("cheems_broken", "Never read", broken))
    registry.register(ReadAtScrape("cheems_things", "Things by state", lambda: {"a": 1, "b": 2}, label="state"))
    exporter = serve_metrics(registry, "127.0.0.1", 0)
    try:
        families = scrape(f"http://127.0.0.1:{exporter.port}/metrics")
        with pytest.raises(PortInUse, match="cannot serve metrics"):
            serve_metrics(registry, "127.0.0.1", exporter.port)
    finally:
        exporter.close()
    assert "cheems_broken" not in families
    assert [sample_value(families, "cheems_things", {"state": s}) for s in "ab"] == [1, 2]
    with pytest.raises(ValueError, match="kind must be"):
        ReadAtScrape("x", "x", lambda: 1, kind="summary")


def test_promtool_finds_a_broken_exposition() -> None:
    """The check the tests rely on can fail: a counter without `_total` is named by promtool."""
    bad = "# HELP things Things.\n# TYPE things counter\nthings 1\n"
    assert "things" in promtool_problems(bad)
    assert subprocess.run(["promtool", "--version"], capture_output=True, check=False).returncode == 0
