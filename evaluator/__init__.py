"""CheemsBench: metrics (pure), reward files, reports, and the evaluation through Kafka.

from evaluator.evaluate import evaluate_files
result = evaluate_files(["open.jsonl", "human.jsonl"], "rewards.jsonl")
print(result.overall)

The core: `metrics` (pure), `calibration` (ECE), `join` (rewards with bench items), `evaluate` (the one
evaluation path), `report` with `table` and `chart` (what people and tools read), `convert` (proto
messages), `errors`, and `server` (the gRPC EvaluationService with the leaderboard beside it).
`pipeline/`, the run through Kafka: `runs` (start a run, read it back), `worker` (score worker) with
`score_batch`, `sink` (result sink) with `sink_batch`, `model_runs` (a run for each new model),
`driver` (`cheems eval --via-kafka`), `process` (worker/sink as long-lived processes).
`leaderboard/`: `standings` (models best first, a model's runs), `comparison` (two models side by
side), `chart_svg`, the pages (`pages`, `compare_page`, `words`) and `app` (Starlette routes, JSON,
errors), hosted by `services.web.HttpServer`.
"""

import cheems  # noqa: F401  (first: sets GRPC_ENABLE_FORK_SUPPORT before grpc loads; see cheems/__init__.py)
