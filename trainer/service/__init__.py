"""The training service: trainings in the store, their launchers, monitor threads, auto-training, gRPC adapter.
Imports `cheems`, `services.*`, `trainer.datasets` and the trainer's recipes; `monitor` never imports `trainings`."""
