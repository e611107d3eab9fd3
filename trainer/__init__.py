"""CheemsRM training: Bradley-Terry reward models over partial rankings, run with torchrun.

Training: `tiny` (a small real-vocabulary Qwen2 RM), `data` (preference and bench files into tokenized
prompt groups), `sampler` (greedy sample-based batching), `loss`, `config` + `recipes`, `train` (the
torchrun entry) with `launch`, `distributed`, `evaluation` and `report`; `ablation` (the paper's
Table 4: one model per dataset recipe, the rows and the JSON; pure).
`weights/`: `sharding` (FSDP2 on the meta device, each rank loading its rows), `checkpoint` (full or sharded
through torch.distributed.checkpoint) and `export` (the final model in safetensors shards).
`datasets/`: `recipes` (which annotations become pairs; pure) and `build` (a dataset from the store).
`service/`: the training service: `trainings` (transport-free work), `monitor`, `progress`, `auto`,
`config`, `messages`, `launchers/` (local process group, Kubernetes Job), `server` (gRPC) and `ablation` (Table 4's
trainings through a TrainingService stub).
"""

import cheems  # noqa: F401  (first: sets GRPC_ENABLE_FORK_SUPPORT before grpc loads; see cheems/__init__.py)
