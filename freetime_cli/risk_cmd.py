"""`freetime risk`: recompute demurrage risk, publish it, print the at-risk containers."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from freetime_cli._common import (
    CarrierOption,
    DuckDbOption,
    LimitOption,
    PortOption,
    TerminalOption,
    WaitOption,
    WarehouseOption,
    WideOption,
    console,
    fail,
    parse_as_of,
    table_console,
    warehouse_given,
)
from freetime_cli.atrisk_table import Filters, parse_limit, print_at_risk

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
    warehouse: WarehouseOption = None,
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
    limit: Annotated[str | None, LimitOption] = None,
    port: Annotated[str | None, PortOption] = None,
    terminal: Annotated[str | None, TerminalOption] = None,
    carrier: Annotated[str | None, CarrierOption] = None,
    wide: Annotated[bool, WideOption] = False,
    wait: Annotated[float | None, WaitOption] = None,
) -> None:
    """Recompute demurrage risk and print the at-risk containers, most urgent first."""
    from pipelines.config import ConfigError, resolve_writer_wait
    from pipelines.warehouse import WarehouseError, existing_warehouse

    try:
        when = parse_as_of(as_of)
        levels = [x.strip() for lv in (level or []) for x in lv.split(",") if x.strip()]
        if fmt not in _FORMATS:
            raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(_FORMATS)}")
        n = parse_limit(limit)
        filters = Filters.parse(port, terminal, carrier)
        target = warehouse_given(duckdb, warehouse)
        wait_seconds = resolve_writer_wait(wait)
        existing_warehouse(target)  # before the tariffs: a missing file is the first thing to fix
    except (ValueError, ConfigError, WarehouseError) as exc:
        fail(str(exc))
    # polars and the risk engine once the cheap checks pass (the levels are the engine's)
    import polars as pl

    from flows.artifacts import at_risk_rows
    from pipelines.analytics import LEVELS, TariffError, at_risk, publish_risk

    try:
        bad = [x for x in levels if x not in LEVELS]
        if bad:
            raise ValueError(f"unknown level {', '.join(bad)}; use one of {', '.join(LEVELS)}")
        summary = publish_risk(
            target,
            as_of=when,
            tariffs_path=tariffs,
            wait_seconds=wait_seconds,
            on_wait=lambda line: console.print(line, highlight=False),
        )
        rows = at_risk(target, levels or None)
    except (ValueError, TariffError, ConfigError, WarehouseError) as exc:
        fail(str(exc))
    every = at_risk_rows(rows.to_dicts())
    shown = filters.apply(every)
    if fmt != "table":
        out = rows.filter(pl.Series([filters.matches(r) for r in every], dtype=pl.Boolean))
        out = out.head(n) if n else out
        out = out.select(_SHOW).with_columns(pl.col("blocking_holds").list.join(", "))
        sys.stdout.write(out.write_csv() if fmt == "csv" else out.write_json() + "\n")
        return
    con = table_console()
    which = "At-risk" if not levels else "/".join(levels)
    title = f"{which} containers as of {summary.as_of:%Y-%m-%d %H:%M} UTC: {len(shown)}"
    if filters:
        title += f" ({filters.describe()})"
    if shown:
        print_at_risk(con, shown, title=title, limit=n, wide=wide)
    else:
        con.print(f"No container: {title}.", highlight=False, soft_wrap=True)
