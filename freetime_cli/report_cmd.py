"""`freetime report`: write the self-contained HTML risk report (opens offline in a browser)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from freetime_cli._common import (
    DuckDbOption,
    WarehouseOption,
    console,
    fail,
    parse_as_of,
    warehouse_given,
)


def report(
    duckdb: DuckDbOption = None,
    warehouse: WarehouseOption = None,
    out: Annotated[Path, typer.Option("--out", help="HTML file to write.")] = Path("data")
    / "report.html",
    as_of: Annotated[
        str | None,
        typer.Option(
            "--as-of",
            help="ISO instant to recompute the risk at, in memory (naive = "
            "UTC). Default: the published risk run.",
        ),
    ] = None,
) -> None:
    """Write the demurrage risk report: summary, charts and the at-risk table in one HTML file."""
    from pipelines.config import ConfigError
    from pipelines.warehouse import WarehouseError, existing_warehouse

    target = warehouse_given(duckdb, warehouse)
    try:
        when = parse_as_of(as_of)
        if out.exists() and out.is_dir():
            raise ValueError(f"--out {out} is a directory; give a file name such as report.html")
        path = existing_warehouse(target).path  # None on PostgreSQL
    except (ValueError, ConfigError, WarehouseError, OSError) as exc:
        fail(str(exc))
    # polars and altair take half a CPU-second to import: a refused command never pays for it
    from pipelines.analytics import TariffError
    from pipelines.report import write_report

    try:
        written = write_report(path or target, out, as_of=when)
    except (ValueError, TariffError, ConfigError, WarehouseError, OSError) as exc:
        fail(str(exc))
    console.print(
        f"report: wrote {written} ({written.stat().st_size / 1e6:.1f} MB); "
        f"open it in a browser (works offline)",
        highlight=False,
    )
