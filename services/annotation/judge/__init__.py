"""The AI judge: an OpenAI-compatible LLM judging every pair of a prompt's responses, and its worker, a gRPC client
of the annotation service as its own service account (no database, no Kafka). Imports `cheems`, `services.channels`,
`services.hosting`, `services.observe`, `services.store.validate` (the verdict ids) and `annotation.algorithm`."""
