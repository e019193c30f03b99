"""A tiny webhook receiver for tests and benchmarks: records every POST the sandbox delivers.

Usage::

    with WebhookReceiver() as rx:
        sb.register_webhook(rx.url("/hook"))
        ...
        rx.requests  # [Received(path, headers, body, status), ...]
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    """One request a :class:`WebhookReceiver` got."""

    path: str
    headers: dict[str, str]
    body: bytes
    status: int


class WebhookReceiver:
    """A tiny threaded HTTP/1.1 server on 127.0.0.1 that records every POST.

    ``respond(path, headers, body) -> status`` decides the answer (default 200). Use as a
    context manager; ``url(path)`` gives an address, ``requests`` the recorded list (thread-safe
    appends).
    """

    def __init__(
        self, respond: Callable[[str, dict[str, str], bytes], int] | None = None, delay: float = 0.0
    ) -> None:
        self.respond = respond or (lambda path, headers, body: 200)
        self.delay = delay
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                headers = {k: v for k, v in self.headers.items()}
                if outer.delay:
                    time.sleep(outer.delay)
                status = outer.respond(self.path, headers, body)
                with outer._lock:
                    outer.requests.append(Received(self.path, headers, body, status))
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

        class Server(ThreadingHTTPServer):
            request_queue_size = 256
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str = "/hook") -> str:
        """``http://127.0.0.1:PORT{path}``."""
        return f"http://127.0.0.1:{self.server.server_port}{path}"

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
