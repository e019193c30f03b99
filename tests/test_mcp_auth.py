"""Auth of the tool server: API key (Token scheme) and OAuth bearer JWTs from a test issuer
whose keys are served on loopback."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import LoopbackServer, bytecode_env
from tests.mcp_helpers import mcp_server, raw_initialize

pytestmark = pytest.mark.sandbox

KEY = "test-mcp-key-0123456789"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small warehouse (the auth checks need a server, not data)."""
    import duckdb

    path = tmp_path_factory.mktemp("mcpauth") / "freetime.duckdb"
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE SCHEMA terminal49; CREATE TABLE terminal49.containers AS "
        "SELECT 'c1' AS id, 'MSCU1234567' AS number"
    )
    con.close()
    return path


def _tools(url: str, authorization: str) -> set[str]:
    async def run() -> set[str]:
        client = httpx2.AsyncClient(headers={"Authorization": authorization}, timeout=30)
        async with client, Client(streamable_http_client(url, http_client=client)) as c:
            return {t.name for t in (await c.list_tools()).tools}

    return anyio.run(run)


def test_api_key_mode(warehouse: Path) -> None:
    with mcp_server(warehouse, {"FREETIME_MCP_TOKEN": KEY}) as base:
        assert raw_initialize(base).status_code == 401
        assert raw_initialize(base, "Token wrong-key").status_code == 401
        bearer = raw_initialize(base, f"Bearer {KEY}")
        assert bearer.status_code == 401 and "Token" in bearer.json()["error_description"]
        assert raw_initialize(base, f"Token {KEY}").status_code == 200
        assert "get_container" in _tools(base + "/mcp", f"Token {KEY}")


def test_no_key_refuses_a_public_address(warehouse: Path) -> None:
    import subprocess
    import sys

    from tests.mcp_helpers import REPO

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "freetime_cli.main",
            "mcp",
            "serve",
            "--host",
            "0.0.0.0",
            "--duckdb",
            str(warehouse),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **bytecode_env()},  # a bare environment
        timeout=60,
    )
    assert r.returncode == 2 and "refusing to listen on 0.0.0.0" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.fixture(scope="module")
def issuer() -> Iterator[tuple[str, Callable[..., str]]]:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key()))
    jwk.update(kid="k1", use="sig", alg="RS256")
    holder: dict[str, str] = {}

    def handler(path: str, q: dict[str, str], h: dict[str, str]) -> tuple[int, dict, bytes]:
        if path == "/.well-known/oauth-authorization-server":
            body = {
                "issuer": holder["url"],
                "jwks_uri": holder["url"] + "/jwks",
                "authorization_endpoint": holder["url"] + "/authorize",
                "token_endpoint": holder["url"] + "/token",
            }
        elif path == "/jwks":
            body = {"keys": [jwk]}
        else:
            return 404, {}, b""
        return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()

    with LoopbackServer(handler) as srv:
        holder["url"] = srv.base_url.removesuffix("/v2")

        def token(aud: str, iss: str | None = None, exp: float | None = None) -> str:
            claims: dict[str, Any] = {
                "iss": iss or holder["url"],
                "aud": aud,
                "sub": "u1",
                "exp": int(exp or time.time() + 300),
            }
            return jwt.encode(claims, private, algorithm="RS256", headers={"kid": "k1"})

        yield holder["url"], token


def test_oauth_resource_server(warehouse: Path, issuer: tuple[str, Callable[..., str]]) -> None:
    url, token = issuer
    with mcp_server(warehouse, {"FREETIME_MCP_ISSUER": url}) as base:
        meta = httpx2.get(base + "/.well-known/oauth-protected-resource").json()
        assert meta["authorization_servers"] == [url] and meta["resource"] == base
        none = raw_initialize(base)
        assert none.status_code == 401
        assert (
            f'resource_metadata="{base}/.well-known/oauth-protected-resource"'
            in none.headers["www-authenticate"]
        )
        assert none.headers["www-authenticate"].startswith("Bearer ")
        good = token(base)
        assert raw_initialize(base, f"Bearer {good}").status_code == 200
        assert "query_warehouse" in _tools(base + "/mcp", f"Bearer {good}")
        for bad in (
            token(base, exp=time.time() - 60),
            token("http://elsewhere.example"),
            token(base, iss="http://127.0.0.1:9/other"),
        ):
            r = raw_initialize(base, f"Bearer {bad}")
            assert r.status_code == 401 and "resource_metadata" in r.headers["www-authenticate"]
        assert raw_initialize(base, f"Token {good}").status_code == 401
