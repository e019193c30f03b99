"""Start ``freetime mcp serve`` as a real process on loopback and talk to it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from freetime_cli.mcp_cmd import serving

REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def mcp_server(db: Path, env: dict[str, str] | None = None, *args: str) -> Iterator[str]:
    """Yield the base URL (``http://127.0.0.1:PORT``) of a running server."""
    with serving(db, *args, env=env) as (base, _):
        yield base


INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


def raw_initialize(base: str, authorization: str | None = None) -> httpx.Response:
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    if authorization:
        headers["Authorization"] = authorization
    return httpx.post(base + "/mcp", json=INITIALIZE, headers=headers, timeout=30)
