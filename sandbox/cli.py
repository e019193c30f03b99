"""`freetime sandbox ...`: serve a synthetic Terminal49 account over HTTP.

``serve`` generates the account, binds the socket, prints exactly two lines
(``base_url: http://HOST:PORT/v2`` and ``api_key: KEY``), flushes stdout, then serves until
terminated. A malformed option (``--faults``, ``--clock``) is reported on one line with exit
code 2, as is an ``--active-share`` outside [0, 1].
"""

from __future__ import annotations

import gc
import sys
from typing import TYPE_CHECKING

import typer

from sandbox.faults import RATE_WINDOW

if TYPE_CHECKING:
    from sandbox.serving import ServeOptions

app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)


def _fail(message: str) -> None:
    typer.echo(f"freetime sandbox serve: {message}", err=True)
    raise typer.Exit(2)


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    port: int = typer.Option(8049, help="Port to bind (0 = any free port)."),
    containers: int = typer.Option(500, min=0, help="Number of containers in the account."),
    seed: int = typer.Option(49, help="Seed of the synthetic account and of the faults."),
    api_key: str = typer.Option("sandbox-key", help="API key clients must send."),
    rate_limit: int = typer.Option(0, min=0, help="Requests per rolling minute (0 = off)."),
    rate_window_seconds: float = typer.Option(
        RATE_WINDOW, min=0.1, help="Seconds of the rate limit's rolling window (a test's minute)."
    ),
    faults: str = typer.Option(
        "", help="e.g. 5xx=0.05,429=0.05,truncate=0.01,drop=0.01,slow=0.02,slow_seconds=2"
    ),
    clock: str = typer.Option(None, help="Sandbox clock, ISO 8601 (default: now, hour-floored)."),
    advance_every: float = typer.Option(
        0.0, min=0.0, help="Advance the clock every N wall seconds (0 = off)."
    ),
    advance_step_hours: float = typer.Option(
        1.0, min=0.0, help="Sandbox hours per automatic advance."
    ),
    log_level: str = typer.Option("warning", help="uvicorn log level."),
    webhook_backoff_seconds: float = typer.Option(
        60.0, min=0.0, help="Delay before the first webhook retry (doubles per retry, x64 cap)."
    ),
    webhook_max_retries: int = typer.Option(12, min=0, help="Retries of a failed delivery."),
    webhook_timeout_seconds: float = typer.Option(
        10.0, min=0.01, help="Timeout of one delivery attempt."
    ),
    webhook_concurrency: int = typer.Option(20, min=1, help="Deliveries in flight at most."),
    document_delay_seconds: float = typer.Option(
        30.0,
        min=0.0,
        help="Wall seconds until a submitted document is processed (0 = only on "
        "advance or POST /admin/documents/process).",
    ),
    email_documents: int = typer.Option(-1, help="Seeded past emails (-1 = by account size)."),
    emails_per_day: float = typer.Option(
        -1.0, help="New emails per sandbox day on advance (-1 = containers / 500)."
    ),
    active_share: float | None = typer.Option(
        None,
        help="Share (0..1) of ACTIVE shipments; the rest are SETTLED (delivered and "
        "empty-returned 30-400 days ago, never changing). Default: the usual mix.",
    ),
    pod_deadlines: bool = typer.Option(
        True,
        "--pod-deadlines/--no-pod-deadlines",
        help="Send import_deadlines.pod on the newer containers, as the live API does.",
    ),
) -> None:
    """Serve a synthetic Terminal49 account over HTTP."""
    options = dict(locals())  # every option above, by name (before anything else is bound)
    from sandbox.serving import InvalidOption, ServeOptions, prepare

    try:
        prepared = prepare(ServeOptions(**options))
    except InvalidOption as e:
        _fail(str(e))
        return
    # The account and its state are long-lived: keep the cyclic GC from re-scanning them on
    # every collection.
    gc.collect()
    gc.freeze()
    sys.stdout.write(f"base_url: {prepared.base_url}\napi_key: {api_key}\n")
    sys.stdout.flush()
    import uvicorn

    try:
        uvicorn.Server(prepared.config).run(sockets=[prepared.sock])
    finally:
        # frozen objects are never freed: at exit, extension modules (DuckDB's) would report
        # each object they still hold as leaked
        gc.unfreeze()


def parse_args(args: list[str]) -> ServeOptions:
    """The options ``sandbox serve ARGS`` runs with: its defaults for those not given, its
    range checks (:class:`sandbox.serving.InvalidOption` for a bad value or an unknown option)."""
    from sandbox.serving import InvalidOption, ServeOptions

    group = typer.main.get_command(app)
    command = group.commands["serve"]  # type: ignore[attr-defined]
    try:
        ctx = command.make_context("serve", list(args))
    except typer.TyperException as e:  # typer's click: its usage errors derive from this
        raise InvalidOption(e.format_message()) from None
    return ServeOptions(**ctx.params)


@app.command()
def info() -> None:
    """Describe the sandbox (see `serve --help`)."""
    typer.echo("Local Terminal49 look-alike. Start it with: freetime sandbox serve --help")
