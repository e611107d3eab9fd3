"""Training runs reported where people look at them: TensorBoard, MLflow, Weights & Biases (`report_to`).

Rank 0 hands every step record it writes to OUT/metrics.jsonl to the run's `Tracking` (`session.start_tracking`),
which fans them out to one backend module each (`tensorboard`, `mlflow`, `wandb`), each importing its package only
when asked for. What is logged, under which names, is `scalars`. No module here imports a package at import time.
"""
