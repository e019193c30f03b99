"""A guided tour of the freetime warehouse, with example SQL for common questions. Open with

    uv run marimo edit notebooks/explore.py

The warehouse is env FREETIME_WAREHOUSE (a DuckDB file or a PostgreSQL URL), else
FREETIME_DUCKDB or data/freetime.duckdb. Every query opens a brief read-only connection and
closes it, so loads are never blocked for long. The SQL runs unchanged on DuckDB and PostgreSQL.
"""

import marimo

__generated_with = "0.25.2"
app = marimo.App(width="full", app_title="Explore the freetime warehouse")


@app.cell
def _():
    import altair as alt
    import marimo as mo
    import polars as pl

    from pipelines.config import resolve_warehouse
    from pipelines.report import data as rdata
    from pipelines.warehouse import WarehouseLocked, WarehouseMissing

    return (
        WarehouseLocked,
        WarehouseMissing,
        alt,
        mo,
        pl,
        rdata,
        resolve_warehouse,
    )


@app.cell
def _(WarehouseLocked, WarehouseMissing, mo, pl, rdata, resolve_warehouse):
    _warehouse = resolve_warehouse()  # FREETIME_WAREHOUSE: a DuckDB file or a PostgreSQL URL
    duckdb_path = _warehouse.path  # None on PostgreSQL: every query resolves the setting
    try:
        # brief read-only queries: list the tables and count their rows
        _tables = rdata.query(
            duckdb_path,
            "SELECT table_schema, table_name, table_type FROM information_schema.tables "
            "WHERE table_schema IN ('terminal49', 'analytics') "
            "AND table_name NOT LIKE '\\_dlt%' ESCAPE '\\' ORDER BY 1, 2",
        ).rows()
        table_overview = pl.DataFrame(
            [
                {
                    "schema": _s, "table": _t, "kind": _k.lower(),
                    "rows": rdata.query(duckdb_path, f'SELECT count(*) FROM {_s}."{_t}"').item(),
                }
                for _s, _t, _k in _tables
            ],
            schema={"schema": pl.String, "table": pl.String, "kind": pl.String,
                    "rows": pl.Int64},
        )
    except (WarehouseMissing, WarehouseLocked) as _exc:
        mo.stop(True, mo.callout(mo.md(f"**Cannot open the warehouse.** {_exc}"), kind="danger"))
    mo.vstack([
        mo.md(
            f"""
            # A tour of the freetime warehouse

            Warehouse `{_warehouse.display}` (set `FREETIME_WAREHOUSE` to use another). Two
            schemas:

            - **`terminal49`**: what the API said, one table per entity, merged on every load:
              `containers` (one row per box: milestones, LFDs, availability, appointment),
              `shipments` (bill of lading, carrier, ports, vessel, ETAs, customer),
              `container_holds` and `container_fees` (the terminal's holds and fees, one row
              per hold or fee line), `terminals` and `ports` (names, codes, time zones).
              Instants are UTC; an LFD is local midnight encoded in UTC.
            - **`analytics`**: what `freetime risk` computed: `demurrage_risk` (one row per
              container: binding LFD, days to it, holds, readiness, costs, risk level and
              reason) and the views `at_risk_containers`, `exposure_by_terminal`,
              `exposure_by_carrier`, `lfd_calendar`, `containers_wide` (vendor-style wide
              rows). The rules are in docs/risk-rules.md.
            """
        ),
        mo.ui.table(table_overview, selection=None, show_download=False),
    ])
    return duckdb_path, table_overview


@app.cell
def _(mo, table_overview):
    _choices = [f"{r['schema']}.{r['table']}" for r in table_overview.iter_rows(named=True)]
    table_picker = mo.ui.dropdown(
        _choices,
        value="terminal49.containers" if "terminal49.containers" in _choices else
        (_choices[0] if _choices else None),
        label="Look at a table",
    )
    table_picker
    return (table_picker,)


