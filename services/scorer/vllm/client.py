"""`VllmBackend`: rewards from a vLLM pooling server, sent token ids over its `/pooling` route.

One call is one request: its sequences go as lists of token ids (the engine never tokenizes), and the
engine's continuous batching merges them with other calls' requests; its prefix cache computes a prompt
shared by several responses once. Connections are kept alive in a small pool (one per call in flight).

Every request carries the engine's API key (`Authorization: Bearer KEY`: the key of the engine the scorer
started, or --vllm-api-key-file's for one at --vllm-url); the key is never logged nor put in an error.

What comes back is checked: one finite value per sequence, else the call fails (INTERNAL) naming what the
engine said. A server that cannot be reached, dropped the connection, answers 5xx (its engine died) or refuses
the key (401, 403: a key the scorer was not given) is UNAVAILABLE, and a call past its deadline DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import http.client
import json
import math
import queue
import time
from collections.abc import Sequence
from typing import Any

from services.scorer.deadline import Deadline
from services.scorer.errors import BackendUnavailable, DeadlineExceeded, ScorerError
from services.scorer.vllm.engine import authorization, connection_to, healthy

KEEP_ALIVE = 3.0  # seconds an idle connection is reused: below the server's keep-alive (uvicorn: 5 s)
# how a connection the server closed fails before any reply comes
STALE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, http.client.RemoteDisconnected)


def host_port(url: str) -> str:
    """host:port of `url` ("http://h:p/", "h:p")."""
    bare = url.split("://", 1)[-1].rstrip("/")
    host, _, port = bare.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT of a vLLM server, got {url!r}")
    return bare


class VllmBackend:
    """Rewards from the vLLM server at `url` (host:port) serving the model as `model_name`."""

    name = "vllm"

    def __init__(
        self, url: str, model_name: str, prefix_sharing: bool = False, dtype: str = "", api_key: str = ""
    ) -> None:
        """`prefix_sharing` and `dtype`: how the engine runs, as far as the scorer knows (an engine it started);
        False and "" for one at --vllm-url, which the scorer cannot ask. `api_key`: what the engine requires."""
        self.url = host_port(url)
        self.model_name, self.prefix_sharing, self.dtype = model_name, prefix_sharing, dtype
        self._key = api_key
        self._idle: queue.SimpleQueue[tuple[str, http.client.HTTPConnection, float]] = queue.SimpleQueue()
        self._closed = False

    def __repr__(self) -> str:  # never the key
        return f"VllmBackend(url={self.url!r}, model_name={self.model_name!r})"

    @property
    def api_key(self) -> str:
        """The key sent to the engine (its metrics are read with it too)."""
        return self._key

    def reconnect(self, url: str, api_key: str | None = None) -> None:
        """Point at a restarted server (with its new key); connections to the old one are dropped as they come
        back."""
        if api_key is not None:
            self._key = api_key
        self.url = host_port(url)

    def ready(self) -> bool:
        return not self._closed and healthy(self.url, timeout=2.0, key=self._key)

    def score(self, sequences: Sequence[Sequence[int]], deadline: Deadline | None = None) -> list[float]:
        if self._closed:
            raise BackendUnavailable("the model was closed (the scorer is stopping or switched models)")
        timeout = deadline.remaining() if deadline is not None else None
        if timeout is not None and timeout <= 0:
            raise DeadlineExceeded("the deadline passed before the vLLM engine was asked")
        body = json.dumps({"model": self.model_name, "input": [list(s) for s in sequences]}).encode()
        status, reply = self._post("/pooling", body, timeout)
        if status >= 500 or status == 429:
            raise BackendUnavailable(f"the vLLM engine at {self.url} cannot serve (HTTP {status}): {said(reply)}")
        if status in (401, 403):
            raise BackendUnavailable(f"the vLLM engine at {self.url} refused the scorer's API key (HTTP {status})")
        if status != 200:
            raise ScorerError(f"the vLLM engine at {self.url} refused the request (HTTP {status}): {said(reply)}")
        return rewards(reply, len(sequences))

    def _post(self, path: str, body: bytes, timeout: float | None) -> tuple[int, bytes]:
        """(status, body) of one POST. A kept-alive connection the server closed meanwhile (its keep-alive ran
        out: uvicorn's is 5 s) fails before any reply: the request goes again once, on a new connection (scoring
        is idempotent)."""
        url, connection, reused = self._connection()
        try:
            return self._send(url, connection, path, body, timeout)
        except STALE:
            if not reused:
                raise BackendUnavailable(f"the vLLM engine at {url} closed the connection") from None
        url, connection, _ = self._connection(fresh=True)
        try:
            return self._send(url, connection, path, body, timeout)
        except STALE as e:
            raise BackendUnavailable(f"the vLLM engine at {url} is unreachable: {type(e).__name__}: {e}") from None

    def _send(
        self, url: str, connection: http.client.HTTPConnection, path: str, body: bytes, timeout: float | None
    ) -> tuple[int, bytes]:
        try:
            connection.timeout = timeout
            if connection.sock is not None:
                connection.sock.settimeout(timeout)
            connection.request("POST", path, body, {"Content-Type": "application/json", **authorization(self._key)})
            response = connection.getresponse()
            reply = response.read()
        except TimeoutError:
            connection.close()
            raise DeadlineExceeded(f"the vLLM engine at {url} did not answer within the deadline") from None
        except STALE:
            connection.close()
            raise
        except (OSError, http.client.HTTPException) as e:
            connection.close()
            raise BackendUnavailable(f"the vLLM engine at {url} is unreachable: {type(e).__name__}: {e}") from None
        if response.will_close or url != self.url:
            connection.close()
        else:
            self._idle.put((url, connection, time.monotonic()))
        return response.status, reply

    def _connection(self, fresh: bool = False) -> tuple[str, http.client.HTTPConnection, bool]:
        """(url, connection, whether it was kept alive): a connection idle for less than KEEP_ALIVE seconds,
        else a new one."""
        while not fresh:
            try:
                url, connection, since = self._idle.get_nowait()
            except queue.Empty:
                break
            if url == self.url and time.monotonic() - since < KEEP_ALIVE:
                return url, connection, True
            connection.close()
        url = self.url
        return url, connection_to(url), False

    def close(self) -> None:
        self._closed = True
        while True:
            try:
                self._idle.get_nowait()[1].close()
            except queue.Empty:
                return


def rewards(reply: bytes, expected: int) -> list[float]:
    """The rewards in a `/pooling` reply, in input order: one finite float per sequence, else ScorerError."""
    try:
        items: Any = json.loads(reply)["data"]
        out = [math.nan] * expected
        for item in items:
            values = item["data"]
            out[int(item["index"])] = float(values[0] if isinstance(values, list) else values)
    except (ValueError, KeyError, IndexError, TypeError) as e:
        why = f"the vLLM engine's reply is not a pooling result ({type(e).__name__}): {said(reply)}"
        raise ScorerError(why) from None
    if len(items) != expected or not all(math.isfinite(v) for v in out):
        why = f"the vLLM engine returned {len(items)} rewards for {expected} sequences, or a non-finite one"
        raise ScorerError(why)
    return out


def said(reply: bytes, limit: int = 300) -> str:
    """What the engine said: its error message if it sent one, else the start of its reply."""
    try:
        error = json.loads(reply).get("error", {})
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            return str(message)[:limit]
    except (ValueError, AttributeError):
        pass
    return reply[:limit].decode("utf-8", "replace")
