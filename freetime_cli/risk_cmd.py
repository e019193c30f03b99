"""`freetime risk`: recompute demurrage risk, publish it, print the at-risk containers."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from freetime_cli._common import DuckDbOption, fail, parse_as_of

if TYPE_CHECKING:
    import polars as pl

    from pipelines.analytics import RiskSummary

_FORMATS = ("table", "csv", "json")
_SHOW = [
    "risk_level",
    "container_number",
    "lfd_date",
    "lfd_source",
    "days_to_lfd",
    "working_days_to_lfd",
    "ready_for_pickup",
    "blocking_holds",
    "pickup_appointment_at",
    "accrued_demurrage",
    "projected_demurrage",
    "pod_terminal_name",
    "shipping_line_scac",
    "risk_reason",
]


def risk(
    duckdb: DuckDbOption = None,
    as_of: Annotated[
        str | None, typer.Option("--as-of", help="ISO instant (default now; naive = UTC).")
    ] = None,
    level: Annotated[
        list[str] | None,
        typer.Option(
            "--level",
            help="Risk level(s) to list (default overdue, due_today, imminent); repeat the option.",
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="table, csv or json.")] = "table",
    tariffs: Annotated[
        str | None, typer.Option("--tariffs", help="Tariff CSV (default data/tariffs.csv).")
    ] = None,
) -> None:
    """Recompute demurrage risk and print the at-risk containers, most urgent first."""
    import polars as pl  # here, not at import: `freetime --help` should start fast

    from pipelines.analytics import LEVELS, TariffError, at_risk, publish_risk
    from pipelines.config import ConfigError
    from pipelines.warehouse import WarehouseError

    try:
        when = parse_as_of(as_of)
        levels = [x.strip() for lv in (level or []) for x in lv.split(",") if x.strip()]
        bad = [x for x in levels if x not in LEVELS]
        if bad:
            raise ValueError(f"unknown level {', '.join(bad)}; use one of {', '.join(LEVELS)}")
        if fmt not in _FORMATS:
            raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(_FORMATS)}")
        summary = publish_risk(duckdb, as_of=when, tariffs_path=tariffs)
        rows = at_risk(summary.duckdb_path, levels or None)
    except (ValueError, TariffError, ConfigError, WarehouseError) as exc:
        fail(str(exc))
    out = rows.select(_SHOW).with_columns(pl.col("blocking_holds").list.join(", "))
    if fmt == "csv":
        sys.stdout.write(out.write_csv())
    elif fmt == "json":
        sys.stdout.write(out.write_json() + "\n")
    else:
        _print_table(out, summary)


def _print_table(out: pl.DataFrame, s: RiskSummary) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"At-risk containers as of {s.as_of:%Y-%m-%d %H:%M} UTC")
    for name in (
        "level",
        "container",
        "LFD",
        "days",
        "wd",
        "ready",
        "holds",
        "projected",
        "terminal",
        "reason",
    ):
        table.add_column(name)
    for r in out.iter_rows(named=True):
        cells = (
            r["risk_level"],
            r["container_number"] or "",
            f"{r['lfd_date'] or ''} {r['lfd_source'] or ''}",
            str(r["days_to_lfd"]),
            str(r["working_days_to_lfd"]),
            "yes" if r["ready_for_pickup"] else "no",
            r["blocking_holds"] or "",
            "uncosted" if r["projected_demurrage"] is None else f"{r['projected_demurrage']:,.0f}",
            r["pod_terminal_name"] or "",
            r["risk_reason"] or "",
        )
        table.add_row(*(Text(c) for c in cells))  # API text is never read as markup
    console = Console()
    console.print(table)
    console.print(
        f"{s.rows} containers; "
        + ", ".join(f"{k} {v}" for k, v in s.levels.items() if v)
        + f"; accrued {s.accrued_demurrage:,.0f}, projected {s.projected_demurrage:,.0f}, "
        f"uncosted {s.uncosted}"
    )
