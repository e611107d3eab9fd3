"""The reward scorer: gRPC `cheems.v1.RewardService` and OpenRLHF-compatible HTTP, backed by Triton.

    cheems serve --model out/train-tiny/model            # gRPC :50051, HTTP :8000, Triton via PyTriton
    cheems score --model-url localhost:50051 --prompt 你好 --response 你好！

Modules: `config` (ScorerConfig), `errors`, `tokenization` (texts -> bounded token sequences, pure),
`service` (the Scorer: requests -> rewards, transport-free), `backends` (in-process torch, Triton
client), `triton_model` (the PyTriton-served model), `triton_python_model` (the same model for a
stock Triton, copied by `model_repository`), `server` (gRPC adapter), `http_app` (HTTP adapter),
`telemetry` (Prometheus counters), `runtime` (assembly and lifecycle), `client`.
"""
