"""Demurrage risk: what must move, what it costs, and why. Open with

    uv run marimo edit notebooks/demurrage_risk.py

The warehouse is env FREETIME_WAREHOUSE (a DuckDB file or a PostgreSQL URL), else FREETIME_DUCKDB
or data/freetime.duckdb. Every read is a brief read-only
connection (closed before anything is drawn), so a load can run while this notebook is open.
"""

import marimo

__generated_with = "0.25.2"
app = marimo.App(width="full", app_title="Demurrage risk")


@app.cell
def _():
    from datetime import UTC, datetime

    import marimo as mo
    import polars as pl

    from pipelines.config import resolve_warehouse
    from pipelines.report import charts
    from pipelines.report import data as rdata
    from pipelines.warehouse import WarehouseLocked, WarehouseMissing

    return (
        UTC, WarehouseLocked, WarehouseMissing, charts, datetime, mo, pl, resolve_warehouse,
        rdata,
    )


@app.cell
def _(WarehouseLocked, WarehouseMissing, datetime, UTC, mo, rdata, resolve_warehouse):
    _warehouse = resolve_warehouse()  # FREETIME_WAREHOUSE: a DuckDB file or a PostgreSQL URL
    duckdb_path = _warehouse.path  # None on PostgreSQL: every read resolves the setting
    try:
        published_at = rdata.published_as_of(duckdb_path)
    except (WarehouseMissing, WarehouseLocked) as _exc:
        mo.stop(True, mo.callout(mo.md(f"**Cannot open the warehouse.** {_exc}"), kind="danger"))
    mo.md(
        f"""
        # Demurrage risk

        Warehouse `{_warehouse.display}` (set `FREETIME_WAREHOUSE` to use another).
        Published risk run: **{published_at:%Y-%m-%d %H:%M} UTC**.
        """
        if published_at
        else f"""
        # Demurrage risk

        Warehouse `{_warehouse.display}`: no published risk run yet (`freetime risk` writes one);
        the risk below is computed in memory.
        """
    )
    default_as_of = (published_at or datetime.now(UTC)).replace(tzinfo=None, second=0,
                                                                  microsecond=0)
    return default_as_of, duckdb_path, published_at


@app.cell
def _(default_as_of, mo, published_at):
    reload_button = mo.ui.button(label="Reload from the warehouse", value=0,
                                 on_click=lambda n: n + 1)
    recompute = mo.ui.switch(value=published_at is None,
                             label="Recompute at the as-of below (in memory; nothing is written)")
    as_of_picker = mo.ui.datetime(value=default_as_of, label="As of (UTC)")
    mo.hstack([as_of_picker, recompute, reload_button], justify="start", gap=2)
    return as_of_picker, recompute, reload_button


@app.cell
def _(UTC, WarehouseLocked, WarehouseMissing, as_of_picker, duckdb_path, mo, rdata, recompute,
      reload_button):
    reload_button.value  # re-read when the button is clicked
    _when = as_of_picker.value if recompute.value else None
    if _when is not None and _when.tzinfo is None:
        _when = _when.replace(tzinfo=UTC)
    try:
        risk_data = rdata.load_risk(duckdb_path, as_of=_when)
    except (WarehouseMissing, WarehouseLocked) as _exc:
        mo.stop(True, mo.callout(mo.md(f"**Cannot read the risk.** {_exc}"), kind="danger"))
    mo.md(
        f"Showing risk as of **{risk_data.as_of:%Y-%m-%d %H:%M} UTC** "
        f"({'published run' if risk_data.source == 'published' else 'computed in memory'}); "
        f"local date at the ports **{risk_data.today:%a %Y-%m-%d}**; "
        f"{risk_data.risk.height:,} containers."
    )
    return (risk_data,)


