"""`freetime mcp serve|stdio`: the warehouse as a Model Context Protocol tool server."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from freetime_cli._common import DuckDbOption, WarehouseOption, fail, warehouse_given

if TYPE_CHECKING:
    from pipelines.config import Warehouse

app = typer.Typer(no_args_is_help=True, help="Serve the warehouse to MCP tool clients.")


@app.command("serve")
def serve(
    host: Annotated[
        str, typer.Option(help="Address to bind (loopback unless auth is set).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port; the endpoint is http://HOST:PORT/mcp.")] = 8765,
    duckdb: DuckDbOption = None,
    warehouse: WarehouseOption = None,
    issuer: Annotated[
        str | None,
        typer.Option(help="OAuth issuer URL (env FREETIME_MCP_ISSUER): accept its bearer JWTs."),
    ] = None,
    resource_url: Annotated[
        str | None,
        typer.Option(
            help="This server's public URL, the tokens' audience (default http://HOST:PORT)."
        ),
    ] = None,
) -> None:
    """Serve over streamable HTTP at /mcp (key: FREETIME_MCP_TOKEN, scheme Token).

    On a PostgreSQL warehouse the server reads the live database in read-only transactions,
    as a role that can only read (see `freetime warehouse grant-reader`)."""
    from pipelines.config import ConfigError
    from pipelines.toolserver.auth import AuthConfigError, AuthMiddleware, AuthSettings, check_bind

    if not 0 < port < 65536:
        fail(f"--port must be between 1 and 65535, got {port}")
    given = warehouse_given(duckdb, warehouse)
    try:
        shown = f"[{host}]" if ":" in host else host
        auth = AuthSettings.resolve(resource_url or f"http://{shown}:{port}", issuer)
        check_bind(host, auth)
    except (ConfigError, AuthConfigError) as exc:
        fail(str(exc))
    path = _reader_target(given)
    # the MCP SDK and uvicorn (most of a start's CPU) only once the settings are known good:
    # a refused start answers at once
    import uvicorn

    from pipelines.toolserver.server import build_server

    mcp, reader = build_server(path)
    app_ = AuthMiddleware(
        mcp.streamable_http_app(host=host, stateless_http=True, json_response=True), auth
    )
    mode = (
        "OAuth bearer + key"
        if auth.issuer and auth.token
        else "OAuth bearer"
        if auth.issuer
        else "API key (Authorization: Token)"
        if auth.token
        else "no auth"
    )
    typer.echo(
        f"freetime MCP server on http://{shown}:{port}/mcp ({mode}), warehouse {path}", err=True
    )
    try:
        uvicorn.run(app_, host=host, port=port, log_level="warning", access_log=False)
    finally:
        reader.close()


@app.command("stdio")
def stdio(duckdb: DuckDbOption = None, warehouse: WarehouseOption = None) -> None:
    """Serve over stdin/stdout, for clients that start the server as a process."""
    path = _reader_target(warehouse_given(duckdb, warehouse))
    from pipelines.toolserver.server import build_server  # the MCP SDK: after the checks

    mcp, reader = build_server(path)
    try:
        mcp.run("stdio")
    finally:
        reader.close()


def _reader_target(given: str | Path | None) -> Path | Warehouse:
    """The warehouse to serve: a DuckDB path (read through snapshots, first call), or a
    PostgreSQL warehouse, whose reader is checked here (exit 2 in one line when its server
    does not answer or its role can write)."""
    from pipelines.config import ConfigError, resolve_warehouse
    from pipelines.warehouse import WarehouseError

    try:
        target = resolve_warehouse(given)
        if target.path is not None:
            return target.path
        # the reader alone, not the MCP server's module: a refused role exits at once
        from pipelines.toolserver.pgread import PgReader

        PgReader(target).close()
    except (ConfigError, WarehouseError) as exc:
        fail(str(exc))
    return target


@contextlib.contextmanager
def serving(
    db: Path | None, *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``freetime mcp serve`` as a process on a free loopback port (for tests and benchmarks):
    yields its base URL (``http://127.0.0.1:PORT``) once it answers, and the process; stops it
    on exit. ``env`` is laid over this process's environment without its FREETIME_MCP_*;
    ``db`` None: the warehouse is the environment's (``FREETIME_WAREHOUSE`` in ``env`` keeps a
    PostgreSQL password out of the command line)."""
    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FREETIME_MCP")}
    full_env.update(env or {})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "freetime_cli.main",
            "mcp",
            "serve",
            "--port",
            str(port),
            *(["--duckdb", str(db)] if db is not None else []),
            *args,
        ],
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
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
        yield base, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
