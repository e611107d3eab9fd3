"""The parts of `bench/gpu_report.py`, one GPU goal a module; each runs in a process of its own (see its docstring)."""
