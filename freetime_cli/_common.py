"""What every command shares: one-line errors, logging that never shows the key, the sandbox."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

#: ``--duckdb`` and ``--base-url``, the same for every command that takes them.
DuckDbOption = Annotated[
    Path | None,
    typer.Option(help="Warehouse file (env FREETIME_DUCKDB; default data/freetime.duckdb)."),
]
#: ``--warehouse``: a DuckDB path or a ``postgresql://`` URL (see docs/postgres.md).
WarehouseOption = Annotated[
    str | None,
    typer.Option(
        help="Warehouse: a DuckDB file or a postgresql://user@host/db URL "
        "(env FREETIME_WAREHOUSE; the password is never shown).",
        show_default=False,
    ),
]


BaseUrlOption = Annotated[
    str | None, typer.Option(help="API base URL ending in /v2 (env TERMINAL49_BASE_URL).")
]

console = Console(stderr=True)
out = Console()

#: The at-risk list's options, the same for ``freetime risk`` and ``freetime run``.
LimitOption = typer.Option(
    "--limit",
    help="Containers to list, most urgent first; 0 lists all. Default: what fits the terminal "
    "(all when the output is not a terminal).",
    show_default=False,
    metavar="N",
)
PortOption = typer.Option(
    "--port", metavar="LOCODE", help="Only this port of discharge (UN/LOCODE, e.g. USLAX)."
)
TerminalOption = typer.Option(
    "--terminal",
    metavar="TERMINAL",
    help="Only this terminal: its FIRMS code (e.g. Y258) or part of its name.",
)
CarrierOption = typer.Option(
    "--carrier", metavar="SCAC", help="Only this shipping line (SCAC, e.g. MAEU)."
)
WideOption = typer.Option(
    "--wide", help="Every column in full, whatever the terminal's width (lines may wrap)."
)
WaitOption = typer.Option(
    "--wait",
    help="Seconds to wait for another writer of the warehouse "
    "(env FREETIME_WRITER_WAIT; default 3600).",
)


def table_console() -> Console:
    """The console the at-risk table goes to: the terminal at its size; piped or captured
    output gets a wide table rather than rich's 80-column default."""
    return out if out.is_terminal else Console(width=max(out.width, 160))


def print_error(message: str) -> None:
    """One ``error:`` line on stderr, the message printed as it is (never read as markup: a
    path or an API detail with [brackets] must not lose them)."""
    console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one line to stderr and exit: bad input never ends in a traceback."""
    print_error(message)
    raise typer.Exit(code)


def warehouse_given(duckdb: Path | None, warehouse: str | None) -> str | Path | None:
    """The warehouse named on the command line (``--warehouse`` or ``--duckdb``; exit 2 for
    both); None leaves the choice to ``FREETIME_WAREHOUSE``, ``FREETIME_DUCKDB``, the default."""
    if duckdb and warehouse:
        fail("give the warehouse once: --warehouse or --duckdb, not both")
    return warehouse or duckdb


def parse_as_of(text: str | None) -> datetime | None:
    """``--as-of``: an ISO 8601 date or instant (``2026-11-20T12:00:00Z``); naive means UTC.

    Raises ValueError with a message meant for the user.
    """
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--as-of {text!r} is not an ISO 8601 date or instant (e.g. 2026-11-20T12:00:00Z)"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def quiet_logging() -> None:
    """httpx logs every request at INFO: keep the console for what matters."""
    logging.getLogger("httpx").setLevel(logging.WARNING)


@contextlib.contextmanager
def embedded_sandbox(containers: int | None = None) -> Iterator[tuple[str, str]]:
    """Start the local sandbox in a background process; yield (base_url, api_key)."""
    from sandbox.process import SandboxProcess  # the CLI, not the pipeline, knows the sandbox

    with SandboxProcess(containers=containers) if containers else SandboxProcess() as sb:
        yield sb.base_url, sb.api_key
