"""Cheems: build and evaluate Chinese reward models. The ground floor: imports nothing of the project.

Shared core used by every package: the data formats (`formats`: the official CheemsBench and
CheemsPreference jsonl, rewards files, the community's layouts, jsonl / JSON array / Parquet files),
the chat template and tokenization (`chat`), reward-model loading (`model`), the forward pass (`forward`)
with prefix sharing (`packing`), settings (`settings`), secrets (`credentials`), the error tree
(`errors`), the bundled sample (`sample_bench`), and the generated protobuf package `cheems.v1`.
"""

import os as _os

__version__ = "0.1.0"

# gRPC Python (1.81) runs its fork handlers in every fork() of a process that has loaded it; when other threads
# are inside gRPC at that moment the child can abort before it execs (seen: PyTriton starting tritonserver
# through `sh` while the scorer answers calls, "Check failed: next_worker->state == KICKED"). Every fork this
# project makes is followed by exec, the case gRPC says to turn the handlers off for. The variable is read when
# grpc is imported, so every top-level package imports this one first; a value the user set wins.
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