@app.cell
def _(duckdb_path, mo, rdata, table_picker):
    mo.stop(table_picker.value is None, mo.md("_The warehouse has no tables yet._"))
    _schema, _table = table_picker.value.split(".", 1)
    table_columns = rdata.query(
        duckdb_path,
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position",
        [_schema, _table],
    )
    table_sample = rdata.query(duckdb_path, f'SELECT * FROM {_schema}."{_table}" LIMIT 10')
    mo.vstack([
        mo.md(f"### `{table_picker.value}`: {table_columns.height} columns, first 10 rows"),
        mo.hstack([
            mo.ui.table(table_columns, selection=None, page_size=12, show_download=False),
            mo.ui.table(table_sample, selection=None, show_download=False),
        ], widths=[1, 3]),
    ])
    return


@app.cell
def _(mo):
    mo.md("""
    ## Questions analysts ask, in SQL

    Each query below runs on the warehouse as you open the notebook. Copy them into the
    scratch pad at the end (or the DuckDB CLI: `duckdb -readonly data/freetime.duckdb`).
    "This week" and "today" are the risk run's local date (`today_local`), so the answers
    match the published as-of, not the wall clock.
    """)
    return


@app.cell
def _():
    QUESTIONS = {
        "Which containers at Fenix have a customs hold and an LFD this week?": """
    SELECT r.container_number, r.lfd_date, r.lfd_source, r.days_to_lfd,
           h.status AS customs_hold, h.description, r.ready_for_pickup, r.risk_reason
    FROM analytics.demurrage_risk r
    JOIN terminal49.container_holds h
      ON h.container_id = r.container_id AND lower(h.name) = 'customs' AND h.status = 'hold'
    WHERE r.pod_terminal_name ILIKE '%fenix%'
      AND r.lfd_date BETWEEN r.today_local AND r.today_local + 6   -- the next 7 days
    ORDER BY r.lfd_date, r.container_number""",
        "What must move today, most urgent first?": """
    SELECT urgency_rank, container_number, risk_level, lfd_date, days_to_lfd,
           pod_terminal_name, projected_demurrage, risk_reason
    FROM analytics.at_risk_containers
    ORDER BY urgency_rank
    LIMIT 25""",
        "Ready for pickup, no appointment, LFD within 3 days: who needs a trucker?": """
    SELECT container_number, lfd_date, days_to_lfd, pod_terminal_name, customer_name
    FROM analytics.demurrage_risk
    WHERE ready_for_pickup AND pickup_appointment_at IS NULL AND days_to_lfd BETWEEN 0 AND 3
    ORDER BY days_to_lfd, container_number""",
        "Which terminals cost us the most (accrued and projected demurrage)?": """
    SELECT pod_terminal_name, port_of_discharge_locode, containers, overdue,
           accrued_demurrage, projected_demurrage, uncosted
    FROM analytics.exposure_by_terminal
    ORDER BY projected_demurrage DESC NULLS LAST
    LIMIT 10""",
        "Discharged but no LFD from anyone: which terminals should we chase?": """
    SELECT pod_terminal_name, count(*) AS containers_without_lfd,
           max(dwell_days) AS longest_dwell_days
    FROM analytics.demurrage_risk
    WHERE risk_level = 'unknown'
    GROUP BY pod_terminal_name ORDER BY containers_without_lfd DESC""",
        "Which carriers slip their ETAs the most?": """
    SELECT shipping_line_scac, count(*) AS containers,
           round(avg(eta_slip_days) * 10) / 10 AS avg_slip_days,
           round(percentile_cont(0.9) WITHIN GROUP (ORDER BY eta_slip_days) * 10) / 10
             AS p90_slip_days
    FROM analytics.demurrage_risk
    WHERE eta_slip_days IS NOT NULL
    GROUP BY shipping_line_scac ORDER BY avg_slip_days DESC""",
        "Where do the line, terminal and rail LFDs disagree?": """
    SELECT container_number, lfd_line, lfd_terminal, lfd_rail, lfd_disagreement_days, lfd_source
    FROM analytics.demurrage_risk
    WHERE lfd_disagreement_days > 0
    ORDER BY lfd_disagreement_days DESC""",
        "Does the terminal's demurrage fee match our tariff?": """
    SELECT container_number, pod_terminal_name, demurrage_fee_reported, accrued_demurrage,
           demurrage_fee_reported - accrued_demurrage AS difference
    FROM analytics.demurrage_risk
    WHERE demurrage_fee_reported > 0 OR accrued_demurrage > 0
    ORDER BY abs(coalesce(demurrage_fee_reported, 0) - coalesce(accrued_demurrage, 0)) DESC
    LIMIT 20""",
        "Which vessels arrive in the next 7 days, with how many of our boxes?": """
    SELECT s.pod_vessel_name, s.pod_voyage_number, s.port_of_discharge_locode,
           min(s.pod_eta_at) AS eta_utc, count(c.id) AS containers
    FROM terminal49.shipments s
    JOIN terminal49.containers c ON c.shipment_id = s.id
    WHERE s.pod_ata_at IS NULL
      AND s.pod_eta_at BETWEEN (SELECT max(as_of) FROM analytics.demurrage_risk)
                           AND (SELECT max(as_of) FROM analytics.demurrage_risk) + INTERVAL '7 days'
    GROUP BY s.pod_vessel_name, s.pod_voyage_number, s.port_of_discharge_locode
    ORDER BY eta_utc""",
        "What changed since the previous run: newly overdue": """
    SELECT c.container_number, c.lfd_date, c.pod_terminal_name, p.risk_level AS was
    FROM analytics.demurrage_risk c
    LEFT JOIN analytics.demurrage_risk_previous p USING (container_id)
    WHERE c.risk_level = 'overdue' AND p.risk_level IS DISTINCT FROM 'overdue'
    ORDER BY c.lfd_date""",
    }
    return (QUESTIONS,)


