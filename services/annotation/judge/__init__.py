"""The AI judge: an OpenAI-compatible LLM judging every pair of a prompt's responses, and its Kafka worker.
Imports `cheems`, `services.bus`, `services.store`, `annotation.algorithm` and the service (intake, events)."""
