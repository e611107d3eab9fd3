"""The reward scorer: gRPC `cheems.v1.RewardService` and OpenRLHF-compatible HTTP, backed by Triton.

    cheems serve --model out/train-tiny/model            # gRPC :50051, HTTP :8000, Triton via PyTriton
    cheems serve --follow --bootstrap HOST:9092 --db URL # the production model, then each promoted one
    cheems score --model-url localhost:50051 --prompt 你好 --response 你好！

Modules:
- settings and errors: `config` (ScorerConfig, `CHEEMS_SCORER_*`; `cheems serve`'s options are its
  fields), `errors`.
- pure core: `tokenization` (texts -> bounded token sequences, scores -> replies), `batching`
  (length buckets; one prompt's sequences kept in one Triton request), `deadline` (one deadline
  per call), `wire` (a look at a serialized request before parsing it).
- the service: `service` (the Scorer: requests -> rewards, transport-free), `tokenizer_pool`
  (tokenizers leased per call), `backends` (in-process torch, Triton client), `telemetry`
  (Prometheus counters).
- `triton/`: `model` (the PyTriton-served model), `python_model` (the same model for a stock
  Triton, copied by `repository`, which exports a model repository), `shared` (one tritonserver for the
  models, no process of it left behind: `cheems.processes`), `supervisor` (truthful health, Triton restarts).
- `models/`: `served` (the current model, leased per call, switched atomically), `loading` (a
  checkpoint -> tokenizers + backend; the first model: `--model` or the production model), `follow`
  with `feed` (`--follow`: the default model follows production), `shelf` (the models calls name).
- edges and assembly: `server` (gRPC), `http/` (`app` with `body`: HTTP), `runtime` (assembly and
  lifecycle: `ScorerServer`, `serve`).
- callers' side: `client` (sync and asyncio client).
- `offline/`: whole files scored: `jobs` (in this process, on a device, many prompts a forward),
  `bench_rewards` (a rewards file for CheemsBench files, in-process or through a running scorer).
"""
