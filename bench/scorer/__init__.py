"""The pieces of `bench/scorer_bench.py`, one concern a module (its docstring lists them)."""
