"""A local HTTP server speaking the part of the Hugging Face Hub's API that `snapshot_download` uses.

    with FakeHub({"org/tiny": folder}, gated={"org/gated"}) as hub:    # repo id -> a folder of files
        env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(home)}          # huggingface_hub then fills the cache

GET /api/models/ORG/NAME/revision/REV (the commit), GET /api/models/ORG/NAME/tree/REV (the file list),
HEAD and GET /ORG/NAME/resolve/REV/PATH (a file's metadata and bytes). Each repository has one commit, its
`main`; unknown repositories answer 404 RepoNotFound, other revisions 404 RevisionNotFound, gated
repositories 401 GatedRepo, as the Hub does. `hub.downloads`: the files served (REPO/PATH), in order.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

LFS = (".safetensors", ".bin")  # stored as LFS files on the Hub: their ETag is the content's sha256


class FakeHub:
    def __init__(self, repos: dict[str, Path], gated: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.repos = {repo: _files(folder) for repo, folder in repos.items()}
        self.commits = {repo: hashlib.sha1(repo.encode()).hexdigest() for repo in repos}
        self.gated, self.downloads = set(gated), list[str]()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def do_GET(self) -> None:
                self._answer(body=True)

            def _answer(self, body: bool) -> None:
                parts = [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/")]
                api = parts[:2] == ["api", "models"]
                repo = "/".join(parts[2:4] if api else parts[0:2])
                if repo in hub.gated:
                    return self._send(401, b'{"error": "gated"}', {"X-Error-Code": "GatedRepo"}, body)
                if repo not in hub.repos:
                    return self._send(404, b'{"error": "no repo"}', {"X-Error-Code": "RepoNotFound"}, body)
                files, commit = hub.repos[repo], hub.commits[repo]
                if parts[5 if api else 3] not in {"main", commit}:
                    return self._send(404, b"{}", {"X-Error-Code": "RevisionNotFound"}, body)
                if api and parts[4] == "revision":
                    siblings = [{"rfilename": p} for p in files]
                    return self._json({"id": repo, "sha": commit, "siblings": siblings, "private": False}, body)
                if api and parts[4] == "tree":
                    return self._json([_entry(path, data) for path, data in files.items()], body)
                path = "/".join(parts[4:])
                if parts[2] != "resolve" or path not in files:
                    return self._send(404, b"{}", {"X-Error-Code": "EntryNotFound"}, body)
                if body:
                    hub.downloads.append(f"{repo}/{path}")
                etag = _entry(path, files[path])["etag"]
                headers = {"X-Repo-Commit": commit, "ETag": f'"{etag}"', "Content-Type": "application/octet-stream"}
                self._send(200, files[path], headers, body)

            def _json(self, value: object, body: bool) -> None:
                self._send(200, json.dumps(value).encode(), {"Content-Type": "application/json"}, body)

            def _send(self, status: int, data: bytes, headers: dict[str, str], body: bool) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

        return Handler


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _entry(path: str, data: bytes) -> dict[str, object]:
    """A tree entry as the Hub lists it (plus `etag`, what a HEAD of the file answers)."""
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # git's blob id
    entry: dict[str, object] = {"type": "file", "path": path, "size": len(data), "oid": blob, "etag": blob}
    if path.endswith(LFS):
        sha256 = hashlib.sha256(data).hexdigest()
        entry["lfs"] = {"oid": sha256, "size": len(data), "pointerSize": 134}
        entry["etag"] = sha256
    return entry


RESOLVE = """
import json, sys
from cheems.hub import resolve_model
outcomes = {}
for name in sys.argv[1:]:
    try:
        outcomes[name] = ["ok", str(resolve_model(name))]
    except Exception as e:
        outcomes[name] = [type(e).__name__, str(e)]
print(json.dumps(outcomes))
"""


def resolve_elsewhere(names: list[str], env: dict[str, str]) -> tuple[dict[str, list[str]], str]:
    """({name: ["ok", directory] or [error kind, message]}, stderr) of `resolve_model` in a fresh process whose
    environment adds `env` (huggingface_hub reads HF_ENDPOINT, HF_HOME, HF_HUB_OFFLINE at import)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", RESOLVE, *names],
        env=hub_environment(env),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def hub_environment(env: dict[str, str]) -> dict[str, str]:
    """This process's environment without Hugging Face settings (HF_*), plus `env` and this checkout first."""
    import os

    root = Path(__file__).resolve().parents[3]
    mine = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
    return {**mine, "PYTHONPATH": str(root), **env}
