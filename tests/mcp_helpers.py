"""Start ``freetime mcp serve`` as a real process on loopback and talk to it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def mcp_server(db: Path, env: dict[str, str] | None = None, *args: str) -> Iterator[str]:
    """Yield the base URL (``http://127.0.0.1:PORT``) of a running server."""
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FREETIME_MCP")}
    full_env.update(env or {})
    proc = subprocess.Popen(
        [sys.executable, "-m", "freetime_cli.main", "mcp", "serve", "--port", str(port),
         "--duckdb", str(db), *args],
        cwd=REPO, env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(proc.stderr.read().decode() if proc.stderr else "exited")
            try:
                httpx.get(base + "/", timeout=1.0)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "test", "version": "0"}},
}


def raw_initialize(base: str, authorization: str | None = None) -> httpx.Response:
    headers = {"Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-06-18"}
    if authorization:
        headers["Authorization"] = authorization
    return httpx.post(base + "/mcp", json=INITIALIZE, headers=headers, timeout=30)
