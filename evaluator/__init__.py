"""CheemsBench: metrics (pure), reward files, reports, and the `cheems eval` command.

from evaluator.evaluate import evaluate_files
result = evaluate_files(["open.jsonl", "human.jsonl"], "rewards.jsonl")
print(result.overall)
"""
