"""The model's weights through a run: `sharding` (FSDP2: built on the meta device, each rank reading only its
rows of the safetensors files, through `stored`: headers and reads checked), `checkpoint` (resumable
checkpoints, full or sharded through torch.distributed.checkpoint) and `export` (the final model as Hugging Face
safetensors shards, gathered tensor by tensor); `durable` writes what they publish so a kill loses nothing."""
