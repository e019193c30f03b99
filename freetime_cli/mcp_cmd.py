"""`freetime mcp serve|stdio`: the warehouse as a Model Context Protocol tool server."""

from __future__ import annotations

from typing import Annotated

import typer

from freetime_cli._common import DuckDbOption, fail

app = typer.Typer(no_args_is_help=True, help="Serve the warehouse to MCP tool clients.")


@app.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="Address to bind (loopback unless auth is set).")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port; the endpoint is http://HOST:PORT/mcp.")] = 8765,
    duckdb: DuckDbOption = None,
    issuer: Annotated[str | None, typer.Option(
        help="OAuth issuer URL (env FREETIME_MCP_ISSUER): accept its bearer JWTs.")] = None,
    resource_url: Annotated[str | None, typer.Option(
        help="This server's public URL, the tokens' audience (default http://HOST:PORT).")]
    = None,
) -> None:
    """Serve over streamable HTTP at /mcp (key: FREETIME_MCP_TOKEN, scheme Token)."""
    import uvicorn

    from pipelines.config import ConfigError, resolve_duckdb_path
    from pipelines.toolserver.auth import AuthConfigError, AuthMiddleware, AuthSettings, check_bind
    from pipelines.toolserver.server import build_server

    if not 0 < port < 65536:
        fail(f"--port must be between 1 and 65535, got {port}")
    try:
        path = resolve_duckdb_path(duckdb)
        shown = f"[{host}]" if ":" in host else host
        auth = AuthSettings.resolve(resource_url or f"http://{shown}:{port}", issuer)
        check_bind(host, auth)
    except (ConfigError, AuthConfigError) as exc:
        fail(str(exc))
    mcp, reader = build_server(path)
    app_ = AuthMiddleware(mcp.streamable_http_app(host=host, stateless_http=True,
                                                   json_response=True), auth)
    mode = ("OAuth bearer + key" if auth.issuer and auth.token else "OAuth bearer"
            if auth.issuer else "API key (Authorization: Token)" if auth.token else "no auth")
    typer.echo(f"freetime MCP server on http://{shown}:{port}/mcp ({mode}), warehouse {path}",
               err=True)
    try:
        uvicorn.run(app_, host=host, port=port, log_level="warning", access_log=False)
    finally:
        reader.close()


@app.command("stdio")
def stdio(duckdb: DuckDbOption = None) -> None:
    """Serve over stdin/stdout, for clients that start the server as a process."""
    from pipelines.config import ConfigError, resolve_duckdb_path
    from pipelines.toolserver.server import build_server

    try:
        path = resolve_duckdb_path(duckdb)
    except ConfigError as exc:
        fail(str(exc))
    mcp, reader = build_server(path)
    try:
        mcp.run("stdio")
    finally:
        reader.close()
