"""A local HTTP server speaking OpenAI's chat-completions protocol, answering with a given function of the prompt.

with ChatServer(lambda prompt: "A") as server:
    OpenAICompatibleBackend(server.base_url, "m").complete("...")   # -> "A"
server.prompts   # every prompt received, in order; server.auth: the authorization headers
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWERS = re.compile(r"「answerA」: (.*) 「answerB」: (.*) 请确保", re.S)


def answers(prompt: str) -> tuple[str, str]:
    """answerA and answerB of a judge prompt (`services.annotation.judge.prompt`)."""
    match = ANSWERS.search(prompt)
    assert match, "the judge prompt lost its answers"
    return match.group(1), match.group(2)


def prefer_longer(prompt: str) -> str:
    a, b = answers(prompt)
    return "A" if len(a) > len(b) else "B" if len(b) > len(a) else "C"


class _Server(ThreadingHTTPServer):
    request_queue_size = 64  # the default backlog of 5 drops connections beyond it: a 1 s SYN retry each


class ChatServer:
    """POST /v1/chat/completions answered by `answer(prompt)`, on a free port of 127.0.0.1."""

    def __init__(self, answer: Callable[[str], str]) -> None:
        self.answer, self.prompts, self.auth = answer, list[str](), list[str | None]()
        self._lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> ChatServer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body: Any = json.loads(self.rfile.read(int(self.headers["content-length"])))
                prompt = body["messages"][-1]["content"]
                with owner._lock:
                    owner.prompts.append(prompt)
                    owner.auth.append(self.headers.get("authorization"))
                content = owner.answer(prompt)
                payload = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
                data = json.dumps(payload, ensure_ascii=False).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        return Handler
