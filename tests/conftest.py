"""Shared fixtures. Vendor reference data the tests use is copied into ``tests/fixtures``."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
T49 = FIXTURES / "terminal49"


def reference_json(relative: str) -> Any:
    """A JSON fixture under ``tests/fixtures/terminal49`` (e.g. ``responses/....json``)."""
    return json.loads((T49 / relative).read_text())


@pytest.fixture(autouse=True)
def _no_dlt_noise() -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("dlt").setLevel(logging.WARNING)


Handler = Callable[[str, dict[str, str], dict[str, str]], tuple[int, dict[str, str], bytes]]


class LoopbackServer:
    """A tiny real HTTP server on 127.0.0.1 whose answers come from a Python function."""

    def __init__(self, handler: Handler) -> None:
        outer = self

        class _H(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                from urllib.parse import parse_qsl, urlsplit

                parts = urlsplit(self.path)
                outer.requests.append(self.path)
                status, headers, body = handler(
                    parts.path, dict(parse_qsl(parts.query)), dict(self.headers.items())
                )
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.requests: list[str] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _H)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v2"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def loopback() -> Iterator[Callable[[Handler], LoopbackServer]]:
    servers: list[LoopbackServer] = []

    def start(handler: Handler) -> LoopbackServer:
        server = LoopbackServer(handler).__enter__()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.__exit__(None, None, None)


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """One temporary Prefect server for the whole test session (it takes ~10 s to start)."""
    import os

    from prefect.testing.utilities import prefect_test_harness

    # Prefect's telemetry writes to the harness database from another thread and prints
    # "database is locked" tracebacks; nothing here needs it.
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    with prefect_test_harness(server_startup_timeout=120):
        yield


PUBLISHED_AS_OF = "2026-11-20T12:00:00Z"


@pytest.fixture(scope="session")
def published_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A warehouse loaded from a 500-container sandbox with risk published as of
    ``PUBLISHED_AS_OF``. Shared by the notebook and report tests: treat it as read-only."""
    from datetime import datetime

    from pipelines.analytics import publish_risk
    from pipelines.config import ApiSettings
    from pipelines.load import run_load
    from sandbox.testing import SandboxProcess

    path = tmp_path_factory.mktemp("published") / "freetime.duckdb"
    with SandboxProcess(containers=500, seed=49, clock=PUBLISHED_AS_OF) as sb:
        run_load(
            path,
            ApiSettings(base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100000),
        )
    publish_risk(path, as_of=datetime.fromisoformat(PUBLISHED_AS_OF.replace("Z", "+00:00")))
    return path
