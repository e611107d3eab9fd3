"""vLLM's offline throughput on given token sequences: the baseline `scorer_bench.py --backend vllm` compares
the served vLLM backend against. Runs in vLLM's own environment (`.venv-vllm/bin/python`), not the project's:

    .venv-vllm/bin/python bench/vllm_offline.py SPEC.json OUT.json

SPEC: {"engine": keyword arguments of `vllm.LLM` (the served engine's options), "pooler": its pooler config,
"warm": [[ids]], "shapes": {label: [[ids]]}, "rounds": N}. One `LLM` pools the warm-up sequences, then each
shape's sequences in one `LLM.encode` call, `rounds` times with the prefix cache emptied before each (the
sequences are new to the engine every round, as a served call's are); OUT: {"vllm": "vLLM version", "warm":
[the warm-up's rewards], "shapes": {label: {"seconds": [each round], "rewards": [the first round's]}}}.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def main(spec_path: str, out_path: str) -> None:
    import vllm
    from vllm.config import PoolerConfig

    with open(spec_path) as f:
        spec = json.load(f)
    llm = vllm.LLM(**spec["engine"], pooler_config=PoolerConfig(**spec["pooler"]))
    task = llm.pooling_task  # the model's own, as the server's /pooling route uses when a request names none

    def encode(sequences: list[list[int]]) -> list[float]:
        prompts: Any = [{"prompt_token_ids": ids} for ids in sequences]
        outputs = llm.encode(prompts, pooling_task=task, use_tqdm=False)
        return [float(o.outputs.data.reshape(-1)[0]) for o in outputs]

    out: dict[str, Any] = {"vllm": f"vLLM {vllm.__version__}", "warm": encode(spec["warm"]), "shapes": {}}
    for label, sequences in spec["shapes"].items():
        seconds, rewards = [], []
        for _ in range(spec["rounds"]):
            llm.reset_prefix_cache()
            started = time.perf_counter()
            got = encode(sequences)
            seconds.append(time.perf_counter() - started)
            rewards = rewards or got
        out["shapes"][label] = {"seconds": seconds, "rewards": rewards}
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
