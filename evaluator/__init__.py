"""CheemsBench: metrics (pure), reward files, reports, and the evaluation through Kafka.

from evaluator.evaluate import evaluate_files
result = evaluate_files(["open.jsonl", "human.jsonl"], "rewards.jsonl")
print(result.overall)

The one evaluation path is `evaluator.evaluate`; the run through Kafka is split by concept: `runs`
(start a run, read it back), `worker` (score worker), `sink` (result sink), `convert` (proto
messages), `driver` (`cheems eval --via-kafka`), `process` (worker/sink as long-lived processes),
`server` (gRPC EvaluationService).
"""
