"""The pieces of `bench/annotation_queue_bench.py`, one concern a module (its docstring lists them)."""
