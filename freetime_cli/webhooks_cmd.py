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
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from freetime_cli._common import (
    BaseUrlOption,
    DuckDbOption,
    WarehouseOption,
    console,
    fail,
    out,
    quiet_logging,
    warehouse_given,
)
from pipelines.config import ApiSettings, ConfigError, Warehouse
from pipelines.warehouse import WarehouseError

if TYPE_CHECKING:
    from pipelines.webhooks.applier import Applier

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
    duckdb: DuckDbOption = None,
    warehouse: WarehouseOption = None,
    no_apply: Annotated[
        bool,
        typer.Option(
            "--no-apply",
            help="Only store: leave applying to `webhooks apply` or the sync (a receiver on "
            "another machine than the warehouse).",
        ),
    ] = False,
    base_url: BaseUrlOption = None,
) -> None:
    """Store signed notifications in the inbox and apply them to the warehouse within seconds.

    A bad signature is refused with 401, a malformed body with 400. Notifications are applied
    when the receiver knows the warehouse (--warehouse, --duckdb, FREETIME_WAREHOUSE,
    FREETIME_DUCKDB, or an existing data/freetime.duckdb), unless --no-apply.

    Bodies over 10 MiB are refused (413), slow ones cut (408): see docs/webhooks.md.
    """
    from pipelines.webhooks.signing import check_secret

    quiet_logging()

    try:
        key = check_secret(secret)
    except ValueError as exc:
        fail(str(exc))
    # uvicorn and starlette once the secret is known good: a refused start answers at once
    import uvicorn

    from pipelines.webhooks.inbox import Inbox, InboxUnusable, default_inbox_path
    from pipelines.webhooks.receiver import PATH, ReceiverLimits, create_app, uvicorn_config

    limits = ReceiverLimits(
        head_timeout_s=request_timeout,
        body_timeout_s=request_timeout,
        read_timeout_s=min(5.0, request_timeout),
    )
    if max_connections is not None:
        limits = dataclasses.replace(limits, max_connections=max_connections)
    given = warehouse_given(duckdb, warehouse)
    try:
        target = None if no_apply else known_warehouse(given)
        inbox_path = inbox or default_inbox_path(target or given)
        # only the applier talks to the API (reading dlt's config costs a second)
        api = None if target is None else ApiSettings.resolve(base_url=base_url)
    except (ConfigError, WarehouseError) as exc:
        fail(str(exc))
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
        web = create_app(key, inbox_path, limits, _applier(target, inbox_path, api))
    except InboxUnusable as exc:
        fail(str(exc))
    except Exception as exc:  # inbox folder not writable, ...
        fail(f"cannot open the inbox {inbox_path}: {exc}")
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    print(f"url: http://{shown}:{bound}{PATH}", flush=True)
    print(f"inbox: {inbox_path}", flush=True)
    print(f"applies to: {target or 'nothing (store only)'}", flush=True)
    config = uvicorn_config(
        web, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=5
    )
    uvicorn.Server(config).run(sockets=[sock])


def known_warehouse(given: str | Path | None) -> Warehouse | None:
    """The warehouse the receiver applies to: ``--warehouse`` or ``--duckdb``, else
    ``FREETIME_WAREHOUSE``, else ``FREETIME_DUCKDB``, else the default file when it exists (a
    receiver that knows no warehouse only stores). ConfigError for a path that cannot be a
    warehouse; WarehouseError for a PostgreSQL server that does not answer, refuses the role,
    or does not let it write."""
    from pipelines.config import resolve_warehouse
    from pipelines.warehouse import check_usable

    target = resolve_warehouse(given)
    if target.path is None:
        from pipelines.config import DATASET, incoming_dataset
        from pipelines.pg.connection import check_writable

        check_writable(target, (DATASET, incoming_dataset("webhooks")))
        return target
    if (
        given is None
        and not os.environ.get("FREETIME_WAREHOUSE")
        and not os.environ.get("FREETIME_DUCKDB")
        and not target.path.exists()
    ):
        return None
    check_usable(target.path)
    return target


