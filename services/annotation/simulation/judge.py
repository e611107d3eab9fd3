"""A stand-in for a paid LLM judge: a local HTTP server speaking OpenAI's chat-completions protocol that
answers the paper's pairwise judging prompt from the gold ranks of bench files, wrong at a set rate.

Only the model is simulated: the judge's client (`judge.OpenAICompatibleBackend`) is the real code
path. The server finds the query and the two answers in the prompt text (where `judge.prompt` puts
them), looks them up among that query's bench responses and answers A (answerA ranks better), B or C
(gold tie). With probability `noise` it answers one of the two other letters instead, drawn from a
stream seeded by `seed` and the prompt text: the same question always gets the same answer (as at
temperature 0), while the two A/B orders of a pair are independent draws. A prompt it cannot place
(an unknown query or answer) gets HTTP 400 with an OpenAI-style error body.

    cheems dev judge-server --bench data/sample/human.jsonl --noise 0.3 --port 8090
    cheems service judge --base-url http://127.0.0.1:8090/v1 --model simulated-judge --bootstrap ... --db ...
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cheems.formats.cheemsbench import BenchItem

log = logging.getLogger(__name__)
LETTERS = ("A", "B", "C")


@dataclass(frozen=True)
class SimulatedJudgeConfig:
    """noise: share of answers that are wrong (one of the two other letters); seed: of the noise;
    model: the name /v1/models lists and answers carry."""

    noise: float = 0.3
    seed: int = 0
    model: str = "simulated-judge"

    def __post_init__(self) -> None:
        if not 0.0 <= self.noise <= 1.0:
            raise ValueError(f"SimulatedJudgeConfig.noise must be in [0, 1], got {self.noise}")


class UnknownQuestion(ValueError):
    """The prompt names a query or answers the bench files do not hold."""


class SimulatedJudge:
    """The model: a judging prompt in, "A", "B" or "C" out (pure, no I/O)."""

    def __init__(self, items: Sequence[BenchItem], config: SimulatedJudgeConfig = SimulatedJudgeConfig()) -> None:
        self.config = config
        self.gold: dict[str, list[tuple[str, int]]] = {}  # query -> [(content, rank)]
        for item in items:
            self.gold.setdefault(item.input, []).extend((r.content, item.rank[r.id]) for r in item.responses)

    def answer(self, prompt: str) -> str:
        a, b = self.ranks(prompt)
        truth = "A" if a < b else "B" if b < a else "C"
        rng = random.Random(f"{self.config.seed}:{hashlib.sha256(prompt.encode()).hexdigest()}")
        if rng.random() < self.config.noise:
            return rng.choice([letter for letter in LETTERS if letter != truth])
        return truth

    def ranks(self, prompt: str) -> tuple[int, int]:
        """The gold ranks of answerA and answerB; UnknownQuestion when the prompt cannot be placed."""
        for query, responses in self.gold.items():
            if f"「query」: {query} " not in prompt:
                continue
            for first, rank_a in responses:
                for second, rank_b in responses:
                    if f"「answerA」: {first} 「answerB」: {second} 请确保" in prompt:
                        return rank_a, rank_b
        raise UnknownQuestion("no bench item has this query with these two answers")


class JudgeServer:
    """`SimulatedJudge` behind POST /v1/chat/completions (and GET /v1/models) on a local port."""

    def __init__(self, judge: SimulatedJudge, host: str = "127.0.0.1", port: int = 0) -> None:
        self.judge, self._ids = judge, itertools.count(1)
        self.server = ThreadingHTTPServer((host, port), _handler(self))
        self.server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def base_url(self) -> str:
        host = self.server.server_address[0]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{self.port}/v1"

    def start(self) -> JudgeServer:
        self._thread = threading.Thread(target=self.server.serve_forever, name="judge-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> JudgeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
            raise UnknownQuestion("messages: expected a non-empty list of {role, content}")
        letter = self.judge.answer(str(messages[-1].get("content", "")))
        return {
            "id": f"chatcmpl-sim-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.judge.config.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": letter}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1},
        }


def _handler(owner: JudgeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                return self._send(404, _error(f"no route {self.path}"))
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                self._send(200, owner.completion(body if isinstance(body, dict) else {}))
            except (ValueError, UnknownQuestion) as e:  # JSONDecodeError is a ValueError
                self._send(400, _error(str(e)))

        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/v1/models":
                return self._send(404, _error(f"no route {self.path}"))
            model = {"id": owner.judge.config.model, "object": "model", "owned_by": "cheems"}
            self._send(200, {"object": "list", "data": [model]})

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("judge-server: " + format, *args)

    return Handler


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error"}}
