"""A local server speaking the Kubernetes API paths the launchers use (a cluster cannot run here): batch/v1 Jobs and
Kubeflow Trainer v2 TrainJobs (trainer.kubeflow.org/v1alpha1), in memory.

    for cluster in running(): ...          # a started FakeKubernetes; cluster.jobs, cluster.trainjobs, cluster.requests

POST creates (403 when `forbid`, 404 for TrainJobs when `no_trainer`: the CRD is not installed; 409 when it exists),
GET reads, DELETE removes; `finish(name, condition)` sets a Job's or TrainJob's final condition.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ROUTE = re.compile(
    r"^/apis/(?P<api>batch/v1|trainer\.kubeflow\.org/v1alpha1)/namespaces/(?P<ns>[^/]+)"
    r"/(?P<plural>jobs|trainjobs)(?:/(?P<name>[^/?]+))?(?:\?.*)?$"
)
FORBIDDEN = (
    'jobs.batch is forbidden: User "system:serviceaccount:cheems:cheems-training" cannot create resource "jobs" '
    'in API group "batch" in the namespace "cheems"'
)


class FakeKubernetes(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.jobs: dict[str, dict[str, Any]] = {}
        self.trainjobs: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.forbid = False
        self.no_trainer = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def store(self, plural: str) -> dict[str, dict[str, Any]]:
        return self.jobs if plural == "jobs" else self.trainjobs

    def finish(self, name: str, condition: str = "Complete", reason: str = "", message: str = "") -> None:
        status = {"type": condition, "status": "True", "reason": reason, "message": message}
        if name in self.jobs:
            self.jobs[name]["status"] = {"active": 0, "conditions": [status], "succeeded": int(condition == "Complete")}
        else:
            self.trainjobs[name]["status"] = {"conditions": [status]}


class Handler(BaseHTTPRequestHandler):
    server: FakeKubernetes

    def log_message(self, *args: Any) -> None:
        pass

    def reply(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def status(self, code: int, reason: str, message: str) -> None:
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason}
        self.reply(code, {**body, "code": code})

    def route(self) -> re.Match[str] | None:
        self.server.requests.append((self.command, self.path))
        match = ROUTE.match(self.path)
        if match is None or (match["plural"] == "trainjobs" and self.server.no_trainer):
            self.status(404, "NotFound", "the server could not find the requested resource")
            return None
        return match

    def do_POST(self) -> None:
        if (match := self.route()) is None:
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        name, objects = body["metadata"]["name"], self.server.store(match["plural"])
        if self.server.forbid:
            return self.status(403, "Forbidden", FORBIDDEN)
        if name in objects:
            return self.status(409, "AlreadyExists", f'{match["plural"]} "{name}" already exists')
        body["status"] = {"active": body["spec"]["parallelism"]} if match["plural"] == "jobs" else {}
        objects[name] = body
        self.reply(201, body)

    def do_GET(self) -> None:
        if (match := self.route()) is None:
            return
        found = self.server.store(match["plural"]).get(match["name"] or "")
        if found is None:
            return self.status(404, "NotFound", f'{match["plural"]} "{match["name"]}" not found')
        self.reply(200, found)

    def do_DELETE(self) -> None:
        if (match := self.route()) is None:
            return
        if self.server.store(match["plural"]).pop(match["name"] or "", None) is None:
            return self.status(404, "NotFound", f'{match["plural"]} "{match["name"]}" not found')
        self.reply(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})


def running() -> Iterator[FakeKubernetes]:
    server = FakeKubernetes()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()


def api_client(cluster: FakeKubernetes) -> Any:
    """The official client, pointed at the fake."""
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = cluster.url
    return client.ApiClient(configuration)
