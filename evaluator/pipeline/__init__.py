"""The evaluation through Kafka: runs, score workers, the result sink, model runs, `--via-kafka`, worker processes.
Imports `cheems`, `services.bus`, `services.store`, the scorer's client and the evaluator's core (metrics, evaluate)."""
