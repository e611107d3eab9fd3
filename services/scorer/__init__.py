"""The reward scorer: gRPC `cheems.v1.RewardService` and OpenRLHF-compatible HTTP, backed by Triton.

    cheems serve --model out/train-tiny/model            # gRPC :50051, HTTP :8000, Triton via PyTriton
    cheems score --model-url localhost:50051 --prompt 你好 --response 你好！

Modules: `config` (ScorerConfig), `errors`, `scoring` (request -> token sequences -> reply, pure),
`backends` (in-process torch, Triton client), `triton_model` (the PyTriton-served model),
`grpc_server`, `http_app`, `metrics`, `server` (assembly and lifecycle), `client`.
"""
