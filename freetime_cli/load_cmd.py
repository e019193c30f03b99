"""`freetime load`: scan the account into DuckDB, with a live progress line and a summary."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.live import Live
from rich.table import Table
from rich.text import Text

from freetime_cli._common import (
    BaseUrlOption,
    DuckDbOption,
    WaitOption,
    WarehouseOption,
    console,
    embedded_sandbox,
    fail,
    out,
    quiet_logging,
    warehouse_given,
)
from pipelines.config import (
    ApiSettings,
    ConfigError,
    Warehouse,
    resolve_rate_limit,
    resolve_warehouse,
    resolve_writer_wait,
)
from pipelines.warehouse import WarehouseError, check_usable

if TYPE_CHECKING:  # dlt takes a second to import: only the command itself pays for it
    from pipelines.load import LoadSummary
    from pipelines.terminal49.scan import ScanStats


def load(
    duckdb: DuckDbOption = None,
    warehouse: WarehouseOption = None,
    base_url: BaseUrlOption = None,
    sandbox: Annotated[
        bool, typer.Option("--sandbox", help="Start the local sandbox and load from it.")
    ] = False,
    rate_limit: Annotated[
        float | None, typer.Option(help="Requests per minute (env TERMINAL49_RATE_LIMIT; 100).")
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=16, help="Pages fetched at once.")] = 4,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="Scan every container and shipment (and remove what the API no longer "
            "lists) instead of only what changed since the last load.",
        ),
    ] = False,
    wait: Annotated[float | None, WaitOption] = None,
) -> None:
    """Load the Terminal49 account (containers, shipments, holds, fees, terminals, ports).

    The first load of a warehouse is full; later ones ask only for what changed since the
    last completed load, unless --full."""
    quiet_logging()
    if sandbox and base_url:
        fail("--sandbox loads from the local sandbox; drop --base-url (or drop --sandbox)")
    given = warehouse_given(duckdb, warehouse)
    api: ApiSettings | None = None
    with _one_line(ConfigError, WarehouseError):  # a bad argument fails before anything starts
        target = resolve_warehouse(given)
        check_writer(target)
        rate_limit = resolve_rate_limit(rate_limit)
        wait = resolve_writer_wait(wait)
        if not sandbox:
            api = ApiSettings.resolve(base_url=base_url, rate_limit_per_minute=rate_limit)
    # dlt takes a CPU-second to import: a refused command never pays for it
    from pipelines.load import LoadFailed

    with _one_line(ConfigError, LoadFailed, WarehouseError), contextlib.ExitStack() as stack:
        if api is None:
            url, key = stack.enter_context(embedded_sandbox())
            console.print(f"sandbox: loading from the local sandbox at {url}")
            api = ApiSettings.resolve(base_url=url, api_key=key, rate_limit_per_minute=rate_limit)
        summary = load_with_progress(target, api, concurrency, full or None, wait)
    print_summary(summary)


@contextlib.contextmanager
def _one_line(*errors: type[Exception]) -> Iterator[None]:
    """``errors`` and Ctrl+C end the command with one line (exit 2; 130 for Ctrl+C)."""
    try:
        yield
    except errors as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted: nothing was written, the warehouse holds the previous load", 130)


def check_writer(target: Warehouse) -> None:
    """What a writer checks before it starts: the DuckDB file is usable, or the PostgreSQL
    server answers and lets the role create what the load writes."""
    if target.path is not None:
        check_usable(target.path)
        return
    from pipelines.config import DATASET, incoming_dataset
    from pipelines.pg.connection import check_writable

    check_writable(target, (DATASET, incoming_dataset("load")))


def load_with_progress(
    duckdb: Path | str | Warehouse | None,
    api: ApiSettings,
    concurrency: int = 4,
    full: bool | None = None,
    wait_seconds: float | None = None,
) -> LoadSummary:
    """Run the load with a live line: pages, records, request rate."""
    from pipelines.load import run_load

    started = time.monotonic()
    state: dict[str, ScanStats] = {}
    line = Text("starting load…")

    with Live(line, console=console, refresh_per_second=4, transient=True) as live:

        def on_page(stats: ScanStats) -> None:
            state[stats.kind] = stats
            elapsed = max(time.monotonic() - started, 1e-6)
            pages = sum(s.pages for s in state.values())
            parts = [f"{s.kind} {s.distinct}/{s.total}" for s in state.values()]
            live.update(
                Text(
                    f"loading: {pages} pages, {', '.join(parts)}, "
                    f"{pages * 60 / elapsed:.0f} req/min, {elapsed:.0f}s"
                )
            )

        def on_wait(line: str) -> None:
            console.print(line, highlight=False)

        return run_load(
            duckdb,
            api,
            full=full,
            concurrency=concurrency,
            on_page=on_page,
            on_wait=on_wait,
            wait_seconds=resolve_writer_wait(wait_seconds),
        )


def print_summary(summary: LoadSummary) -> None:
    for warning in summary.warnings:
        console.print(f"warning: {warning}", highlight=False)
    table = Table(
        title=f"Loaded into {summary.warehouse or summary.duckdb_path} ({summary.window_line()})",
        show_edge=False,
    )
    table.add_column("table")
    table.add_column("rows written", justify="right")
    table.add_column("removed", justify="right")
    for name, rows in summary.rows.items():
        table.add_row(name, str(rows), str(summary.removed.get(name, 0)))
    out.print(table)
    out.print(
        f"{summary.requests} requests ({summary.pages} pages, {summary.reconcile_pages} to "
        f"reconcile), {summary.retries} retries, {summary.rate_limited} rate-limited, "
        f"{summary.budget_wait_seconds:.1f}s waited for the key's budget, {summary.seconds:.1f}s"
    )
