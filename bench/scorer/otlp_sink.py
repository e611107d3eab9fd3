"""An OTLP/gRPC trace receiver in a child process, for `--otlp-endpoint local`: it answers every Export and counts
the spans, as a collector would take them, so the traced scorer's cost includes sending its batches somewhere.

    with receiver() as (endpoint, spans):   # endpoint "http://127.0.0.1:PORT"; spans() -> spans received so far
        ...
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any


def _serve(port: Any, spans: Any, stop: Any) -> None:
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            n = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
            with spans.get_lock():
                spans.value += n
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Receiver(), server)
    port.value = server.add_insecure_port("127.0.0.1:0")
    server.start()
    stop.wait()
    server.stop(1).wait()


@contextlib.contextmanager
def receiver() -> Iterator[tuple[str, Callable[[], int]]]:
    context = multiprocessing.get_context("spawn")
    port, spans, stop = context.Value("i", 0), context.Value("q", 0), context.Event()
    process = context.Process(target=_serve, args=(port, spans, stop), daemon=True)
    process.start()
    try:
        while not port.value:
            if not process.is_alive():
                raise RuntimeError("the OTLP receiver did not start")
            process.join(0.05)
        yield f"http://127.0.0.1:{port.value}", lambda: int(spans.value)
    finally:
        stop.set()
        process.join(10)
