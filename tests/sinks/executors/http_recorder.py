"""A real HTTP server on 127.0.0.1 that records every request and answers from a script.

Used for the webhook backend (a ticketing system's adapter) and the
Kubernetes backend (an API server serving recorded responses).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["Request", "Reply", "RecordingServer"]


@dataclass(frozen=True)
class Request:
    """One request as the server received it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    """What to answer: a status, a JSON (or raw) body, and an optional delay before answering."""

    status: int = 200
    body: Any = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)

    def encoded(self) -> bytes:
        if self.body is None:
            return b""
        return self.body if isinstance(self.body, bytes) else json.dumps(self.body).encode()


class RecordingServer:
    """Serves ``answer(request) -> Reply`` on an ephemeral loopback port, in a thread."""

    def __init__(self, answer: Callable[[Request], Reply]) -> None:
        self.requests: list[Request] = []
        self._answer = answer
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                parts = urlsplit(self.path)
                request = Request(self.command, parts.path, parse_qs(parts.query),
                                  {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length))
                recorder.requests.append(request)
                reply = recorder._answer(request)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                body = reply.encoded()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (a timeout test)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> RecordingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