@app.cell
def _(mo, rdata, risk_data):
    _r = risk_data.risk
    port_filter = mo.ui.multiselect(rdata.options(_r, "port_of_discharge_locode"),
                                    label="Port of discharge")
    terminal_filter = mo.ui.multiselect(rdata.options(_r, "pod_terminal_name"), label="Terminal")
    carrier_filter = mo.ui.multiselect(rdata.options(_r, "shipping_line_scac"), label="Carrier")
    customer_filter = mo.ui.multiselect(rdata.options(_r, "customer_name"), label="Customer")
    mo.vstack([
        mo.md("### Filters (empty = all)"),
        mo.hstack([port_filter, terminal_filter, carrier_filter, customer_filter],
                  justify="start", wrap=True),
    ])
    return carrier_filter, customer_filter, port_filter, terminal_filter


@app.cell
def _(carrier_filter, customer_filter, port_filter, risk_data, terminal_filter):
    view = risk_data.filtered(
        ports=port_filter.value, terminals=terminal_filter.value,
        carriers=carrier_filter.value, customers=customer_filter.value,
    )
    return (view,)


@app.cell
def _(mo, rdata, view):
    _s = rdata.summary(view.risk)
    _cur = view.currency
    mo.hstack([
        mo.stat(f"{_s['active']:,}", label="Active containers"),
        mo.stat(f"{_s['overdue']:,}", label="Overdue", direction="increase"),
        mo.stat(f"{_s['due_today']:,}", label="Due today"),
        mo.stat(f"{_s['imminent']:,}", label="Imminent (1-3 days)"),
        mo.stat(f"{_s['unknown']:,}", label="No LFD after discharge"),
        mo.stat(f"{_s['accrued_demurrage']:,.0f} {_cur}", label="Accrued demurrage"),
        mo.stat(f"{_s['projected_demurrage']:,.0f} {_cur}", label="Projected demurrage",
                caption="a floor: earliest plausible pickup"),
        mo.stat(f"{_s['uncosted']:,}", label="Uncosted (no tariff or LFD)"),
    ], justify="start", wrap=True)
    return


@app.cell
def _(mo, rdata, view):
    at_risk_rows = rdata.at_risk_table(view.risk)
    mo.vstack([
        mo.md(f"## At-risk containers ({at_risk_rows.height}): overdue, due today, 1-3 days\n"
              "Most urgent first; `risk_reason` says why (LFD, holds, availability, "
              "appointment)."),
        mo.ui.table(at_risk_rows, page_size=20, selection=None,
                    freeze_columns_left=["risk_level", "container_number"]),
    ])
    return (at_risk_rows,)


@app.cell
def _(charts, mo, view):
    mo.vstack([
        mo.md("## Exposure"),
        mo.hstack([
            charts.exposure_by_terminal_chart(view.risk, view.currency),
            charts.exposure_by_carrier_chart(view.risk, view.currency),
        ], wrap=True, justify="start"),
        charts.risk_levels_chart(view.risk),
    ])
    return


@app.cell
def _(charts, mo, rdata, view):
    mo.vstack([
        mo.md("## LFD calendar (next 14 days)"),
        charts.lfd_calendar_chart(view.risk, view.today, view.currency),
        mo.ui.table(rdata.lfd_calendar(view.risk, view.today), selection=None,
                    show_download=False),
    ])
    return


@app.cell
def _(charts, mo, pl, view):
    _on_hold = (
        view.risk.filter(pl.col("risk_level") != "done")
        .filter((pl.col("blocking_holds").list.len() > 0) | (pl.col("pending_holds").list.len() > 0))
        .select("container_number", "risk_level", "lfd_date", "pod_terminal_name",
                pl.col("blocking_holds").list.join(", "), pl.col("pending_holds").list.join(", "),
                "risk_reason")
        .sort("lfd_date", nulls_last=True)
    )
    mo.vstack([
        mo.md("## Holds"),
        charts.holds_chart(view.risk),
        mo.ui.table(_on_hold, page_size=10, selection=None),
    ])
    return


@app.cell
def _(charts, mo, view):
    mo.vstack([
        mo.md("## Dwell and ETA slip"),
        mo.hstack([charts.dwell_chart(view.risk), charts.eta_slip_chart(view.risk)],
                  wrap=True, justify="start"),
    ])
    return


if __name__ == "__main__":
    app.run()
