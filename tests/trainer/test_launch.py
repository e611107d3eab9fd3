"""How `cheems train` launches: LaunchConfig checks, torchrun's arguments, and a real two-node run
(two `cheems train` processes meeting at a c10d rendezvous on this machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from cheems.processes.ports import free_port
from trainer.launch import DEFAULT_RDZV_PORT, LaunchConfig, kubeflow_endpoint, torchrun_args

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nnodes": 2}, "needs --rdzv-endpoint"),
        ({"nnodes": 2, "rdzv_endpoint": ":29400"}, "must be host or host:port"),
        ({"nnodes": 2, "rdzv_endpoint": "host:abc"}, "must be host or host:port"),
        ({"rdzv_endpoint": "host:"}, "must be host or host:port"),
        ({"nproc": 0}, "must be >= 1"),
        ({"nnodes": 0}, "must be >= 1"),
    ],
)
def test_bad_launch_configs_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LaunchConfig(**kwargs)  # type: ignore[arg-type]


def test_endpoint_gets_the_default_port() -> None:
    assert LaunchConfig(nnodes=2, rdzv_endpoint="train-0.train").endpoint == f"train-0.train:{DEFAULT_RDZV_PORT}"
    assert DEFAULT_RDZV_PORT == 29400
    assert LaunchConfig(nnodes=2, rdzv_endpoint="10.0.0.5:1234").endpoint == "10.0.0.5:1234"


@pytest.mark.parametrize(
    ("config", "distributed"),
    [
        (LaunchConfig(), False),
        (LaunchConfig(nproc=2), True),
        (LaunchConfig(nnodes=2, rdzv_endpoint="h:1"), True),
        (LaunchConfig(rdzv_endpoint="h"), True),  # one node joining a rendezvous still goes through torchrun
    ],
)
def test_distributed(config: LaunchConfig, distributed: bool) -> None:
    assert config.distributed is distributed


def test_standalone_torchrun_args() -> None:
    assert torchrun_args(LaunchConfig(nproc=4)) == ["--standalone", "--nproc-per-node=4"]


def test_multi_node_torchrun_args() -> None:
    config = LaunchConfig(nproc=8, nnodes=4, rdzv_endpoint="cheems-train-0.cheems-train", rdzv_id="job-7")
    assert torchrun_args(config) == [
        "--nnodes=4",
        "--nproc-per-node=8",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=cheems-train-0.cheems-train:29400",
        "--rdzv-id=job-7",
        "--max-restarts=3",
    ]


def test_cli_refuses_nnodes_without_an_endpoint(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "cheems_cli", "train", "--nnodes", "2", "--set", f"out_dir={tmp_path / 'run'}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 2 and "needs --rdzv-endpoint" in run.stderr
    assert not (tmp_path / "run").exists()


def test_kubeflow_trainer_environment_gives_the_endpoint() -> None:
    assert kubeflow_endpoint({}) == ""
    given = {"PET_MASTER_ADDR": "job-node-0-0.job", "PET_MASTER_PORT": "29400"}
    assert kubeflow_endpoint(given) == "job-node-0-0.job:29400"
    assert kubeflow_endpoint({"PET_MASTER_ADDR": "host"}) == f"host:{DEFAULT_RDZV_PORT}"


def test_two_nodes_meet_at_the_rendezvous_and_train(tmp_path: Path, tiny_checkpoint: Callable[..., Path]) -> None:
    """Two `cheems train` nodes: one world of 2, so each step takes 2 x micro_batch_size. Node 0 is told by flags
    (`--nnodes 2 --rdzv-endpoint`, as the Indexed Job does), node 1 only by the environment a Kubeflow Trainer v2
    torch runtime gives (PET_NNODES, PET_NPROC_PER_NODE, PET_MASTER_ADDR, PET_MASTER_PORT)."""
    cli = [sys.executable, "-m", "cheems_cli"]
    model = tiny_checkpoint(hidden_size=32)  # the tiny RM `cheems init-model --hidden-size 32` makes, built once
    port = free_port()
    flags = ["--nnodes", "2", "--nproc", "1", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "test"]
    kubeflow = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_MASTER_ADDR": "127.0.0.1"}
    kubeflow |= {"PET_MASTER_PORT": str(port), "PET_NODE_RANK": "1", "PET_RDZV_ID": "test"}
    cmd = [
        *cli,
        "train",
        "--recipe",
        "tiny-cpu",
        *("--set", f"model={model}"),
        *("--set", f"out_dir={tmp_path / 'run'}"),
        *("--set", "epochs=1"),
        *("--set", "micro_batch_size=10"),
        *("--set", "eval_every=0"),
        *("--set", "progress=false"),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    logs = [tmp_path / f"node{i}.log" for i in range(2)]
    nodes: list[subprocess.Popen[bytes]] = []
    try:
        for log, (extra, node_env) in zip(logs, [(flags, env), ([], {**env, **kubeflow})], strict=True):
            with log.open("wb") as out:
                nodes.append(subprocess.Popen([*cmd, *extra], stdout=out, stderr=subprocess.STDOUT, env=node_env))
        codes = [node.wait(timeout=300) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait()
    assert codes == [0, 0], "\n".join(log.read_text(errors="replace")[-3000:] for log in logs)
    responses = sum(len(json.loads(line)["responses"]) for line in (SAMPLE / "open.jsonl").read_text().splitlines())
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # world size 2: every step but the last takes micro_batch_size x 2 = 20 responses (10 with one process)
    assert [r["responses"] for r in records[:-1]] == [20] * (len(records) - 1)
    assert sum(r["responses"] for r in records) == responses and len(records) == -(-responses // 20)
    assert [r["step"] for r in records] == list(range(1, len(records) + 1)) and "eval" in records[-1]
    final = tmp_path / "run" / "checkpoints" / f"step-{len(records):08d}"
    assert json.loads((final / "position.json").read_text())["step"] == len(records)
    metadata = json.loads((tmp_path / "run" / "model" / "cheems_metadata.json").read_text())
    assert metadata["steps"] == len(records)
