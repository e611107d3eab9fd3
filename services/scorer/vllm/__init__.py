"""The vLLM backend: a vLLM engine computes the rewards, the scorer keeps everything else.

- `engine`: the command line of a vLLM pooling server for a checkpoint, and `VllmEngine`, one such server this
  scorer started and supervises (restarted when it dies, stopped with the model).
- `client`: `VllmBackend`, which sends token ids to a vLLM server's `/pooling` route (ours or `--vllm-url`).
- `available`: where the Python of vLLM's environment is (`make setup-vllm`), checked before anything loads.
- `keyguard`: the ASGI middleware, run inside the engine, that wants the scorer's API key on every route but /health.
- `memory`: the KV cache of a CPU engine's workers, sized for the host's free memory, refused when it cannot fit.

The scorer tokenizes (its chat template, its left truncation) and sends ids, so a reward is the same whichever
backend computes it; vLLM adds tensor parallelism, continuous batching and automatic prefix caching.
"""
