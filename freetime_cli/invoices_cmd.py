"""`freetime invoices import|audit|dispute`: check demurrage and detention bills against the
record (docs/invoices.md), on a DuckDB or PostgreSQL warehouse (``--warehouse``).

Each command checks its arguments before it imports the invoices' modules (polars, duckdb), so
a refusal stays cheap."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from freetime_cli._common import (
    DuckDbOption,
    WarehouseOption,
    console,
    fail,
    out,
    parse_as_of,
    warehouse_given,
)
from pipelines.config import ConfigError
from pipelines.warehouse import WarehouseError, existing_warehouse

app = typer.Typer(no_args_is_help=True, help="Import invoices, audit them, write disputes.")

AsOfOption = Annotated[
    str | None,
    typer.Option("--as-of", help="Today, as an ISO date or instant (default now; naive = UTC)."),
]


@app.command("import")
def import_(
    files: Annotated[
        list[Path], typer.Argument(help="Invoice files, CSV or JSON.", show_default=False)
    ],
    duckdb: DuckDbOption = None,
    warehouse: WarehouseOption = None,
    as_of: AsOfOption = None,
) -> None:
    """Store invoices in the warehouse (terminal49.invoices, terminal49.invoice_lines).

    Each problem is one line; an invoice with an error is left out whole; re-importing an
    invoice changes nothing, a corrected one becomes its new version. Exit 2 when nothing could
    be imported, 1 when some invoice was refused.
    """
    try:
        now = parse_as_of(as_of) or dt.datetime.now(dt.UTC)
        target = existing_warehouse(warehouse_given(duckdb, warehouse))
    except (ValueError, ConfigError, WarehouseError) as exc:
        fail(str(exc))
    from pipelines.invoices.schema import read_invoice_files
    from pipelines.invoices.store import import_invoices

    try:
        invoices, problems = read_invoice_files(files)
        summary = import_invoices(target, invoices, problems, today=now.date(), now=now)
    except (ValueError, ConfigError, WarehouseError) as exc:
        fail(str(exc))
    for p in summary.problems:
        kind = "error" if p.error else "warning"
        color = "red" if p.error else "yellow"
        console.print(f"[bold {color}]{kind}:[/] {escape(str(p))}", highlight=False, soft_wrap=True)
    stored = len(summary.new) + len(summary.corrected) + len(summary.unchanged)
    console.print(
        f"invoices: {len(summary.new)} new, {len(summary.corrected)} corrected, "
        f"{len(summary.unchanged)} unchanged, {len(summary.refused)} refused",
        highlight=False,
        soft_wrap=True,
    )
    if summary.refused:
        raise typer.Exit(2 if not stored else 1)


@app.command("audit")
def audit(
    duckdb: DuckDbOption = None, warehouse: WarehouseOption = None, as_of: AsOfOption = None
) -> None:
    """Audit every current invoice line against the charge engine and history
    (analytics.invoice_audit; analytics.invoice_disputes_by_month sums what is in dispute)."""
    try:
        now = parse_as_of(as_of)
        target = existing_warehouse(warehouse_given(duckdb, warehouse))
    except (ValueError, ConfigError, WarehouseError) as exc:
        fail(str(exc))
    from pipelines.invoices.audit import run_audit

    try:
        summary = run_audit(target, now)
    except (ValueError, ConfigError, WarehouseError) as exc:
        fail(str(exc))
    disputed = ", ".join(f"{v:,.2f} {k}" for k, v in sorted(summary.disputed.items())) or "0"
    out.print(
        f"audit: {summary.lines} invoice lines, {summary.with_findings} with findings, "
        f"{disputed} in dispute ({summary.past_deadline} past their dispute deadline)",
        highlight=False,
        soft_wrap=True,
    )


@app.command("dispute")
def dispute(
    invoice: Annotated[str, typer.Argument(help="Invoice number.", show_default=False)],
    out_file: Annotated[
        Path, typer.Option("--out", help="HTML file to write (its CSV beside it).")
    ],
    duckdb: DuckDbOption = None,
    warehouse: WarehouseOption = None,
    issuer: Annotated[
        str | None, typer.Option("--issuer", help="Issuer name, when several use the number.")
    ] = None,
) -> None:
    """Write the dispute package of one invoice: each finding with the history rows that
    prove it, the amounts, and what freetime cannot know (HTML and CSV)."""
    try:
        if out_file.is_dir():
            raise ValueError(f"--out {out_file} is a directory; give a file name such as x.html")
        target = existing_warehouse(warehouse_given(duckdb, warehouse))
    except (ValueError, ConfigError, WarehouseError) as exc:
        fail(str(exc))
    from pipelines.invoices.dispute import write_dispute

    try:
        page, sheet = write_dispute(target, invoice, out_file, issuer)
    except (LookupError, ValueError, ConfigError, WarehouseError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write the dispute: {exc.strerror or exc}: {exc.filename or out_file}")
    console.print(f"dispute: wrote {page} and {sheet}", highlight=False, soft_wrap=True)