def _applier(warehouse: Warehouse | None, inbox: Path, api: ApiSettings | None) -> Applier | None:
    """The receiver's applier (see :mod:`pipelines.webhooks.applier`): one line per batch on
    stderr; containers the notifications do not carry are fetched when a key is set. None
    for a receiver that only stores (no ``warehouse``)."""
    if warehouse is None or api is None:
        return None
    from pipelines.terminal49.client import Terminal49Client
    from pipelines.webhooks.applier import Applier

    def client() -> Terminal49Client | None:
        budget = warehouse.working_folder()  # one budget with the warehouse's other writers
        return Terminal49Client.for_api(api, budget=budget) if api.api_key else None

    def report(line: str) -> None:
        stamp = time.strftime("%H:%M:%S", time.gmtime())
        console.print(f"{stamp} {escape(line)}", highlight=False, soft_wrap=True)

    return Applier(warehouse, inbox, client=client, report=report)


@app.command("apply")
def apply(
    duckdb: DuckDbOption = None,
    warehouse: WarehouseOption = None,
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
    from pipelines.config import resolve_warehouse
    from pipelines.webhooks.inbox import Inbox, InboxUnusable, default_inbox_path

    quiet_logging()
    given = warehouse_given(duckdb, warehouse)
    if inbox is not None and not inbox.exists():
        fail(f"no inbox at {inbox}")
    try:
        target = resolve_warehouse(given)
        inbox_path = inbox or default_inbox_path(target)
    except ConfigError as exc:
        fail(str(exc))
    if not reconcile and not inbox_path.exists():  # nothing received yet: create nothing
        out.print(
            f"nothing to apply: no inbox at {escape(str(inbox_path))} yet (`freetime webhooks "
            "serve` receives notifications into it; --reconcile pulls them from the API)",
            highlight=False,
            soft_wrap=True,  # never a line break inside the path
        )
        return
    if inbox_path.exists():  # a folder, or a file that is no inbox: say so before anything
        try:
            Inbox(inbox_path).close()
        except InboxUnusable as exc:
            fail(str(exc))
    try:  # after the cheap checks: reading dlt's configuration imports dlt
        api = ApiSettings.resolve(base_url=base_url)
    except ConfigError as exc:
        fail(str(exc))
    if reconcile and not api.api_key:
        fail("--reconcile needs an API key: set TERMINAL49_API_KEY")
    from pipelines.load import LoadFailed
    from pipelines.terminal49.client import Terminal49Client, Terminal49Error
    from pipelines.webhooks.apply import apply_inbox

    client = None
    if api.api_key:
        budget = target.working_folder()  # shared with the other writers
        client = Terminal49Client.for_api(api, budget=budget)
    else:
        console.print(
            "no API key: containers that notifications do not carry are left for the next load"
        )
    try:
        summary = apply_inbox(target, inbox_path, client, reconcile=reconcile)
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
    duckdb: Path | None = None,
    env: dict[str, str] | None = None,
    stderr: Any = subprocess.DEVNULL,
    warehouse: str | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``freetime webhooks serve`` as a subprocess (for tests and benchmarks).

    ``duckdb``: the warehouse it applies to (None: store only); or ``warehouse``, a
    ``postgresql://`` URL, given through ``FREETIME_WAREHOUSE`` (a password in the command line
    would show in ``ps``). ``options`` are more ``serve``
    options (e.g. ``["--request-timeout", "3"]``), ``env`` more environment variables, ``stderr``
    where its log lines go (a file object; default nowhere).
    Returns the process and the URL it prints, once its ``/healthz`` answers. The caller
    terminates (or kills) the process.
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
            *(["--duckdb", str(duckdb)] if duckdb else [] if warehouse else ["--no-apply"]),
            *options,
        ],
        env={
            **os.environ,
            **(env or {}),
            **({"FREETIME_WAREHOUSE": warehouse} if warehouse else {}),
            "FREETIME_WEBHOOK_SECRET": secret,
        },
        stdout=subprocess.PIPE,
        stderr=stderr,
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
