"""CheemsRM training: Bradley-Terry reward models over partial rankings, run with torchrun.

Modules: `tiny` (a small real-vocabulary Qwen2 RM), `model` (load, save, convert checkpoints),
`data` (preference and bench files into tokenized prompt groups), `sampler` (greedy
sample-based batching), `loss`, `config` + `recipes`, `train` (the torchrun entry), `export`.
The training service: `datasets` (recipes) + `dataset_build` (from the store), `launchers` (local process
group, Kubernetes Job), `service*` (transport-free work, monitor, auto policy, config), `server` (gRPC).
"""
