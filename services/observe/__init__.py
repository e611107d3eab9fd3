"""What an operator sees of every process: logs, metrics and traces, one setup shared by all services.

- `logs`: one logging setup (text with ISO timestamps, or one JSON object a line), ids from the context, no secrets;
- `metrics`: Prometheus registries with process and GC collectors, `/metrics` over HTTP, the gRPC RED interceptor;
- `http`: the HTTP apps' RED middleware (requests by route template and status, durations, in progress);
- `tracing`: OpenTelemetry, off unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set; gRPC interceptors, W3C `traceparent`
  carried in Kafka record headers.

Floor 1: it imports third-party libraries and the ground only, so every service, the trainer and the command line
can use it.
"""
