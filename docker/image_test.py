"""`make image-test`: runs the built image the way the pods run it, and checks each role works in it.

    python3 docker/image_test.py [--engine podman|docker] [--image cheems:0.1.0]

Every container runs as the manifests' pods do: uid 10001, a read-only root with a tmpfs on /tmp,
1 GiB of shared memory, every capability dropped, no privilege escalation, and no network (containers
of one "pod" share the first one's loopback, as a pod's containers do). A host folder mounted at /work
stands for the pods' emptyDir and PVC volumes. Checks, in order:

  help        `cheems --help` (the image's CMD) answers
  defaults    `cheems db upgrade` with the image's default store (SQLite) works on the read-only root
  init-model  writes the tiny RM to the shared volume (the dev scorer's init container)
  train       tiny training through torchrun (2 processes, gloo) exports a model
  scorer      `cheems serve` on Triton serves that model: health SERVING, gRPC Score and HTTP /get_reward
              answer, GetModelInfo says triton and a triton_python_backend_stub process runs (so
              Triton's Python backend starts in this image: its stub links libpython3.11)
  eval        `cheems rewards` against that scorer, then `eval --report` writes its chart
  confined    inside the scorer: uid 10001, the root read-only, /tmp writable, no capabilities, no
              privilege escalation, only the loopback interface
  sigterm     the scorer exits 0 on SIGTERM
  services    the dev broker, migrations (init container) and the ingestion service come up healthy; a
              sample ingested over gRPC is stored and its event read back from the broker

It ends with `image-test: N passed, M failed` and exits 1 when a check failed. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HEALTH = """
import sys, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
stub = health_pb2_grpc.HealthStub(grpc.insecure_channel(sys.argv[1]))
for service in sys.argv[2:]:
    status = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status
    if status != health_pb2.HealthCheckResponse.SERVING:
        sys.exit(f"{service or 'readiness'}: {health_pb2.HealthCheckResponse.ServingStatus.Name(status)}")
"""

SCORE = """
import json, os, urllib.request, grpc
from cheems.v1 import reward_pb2, reward_pb2_grpc
stub = reward_pb2_grpc.RewardServiceStub(grpc.insecure_channel("127.0.0.1:50051"))
info = stub.GetModelInfo(reward_pb2.ModelInfoRequest(), timeout=30)
assert info.backend == "triton", info
stubs = [p for p in os.listdir("/proc") if p.isdigit() and open(f"/proc/{p}/comm").read().startswith("triton_python")]
assert stubs, "no triton_python_backend_stub process"
reply = stub.Score(reward_pb2.ScoreRequest(prompt="你好", responses=["你好！有什么可以帮你？", "嗯"]), timeout=120)
assert len(reply.scores) == 2, reply
body = json.dumps({"query": ["你好 你好！有什么可以帮你？", "你好 嗯"]}).encode()
request = urllib.request.Request("http://127.0.0.1:8000/get_reward", body, {"Content-Type": "application/json"})
rewards = json.load(urllib.request.urlopen(request, timeout=120))["rewards"]
assert len(rewards) == 2, rewards
print(json.dumps({"model": reply.model, "score": list(reply.scores), "get_reward": rewards}))
"""

INGEST = """
import os, time, grpc
from kafka import KafkaConsumer
from cheems.v1 import common_pb2, ingestion_pb2, ingestion_pb2_grpc
from services.store.accounts import add_account
from services.store.db import StoreConfig, create_engine_for, session_scope
with session_scope(create_engine_for(StoreConfig(os.environ["CHEEMS_DATABASE_URL"]))) as session:
    token = add_account(session, "image-test", "operator")  # what `cheems accounts add` does
responses = [common_pb2.Response(id="a", content="你好！"), common_pb2.Response(id="b", content="嗯")]
sample = common_pb2.Sample(prompt="你好", responses=responses)
stub = ingestion_pb2_grpc.IngestionServiceStub(grpc.insecure_channel("127.0.0.1:50052"))
records = [ingestion_pb2.IngestRecord(sample=sample, line=1)]
try:
    stub.Ingest(iter(records), timeout=60)
    raise AssertionError("ingested without a token")
except grpc.RpcError as error:
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED, error
summary = stub.Ingest(iter(records), timeout=60, metadata=[("authorization", f"Bearer {token}")])
assert summary.stored == 1, summary
consumer = KafkaConsumer("cheems.samples.v1", bootstrap_servers="127.0.0.1:9092", auto_offset_reset="earliest")
deadline, events = time.monotonic() + 60, []
while not events and time.monotonic() < deadline:
    events = [message for batch in consumer.poll(timeout_ms=1000).values() for message in batch]
