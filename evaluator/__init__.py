"""CheemsBench: metrics (pure), reward files, reports, and the evaluation through Kafka.

from evaluator.evaluate import evaluate_files
result = evaluate_files(["open.jsonl", "human.jsonl"], "rewards.jsonl")
print(result.overall)

The one evaluation path is `evaluator.evaluate`; the run through Kafka is split by concept: `runs`
(start a run, read it back), `worker` (score worker) with `score_batch` (its batches, pure),
`sink` (result sink) with `sink_batch` (its batches, pure), `convert` (proto messages), `driver`
(`cheems eval --via-kafka`), `process` (worker/sink as long-lived processes), `server` (gRPC
EvaluationService). The leaderboard, served over HTTP by the same service:
`standings` (models best first, a model's runs), `comparison` (two models side by side),
`chart_svg` (the per-category chart), the pages (`leaderboard_pages`, `compare_page`, `page_words`)
and `leaderboard_app` (Starlette routes, JSON, errors), hosted by `services.web.HttpServer`.
"""
