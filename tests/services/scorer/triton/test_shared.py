"""One tritonserver for several models (PyTriton, explicit model control), with real processes: two models bound into
one server score as they do in process; removing one unloads it while the other serves on; after tritonserver is
SIGKILLed, `restart` brings both back on a new server and re-points their backends; a server dying under a removal
(SIGTERM to the pod) makes no error; the last removal stops the server and leaves no process."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cheems import processes
from cheems.execution import Execution
from cheems.model import load_model
from services.scorer.backends import TorchBackend, TritonBackend
from services.scorer.triton.shared import SharedTriton

pytestmark = pytest.mark.slow

SEQUENCES = [[151644, 872, 198, 108386, 151645], [151644, 872, 198, 99999, 151645, 198]]


def model_of(path: Path) -> object:
    model, _ = load_model(str(path))
    return model.eval()


def test_two_models_in_one_server_unloaded_one_at_a_time(
    tiny_model: Path, tiny_checkpoint: Callable[..., Path]
) -> None:
    two = tiny_checkpoint(hidden_size=32, layers=2, seed=2, name="two")
    expected = {name: TorchBackend(str(path)).score(SEQUENCES) for name, path in (("one", tiny_model), ("two", two))}
    triton = SharedTriton(Execution("cpu", max_sequences=8), queue_delay_us=100)
    backends: dict[str, TritonBackend] = {}
    try:
        for name, path in (("one", tiny_model), ("two", two)):
            url = triton.add(f"rm-{name}", model_of(path), False, lambda url, n=name: backends[n].reconnect(url))
            backends[name] = TritonBackend(url, f"rm-{name}", max_batch_size=8, prefix_sharing=False)
        pid = triton.pid
        assert pid is not None and triton.models == ["rm-one", "rm-two"]
        for name, backend in backends.items():
            assert backend.score(SEQUENCES) == pytest.approx(expected[name], abs=1e-5), name
        triton.remove("rm-one")  # unloaded; the server and the other model serve on
        assert triton.pid == pid and triton.alive() and not backends["one"].ready()
        assert backends["two"].score(SEQUENCES) == pytest.approx(expected["two"], abs=1e-5)

        triton.add("rm-one", model_of(tiny_model), False, lambda url: backends["one"].reconnect(url))
        os.kill(pid, signal.SIGKILL)  # tritonserver dies hard
        tree = processes.tree(pid)
        deadline = time.monotonic() + 30  # the kill takes effect once the process is reaped (slower under load)
        while triton.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not triton.alive()
        url = triton.restart()  # a new server with both models; each backend told the new address
        assert triton.pid not in (None, pid) and triton.alive()
        for name, backend in backends.items():
            assert backend.url == url and backend.score(SEQUENCES) == pytest.approx(expected[name], abs=1e-5)

        os.kill(triton.pid or 0, signal.SIGTERM)  # the pod is going down while a model is removed
        triton.remove("rm-one")  # no error: the server unloads everything as it goes
    finally:
        last = triton.pid
        triton.stop()
        for backend in backends.values():
            backend.close()
    assert triton.pid is None and not [p for p in tree if processes.alive(p)]
    assert last is None or processes.proc(last) is None, "a tritonserver outlived stop()"
