"""The exported Triton model repository, served by a real tritonserver (the binary PyTriton bundles)."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sysconfig
import time
from pathlib import Path

import pytest
from transformers import AutoConfig

from cheems.errors import ModelError
from cheems.packing import Cost
from cheems.processes.ports import free_port
from services.scorer.backends import TorchBackend, TritonBackend
from services.scorer.deadline import Deadline
from services.scorer.triton.repository import export_triton_repository

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py


def backend_dir(tmp: Path) -> Path:
    """Triton's Python backend with the stub built for this Python (PyTriton ships one per version)."""
    from pytriton.utils.distribution import get_root_module_path

    root = get_root_module_path() / "tritonserver"
    shutil.copytree(root / "backends", tmp / "backends")
    shutil.copy(
        root / "python_backend_stubs" / sysconfig.get_python_version() / "triton_python_backend_stub",
        tmp / "backends" / "python",
    )
    return tmp / "backends"


def test_exported_repository_serves_the_checkpoints_scores(tiny_model: Path, tmp_path: Path) -> None:
    from pytriton.utils.distribution import get_libs_path, get_root_module_path

    repo = tmp_path / "repo"
    target = export_triton_repository(tiny_model, repo, max_batch_size=16)
    assert (target / "config.pbtxt").read_text().count("max_batch_size: 16") == 1
    assert 'key: "prefix_sharing" value: { string_value: "on" }' in (target / "config.pbtxt").read_text()
    assert (target / "1" / "model" / "model.safetensors").exists()
    port = free_port()
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": f"{sysconfig.get_config_var('LIBDIR')}:{get_libs_path()}",
        "PYTHONPATH": os.pathsep.join([str(Path.cwd()), *site.getsitepackages()]),
    }
    cmd = [
        str(get_root_module_path() / "tritonserver" / "bin" / "tritonserver"),
        f"--model-repository={repo}",
        f"--backend-directory={backend_dir(tmp_path)}",
        f"--grpc-port={port}",
        f"--http-port={free_port()}",
        f"--metrics-port={free_port()}",
        "--exit-timeout-secs=5",
    ]
    log = (tmp_path / "triton.log").open("w")
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    # the scorer's side of sharing: sequences the model would pack travel in one request
    backend = TritonBackend(f"127.0.0.1:{port}", "cheems_rm", cost=Cost.of(AutoConfig.from_pretrained(tiny_model)))
    try:
        deadline = time.monotonic() + 120
        while not backend.ready():
            assert server.poll() is None, (tmp_path / "triton.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "Triton did not become ready"
            time.sleep(0.5)
        prompt = [151644, 872, 198, *range(1000, 1060)]  # one prompt, three responses: a packed row
        sequences = [[108386, 151645], [151644, 872, 198, 108386, 151645, 198, 100, 151645]]
        sequences += [[*prompt, 100, 151645], [*prompt, 101, 102, 151645], [*prompt, 100, 151645]]
        assert backend.prefix_sharing is True  # read from the model config Triton serves
        unshared = TorchBackend(str(tiny_model)).score(sequences)  # share=False
        assert backend.score(sequences, Deadline.of(30, 30)) == pytest.approx(unshared, abs=1e-4)
        assert "cheems_rm: float32, prefix sharing on" in (tmp_path / "triton.log").read_text()  # the model's word
        assert backend.dtype == "float32"  # the export's dtype for the CPU, read from the model config
    finally:
        backend.close()
        server.terminate()
        server.wait(timeout=60)


def test_export_writes_the_sharing_setting(tiny_model: Path, tmp_path: Path) -> None:
    target = export_triton_repository(tiny_model, tmp_path / "repo", prefix_sharing=False)
    assert 'key: "prefix_sharing" value: { string_value: "off" }' in (target / "config.pbtxt").read_text()


def test_export_refuses_a_directory_without_weights(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"no \*\.safetensors"):
        export_triton_repository(tmp_path, tmp_path / "repo")
