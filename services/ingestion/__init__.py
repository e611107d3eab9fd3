"""Sample ingestion: prompts with responses enter the system (gRPC `IngestionService`, `cheems ingest`).

`records` (jsonl lines of the CheemsBench, CheemsPreference and raw layouts -> samples, with
per-record errors), `service` (store each valid sample in its own transaction, dedupe by content
hash, queue a `cheems.samples.v1` event per new prompt in the store's outbox in that transaction, relayed
after the commit), `server` (the gRPC adapter).
"""