assert events, "no event on cheems.samples.v1 in 60 s"
print(f"refused without a token; stored 1 sample with an operator's; {len(events)} event on cheems.samples.v1")
"""

CONFINED = """
import errno, os
assert (os.getuid(), os.getgid()) == (10001, 10001), (os.getuid(), os.getgid())
try:
    open("/app/probe", "w")
except OSError as error:
    assert error.errno == errno.EROFS, error
else:
    raise SystemExit("the root filesystem is writable")
open("/tmp/probe", "w").write("/tmp is writable")
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
for name in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]:
    assert int(status[name], 16) == 0, f"{name} {status[name].strip()}"
assert status["NoNewPrivs"].strip() == "1"
assert os.listdir("/sys/class/net") == ["lo"], os.listdir("/sys/class/net")
shm = os.statvfs("/dev/shm")
print(f"uid 10001, read-only root, no capabilities, only lo, /dev/shm {shm.f_blocks * shm.f_frsize >> 20} MiB")
"""

REPORT_PNG = """
import sys
chart = open("/tmp/report/per_category.png", "rb").read()
if not chart.startswith(bytes([137, 80, 78, 71])) or len(chart) < 1000:
    sys.exit(f"not a PNG chart: {len(chart)} bytes")
"""

BENCH = ["data/sample/open.jsonl", "data/sample/human.jsonl"]


class Failed(Exception):
    """A check did not hold; the message says what was seen."""


class Pod:
    """Runs containers of IMAGE with the pods' security settings; removes what it started."""

    def __init__(self, engine: str, image: str, work: Path) -> None:
        self.engine, self.image, self.work = engine, image, work
        self.prefix = f"cheems-image-test-{os.getpid()}"
        self.started: list[str] = []

    def flags(self, network: str = "none") -> list[str]:
        flags = ["--user", "10001:10001", "--read-only", "--tmpfs", "/tmp:rw,size=2g,mode=1777"]
        flags += ["--shm-size", "1g", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
        flags += ["--network", network, "--volume", f"{self.work}:/work"]
        if self.engine == "podman":
            flags.append("--read-only-tmpfs=false")  # only /tmp is writable, as in the pods
        return flags

    def run(self, *args: str, network: str = "none", env: dict[str, str] | None = None, timeout: float = 300) -> str:
        """A container to completion (a Job, an init container): its output, or Failed."""
        extra = [f"--env={k}={v}" for k, v in (env or {}).items()]
        cmd = [self.engine, "run", "--rm", *self.flags(network), *extra, self.image, *args]
        return self._call(cmd, timeout)

    def start(self, name: str, *args: str, network: str = "none", env: dict[str, str] | None = None) -> str:
        """A long-running container (a Deployment's): its name."""
        full = f"{self.prefix}-{name}"
        extra = [f"--env={k}={v}" for k, v in (env or {}).items()]
        self.started.append(full)
        cmd = [self.engine, "run", "--detach", "--name", full, *self.flags(network), *extra, self.image, *args]
        self._call(cmd, 60)
        return full

    def exec(self, name: str, *args: str, timeout: float = 180) -> str:
        return self._call([self.engine, "exec", name, *args], timeout)

    def wait_healthy(self, name: str, address: str, *services: str, timeout: float = 240) -> float:
        """Seconds until the gRPC health services all answer SERVING; Failed if the container stops first."""
        start = time.monotonic()
        while True:
            try:
                self.exec(name, "python", "-c", HEALTH, address, *services, timeout=30)
                return time.monotonic() - start
            except Failed as error:
                if self.state(name) != "running":
                    raise Failed(f"{name} stopped before it was healthy:\n{self.logs(name)}") from error
                if time.monotonic() - start > timeout:
                    raise Failed(f"{name} not healthy after {timeout:.0f} s: {error}\n{self.logs(name)}") from error
            time.sleep(1)

    def stop(self, name: str, grace: int = 30) -> int:
        """SIGTERM, as the kubelet sends it, then the container's exit code."""
        self._call([self.engine, "stop", "--time", str(grace), name], grace + 30)
        return int(self._call([self.engine, "inspect", "--format", "{{.State.ExitCode}}", name], 30).strip())

    def state(self, name: str) -> str:
        try:
            return self._call([self.engine, "inspect", "--format", "{{.State.Status}}", name], 30).strip()
        except Failed:
            return "gone"

    def logs(self, name: str) -> str:
        done = subprocess.run([self.engine, "logs", "--tail", "40", name], capture_output=True, text=True, check=False)
        return done.stdout + done.stderr

    def remove_all(self) -> None:
        for name in reversed(self.started):
            subprocess.run([self.engine, "rm", "--force", name], capture_output=True, check=False)

    @staticmethod
    def _call(cmd: list[str], timeout: float) -> str:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as error:
            raise Failed(f"timed out after {timeout:.0f} s: {' '.join(cmd[:6])} ...") from error
        if done.returncode != 0:
            raise Failed(f"exit {done.returncode}: {' '.join(cmd)}\n{(done.stdout + done.stderr)[-3000:]}")
        return done.stdout


def checks(pod: Pod) -> list[tuple[str, Callable[[], str]]]:
    """The checks in order, each returning what it saw; later ones use what earlier ones made."""
    scorer = f"{pod.prefix}-scorer"

    def help_() -> str:
        out = pod.run()
        if "serve" not in out or "train" not in out:
            raise Failed(f"--help lists no serve/train:\n{out}")
        return "lists the commands"

    def defaults() -> str:
        pod.run("db", "upgrade")
        return "the default store is writable on a read-only root"

    def init_model() -> str:
        pod.run("init-model", "--out", "/work/models/tiny")
        return f"{len(list((pod.work / 'models/tiny').iterdir()))} files"

    def train() -> str:
        overrides = ["model=/work/models/tiny", "out_dir=/work/train", "epochs=2", "progress=false"]
        pod.run("train", "--recipe", "tiny-cpu", "--nproc", "2", *[f"--set={o}" for o in overrides], timeout=900)
        if not (pod.work / "train/model/config.json").exists():
            raise Failed("no model exported to out_dir/model")
        return "exported /work/train/model"

    def serve() -> str:
        pod.start("scorer", "serve", "--model", "/work/train/model", "--backend", "triton", "--max-length", "512")
        seconds = pod.wait_healthy(scorer, "127.0.0.1:50051", "", "liveness")
        return f"healthy after {seconds:.0f} s; " + pod.exec(scorer, "python", "-c", SCORE).strip()

    def confined() -> str:
        return pod.exec(scorer, "python", "-c", CONFINED).strip()

    def evaluate() -> str:
        pod.exec(scorer, "cheems", "rewards", *BENCH, "--model-url", "127.0.0.1:50051", "--out", "/tmp/rewards.jsonl")
        out = pod.exec(scorer, "cheems", "eval", *BENCH, "--rewards", "/tmp/rewards.jsonl", "--report", "/tmp/report")
        pod.exec(scorer, "python", "-c", REPORT_PNG)
        return "per_category.png written; " + out.strip().splitlines()[-1][:100]

    def sigterm() -> str:
        if pod.state(scorer) != "running":
            raise Failed(f"the scorer is not running ({pod.state(scorer)}), so SIGTERM shows nothing")
        code = pod.stop(scorer)
        if code != 0:
            raise Failed(f"exit code {code} after SIGTERM:\n{pod.logs(scorer)}")
        return "exit 0"

    def services() -> str:
        broker = pod.start("broker", "dev", "broker", "--port", "9092", "--host", "127.0.0.1")
        env = {"CHEEMS_DATABASE_URL": "sqlite:////work/store.db", "CHEEMS_KAFKA_BOOTSTRAP": "127.0.0.1:9092"}
        beside = f"container:{broker}"  # the pod's shared loopback
        pod.run("db", "upgrade", network=beside, env=env)  # the init container
        ingestion = pod.start("ingestion", "service", "ingestion", "--port", "50052", network=beside, env=env)
        seconds = pod.wait_healthy(ingestion, "127.0.0.1:50052", "", "liveness")
        seen = pod.exec(ingestion, "python", "-c", INGEST).strip()
        codes = [pod.stop(name) for name in (ingestion, broker)]
        return f"ingestion healthy after {seconds:.0f} s; {seen}; exit codes after SIGTERM (ingestion, broker): {codes}"

    return [
        ("help", help_),
        ("defaults", defaults),
        ("init-model", init_model),
        ("train", train),
        ("scorer", serve),
        ("confined", confined),
        ("eval", evaluate),
        ("sigterm", sigterm),
        ("services", services),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", default=os.environ.get("ENGINE", "podman"))
    parser.add_argument("--image", default=os.environ.get("IMAGE", "cheems:0.1.0"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cheems-image-test-"))
    work.chmod(0o777)  # the shared volume, written by uid 10001
    pod = Pod(args.engine, args.image, work)
    passed, failed = 0, 0
    try:
        for name, check in checks(pod):
            start = time.monotonic()
            try:
                seen = check()
            except Failed as error:
                failed += 1
                print(f"FAIL {name} ({time.monotonic() - start:.0f} s): {error}", flush=True)
                continue
            passed += 1
            print(f"ok   {name} ({time.monotonic() - start:.0f} s): {seen}", flush=True)
    finally:
        pod.remove_all()
        shutil.rmtree(work, ignore_errors=True)
    print(f"image-test: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