@app.cell
def _(QUESTIONS, duckdb_path, mo, rdata, table_overview):
    _have = {f"{r['schema']}.{r['table']}" for r in table_overview.iter_rows(named=True)}
    answers = {}
    _blocks = []
    for _title, _sql in QUESTIONS.items():
        if "analytics.demurrage_risk_previous" in _sql and (
            "analytics.demurrage_risk_previous" not in _have
        ):
            _body = mo.md("_Needs two risk runs (`analytics.demurrage_risk_previous`): run "
                          "`freetime risk` again later._")
        elif "analytics." in _sql and "analytics.demurrage_risk" not in _have:
            _body = mo.md("_Needs a risk run: `freetime risk`._")
        else:
            answers[_title] = rdata.query(duckdb_path, _sql)
            _body = mo.ui.table(answers[_title], selection=None, page_size=10,
                                show_download=False)
        _blocks.append(mo.vstack([
            mo.md(f"### {_title}\n```sql{_sql}\n```"),
            _body,
        ]))
    mo.vstack(_blocks)
    return (answers,)


@app.cell
def _(alt, answers, mo):
    _slip = answers.get("Which carriers slip their ETAs the most?")
    mo.stop(_slip is None or _slip.height == 0)
    (
        alt.Chart(_slip.to_dicts(), width=520, height=24 * _slip.height)
        .mark_bar(color="#5c6bc0")
        .encode(
            x=alt.X("avg_slip_days:Q", title="Average ETA slip (days; positive = late)"),
            y=alt.Y("shipping_line_scac:N", title="Carrier (SCAC)", sort="-x"),
            tooltip=[alt.Tooltip("shipping_line_scac:N", title="Carrier"),
                     alt.Tooltip("containers:Q", title="Containers"),
                     alt.Tooltip("avg_slip_days:Q", title="Average slip (days)"),
                     alt.Tooltip("p90_slip_days:Q", title="90th percentile (days)")],
        )
        .properties(title="ETA slip by carrier: the answer above as a chart (days)")
    )
    return


@app.cell
def _(mo):
    scratch = mo.ui.code_editor(
        value="SELECT risk_level, count(*) AS containers\n"
              "FROM analytics.demurrage_risk\nGROUP BY risk_level ORDER BY containers DESC",
        language="sql",
        label="Scratch pad: any read-only SQL (the connection is read-only)",
        min_height=100,
    )
    scratch
    return (scratch,)


@app.cell
def _(duckdb_path, mo, rdata, scratch):
    try:
        scratch_result = rdata.query(duckdb_path, scratch.value)
        _out = mo.ui.table(scratch_result, selection=None, page_size=15)
    except Exception as _exc:  # the SQL error of either warehouse (DuckDB's or ADBC's)
        scratch_result = None
        _out = mo.callout(mo.md(f"**Query failed:** `{_exc}`"), kind="warn")
    _out
    return


if __name__ == "__main__":
    app.run()
