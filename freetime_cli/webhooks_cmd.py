"""`freetime webhooks serve|apply`: receive signed notifications into the inbox, apply them."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from freetime_cli._common import BaseUrlOption, DuckDbOption, console, fail, out, quiet_logging
from pipelines.config import ApiSettings, ConfigError
from pipelines.warehouse import WarehouseError

app = typer.Typer(no_args_is_help=True, help="Receive Terminal49 webhooks and apply them.")


@app.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(min=0, max=65535, help="Port (0 = any free; the sandbox's default is 8049)."),
    ] = 8050,
    secret: Annotated[
        str | None,
        typer.Option(
            envvar="FREETIME_WEBHOOK_SECRET",
            show_envvar=True,
            help="The webhook's signing secret (env FREETIME_WEBHOOK_SECRET).",
        ),
    ] = None,
    inbox: Annotated[
        Path | None,
        typer.Option(
            help="Inbox file (env FREETIME_INBOX; default inbox.sqlite beside the warehouse)."
        ),
    ] = None,
    request_timeout: Annotated[
        float,
        typer.Option(
            min=0.1,
            help="Seconds a delivery may take to send its headers, and again its body "
            "(slower: cut; a body also gets a 408).",
        ),
    ] = 10.0,
    max_connections: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Connections served at once, beyond: 503 (default 4096, fewer if the "
            "open-file limit is lower).",
        ),
    ] = None,
) -> None:
    """Accept signed notifications (401 bad signature, 400 malformed) into the local inbox.

    Bodies over 10 MiB are refused (413), slow ones cut (408): see docs/webhooks.md.
    """
    import uvicorn

    from pipelines.webhooks.inbox import Inbox, InboxUnusable, default_inbox_path
    from pipelines.webhooks.receiver import PATH, ReceiverLimits, create_app, uvicorn_config
    from pipelines.webhooks.signing import check_secret

    try:
        key = check_secret(secret)
    except ValueError as exc:
        fail(str(exc))
    limits = ReceiverLimits(
        head_timeout_s=request_timeout,
        body_timeout_s=request_timeout,
        read_timeout_s=min(5.0, request_timeout),
    )
    if max_connections is not None:
        limits = dataclasses.replace(limits, max_connections=max_connections)
    inbox_path = inbox or default_inbox_path()
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on accepted sockets whose proto
        # is TCP; without it every answer waits ~40 ms (Nagle against delayed ACK).
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    try:
        Inbox(inbox_path).close()  # a folder or a file that is no inbox fails here, not later
        web = create_app(key, inbox_path, limits)
    except InboxUnusable as exc:
        fail(str(exc))
    except Exception as exc:  # inbox folder not writable, ...
        fail(f"cannot open the inbox {inbox_path}: {exc}")
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    print(f"url: http://{shown}:{bound}{PATH}", flush=True)
    print(f"inbox: {inbox_path}", flush=True)
    config = uvicorn_config(
        web, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=5
    )
    uvicorn.Server(config).run(sockets=[sock])


@app.command("apply")
def apply(
    duckdb: DuckDbOption = None,
    inbox: Annotated[
        Path | None, typer.Option(help="Inbox file (env FREETIME_INBOX; default beside warehouse).")
    ] = None,
    reconcile: Annotated[
        bool,
        typer.Option("--reconcile", help="First pull missed notifications from the API."),
    ] = False,
    base_url: BaseUrlOption = None,
) -> None:
    """Apply the inbox's new notifications to the warehouse (idempotent)."""
    from pipelines.load import LoadFailed
    from pipelines.terminal49.client import Terminal49Client, Terminal49Error
    from pipelines.webhooks.apply import apply_inbox
    from pipelines.webhooks.inbox import Inbox, InboxUnusable, default_inbox_path

    quiet_logging()
    if inbox is not None and not inbox.exists():
        fail(f"no inbox at {inbox}")
    try:
        api = ApiSettings.resolve(base_url=base_url)
        inbox_path = inbox or default_inbox_path(duckdb)
    except ConfigError as exc:
        fail(str(exc))
    if not reconcile and not inbox_path.exists():  # nothing received yet: create nothing
        out.print(
            f"nothing to apply: no inbox at {escape(str(inbox_path))} yet (`freetime webhooks "
            "serve` receives notifications into it; --reconcile pulls them from the API)",
            highlight=False,
        )
        return
    if inbox_path.exists():  # a folder, or a file that is no inbox: say so before anything
        try:
            Inbox(inbox_path).close()
        except InboxUnusable as exc:
            fail(str(exc))
    client = None
    if api.api_key:
        client = Terminal49Client.for_api(api)
    elif reconcile:
        fail("--reconcile needs an API key: set TERMINAL49_API_KEY")
    else:
        console.print(
            "no API key: containers that notifications do not carry are left for the next load"
        )
    try:
        summary = apply_inbox(duckdb, inbox_path, client, reconcile=reconcile)
    except (LoadFailed, WarehouseError, Terminal49Error, ConfigError) as exc:
        fail(str(exc))
    finally:
        if client is not None:
            client.close()
    out.print(summary.line(), highlight=False)
    if summary.unresolved:
        console.print(
            f"unresolved notifications: {escape(', '.join(summary.unresolved[:10]))}",
            highlight=False,
        )
    sys.stdout.flush()


def start_receiver_process(
    secret: str,
    inbox: Path,
    port: int = 0,
    timeout: float = 20.0,
    options: Sequence[str] = (),
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``freetime webhooks serve`` as a subprocess (for tests and benchmarks).

    ``options`` are more ``serve`` options (e.g. ``["--request-timeout", "3"]``). Returns the
    process and the URL it prints, once its ``/healthz`` answers. The caller terminates (or
    kills) the process.
    """
    import httpx

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "freetime_cli.main",
            "webhooks",
            "serve",
            "--port",
            str(port),
            "--inbox",
            str(inbox),
            *options,
        ],
        env={**os.environ, "FREETIME_WEBHOOK_SECRET": secret},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().decode().strip().removeprefix("url: ")
    health = url.rsplit("/webhooks", 1)[0] + "/healthz"
    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx.get(health, timeout=1)
            return proc, url
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"the webhook receiver did not start ({url!r})") from None
            time.sleep(0.05)
