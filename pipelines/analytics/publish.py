"""Read the ``terminal49`` warehouse, publish ``analytics.demurrage_risk``, the charge engine's
tables and their views.

Every connection goes through :mod:`pipelines.warehouse` (lock-aware, short-lived). Publishing
replaces the risk table and the engine's ``analytics.charges`` and ``analytics.charge_days``
(:mod:`pipelines.analytics.charges`, computed from the same clock at the same instant) in one
transaction, copying the old risk table to ``analytics.demurrage_risk_previous`` first, so
readers never see a half table or a risk table and charges of two runs, and
:func:`pipelines.analytics.risk_changes` can compare runs from the warehouse alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl

from pipelines.analytics.charges import DAYS_TABLE, PARTIES_TABLE, compute_charges
from pipelines.analytics.risk import (
    AT_RISK_LEVELS,
    AT_RISK_SQL,
    LEVELS,
    LFD_COLUMNS,
    SCHEMAS,
    UnconvertedLfds,
    WarehouseFrames,
    clock,
    conform,
    risk_of,
    unconverted_lfds_message,
)
from pipelines.analytics.tariffs import load_tariffs
from pipelines.config import ANALYTICS_SCHEMA as A
from pipelines.config import DATASET as T
from pipelines.config import resolve_duckdb_path, resolve_warehouse
from pipelines.dialect import DUCKDB, Dialect
from pipelines.history import record_binding
from pipelines.history.views import create_views as create_history_views
from pipelines.publish.lock import FileWriterLock
from pipelines.warehouse import WarehouseError, WarehouseMissing, reading, writing

URGENCY_ORDER = (
    "ORDER BY CASE risk_level "
    + " ".join(f"WHEN '{lv}' THEN {i}" for i, lv in enumerate(LEVELS))
    + " END, days_to_lfd NULLS LAST, ready_for_pickup DESC, projected_demurrage DESC NULLS LAST,"
    " container_number"
)


@dataclass
class RiskSummary:
    """What a publish did: rows, counts per level, exposure totals (costed rows only), timing."""

    duckdb_path: str
    as_of: datetime
    rows: int
    seconds: float
    levels: dict[str, int] = field(default_factory=dict)
    accrued_demurrage: float = 0.0
    projected_demurrage: float = 0.0
    projected_detention: float = 0.0
    uncosted: int = 0
    #: containers recomputed by a partial run (:func:`publish_risk_of`); None: a full run
    recomputed: int | None = None


class WarehouseIncompatible(WarehouseError):
    """A ``terminal49`` table lacks a column the risk needs, or holds one of another type."""


def _types(con: duckdb.DuckDBPyConnection, schema: str) -> dict[str, dict[str, str]]:
    """``{table: {column: DuckDB type}}`` of ``schema``."""
    rows = con.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = ?",
        [schema],
    ).fetchall()
    out: dict[str, dict[str, str]] = {}
    for t, c, typ in rows:
        out.setdefault(t, {})[c] = typ
    return out


def _columns(con: duckdb.DuckDBPyConnection, schema: str) -> dict[str, set[str]]:
    return {t: set(cols) for t, cols in _types(con, schema).items()}


#: Columns without which a table's rows cannot be told apart.
REQUIRED = {"containers": ("id",)}
_TS_TYPES = ("TIMESTAMP WITH TIME ZONE", "TIMESTAMP")


def check_types(table: str, types: dict[str, str]) -> None:
    """Raise :class:`WarehouseIncompatible` naming each missing required column and each column
    whose type compute_risk cannot read (an instant that is not a timestamp, a number or flag
    that is text...)."""
    instants = [c for c in LFD_COLUMNS if types.get(c) in _TS_TYPES]
    if table == "containers" and instants:
        raise WarehouseIncompatible(unconverted_lfds_message(f"{T}.{table}", instants))
    problems = [f"no column {c}" for c in REQUIRED.get(table, ()) if c not in types]
    for name, dtype in SCHEMAS[table].items():
        typ = types.get(name)
        if typ is None:
            continue
        if dtype == pl.Datetime("us", "UTC"):
            ok, want = typ in _TS_TYPES, "TIMESTAMPTZ"
        elif dtype == pl.Date:
            ok, want = typ == "DATE", "DATE"
        elif dtype == pl.Boolean:
            ok, want = typ == "BOOLEAN", "BOOLEAN"
        elif dtype in (pl.Int64, pl.Float64):
            ok = typ in (
                "BIGINT",
                "INTEGER",
                "SMALLINT",
                "TINYINT",
                "HUGEINT",
                "DOUBLE",
                "FLOAT",
                "REAL",
            ) or typ.startswith("DECIMAL")
            want = "a number"
        else:
            ok, want = True, ""
        if not ok:
            problems.append(f"column {name} is {typ}, expected {want}")
    if problems:
        raise WarehouseIncompatible(
            f"{T}.{table} cannot be read for risk: {'; '.join(problems)} "
            "(reload it with `freetime load`)"
        )


#: How each table's rows are narrowed to some containers (``?``: the list of container ids).
_ONLY = {
    "containers": "id IN (SELECT unnest(?))",
    "container_holds": "container_id IN (SELECT unnest(?))",
    "container_fees": "container_id IN (SELECT unnest(?))",
    "shipments": f"id IN (SELECT shipment_id FROM {T}.containers WHERE id IN (SELECT unnest(?)))",
}


def read_warehouse(
    con: duckdb.DuckDBPyConnection, containers: Sequence[str] | None = None
) -> WarehouseFrames:
    """The ``terminal49`` tables compute_risk needs, as conformed LazyFrames (UTC instants);
    with ``containers`` (ids), only their rows and those of their shipments.

    Only the needed columns are read; missing tables or optional columns become typed NULLs.
    Raises :class:`WarehouseIncompatible` when a table lacks a required column or holds one
    of a type compute_risk cannot read (LFDs still held as instants included).
    """
    if con.execute("SELECT current_setting('TimeZone')").fetchone() != ("UTC",):
        con.execute("SET TimeZone = 'UTC'")

    def fetch(table: str, sql: str) -> pl.DataFrame:
        if containers is not None and table in _ONLY:
            relation = con.sql(f"{sql} WHERE {_ONLY[table]}", params=[list(containers)])
        else:
            relation = con.sql(sql)
        frame: pl.DataFrame = relation.pl()
        return frame

    return read_frames(_types(con, T), fetch)


def read_frames(
    have: Mapping[str, Mapping[str, str]], fetch: Callable[[str, str], pl.DataFrame]
) -> WarehouseFrames:
    """compute_risk's inputs from a warehouse whose ``terminal49`` column types (DuckDB names)
    are ``have``, on any warehouse: the types are checked (:func:`check_types`), only the
    needed columns are read (``fetch(table, sql)`` runs ``sql``, their SELECT, and may narrow
    it), and missing tables or columns become typed NULLs."""
    frames: dict[str, pl.LazyFrame] = {}
    for table, schema in SCHEMAS.items():
        if table in have:
            check_types(table, dict(have[table]))
        cols = [c for c in schema if c in have.get(table, {})]
        if not cols:
            frames[table] = conform(None, table)
            continue
        sel = ", ".join(f'"{c}"' for c in cols)
        frames[table] = conform(fetch(table, f'SELECT {sel} FROM {T}."{table}"').lazy(), table)
    return WarehouseFrames(**frames)


#: Columns the terminal and carrier exposure views group by.
TERMINAL_KEYS = ("port_of_discharge_locode", "pod_terminal_name", "pod_terminal_firms_code")
CARRIER_KEYS = ("shipping_line_scac",)
#: Days the LFD calendar covers, today first.
CALENDAR_DAYS = 14


def exposure_sql(source: str, keys: Sequence[str]) -> str:
    """Counts by level, accrued and projected cost and uncosted boxes of the active containers
    of ``source`` (a relation with ``demurrage_risk``'s columns), grouped by ``keys``.

    The SQL of the ``exposure_by_*`` views; the report runs it over recomputed frames too.
    """
    active = "risk_level <> 'done'"
    return f"""
        SELECT {", ".join(keys)},
            count(*) FILTER (WHERE {active}) AS containers,
            count(*) FILTER (WHERE risk_level = 'overdue') AS overdue,
            count(*) FILTER (WHERE risk_level = 'due_today') AS due_today,
            count(*) FILTER (WHERE risk_level = 'imminent') AS imminent,
            count(*) FILTER (WHERE risk_level = 'unknown') AS unknown,
            coalesce(sum(accrued_demurrage) FILTER (WHERE {active}), 0) AS accrued_demurrage,
            coalesce(sum(projected_demurrage) FILTER (WHERE {active}), 0) AS projected_demurrage,
            coalesce(sum(projected_detention), 0) AS projected_detention,
            count(*) FILTER (WHERE {active} AND NOT costed) AS uncosted
        FROM {source} GROUP BY {", ".join(keys)}
        ORDER BY overdue DESC, projected_demurrage DESC"""


def lfd_calendar_sql(source: str, first_day: str | None = None, days: int = CALENDAR_DAYS) -> str:
    """Active boxes of ``source`` whose binding LFD falls on each of ``days`` days.

    ``first_day`` is a SQL date expression; by default the earliest ``today_local`` of the
    rows (the UTC date of ``as_of`` when no row has one). The SQL of ``analytics.lfd_calendar``.
    """
    base = (
        f"SELECT {first_day} AS d0"
        if first_day
        else f"SELECT coalesce(min(today_local), min(CAST(as_of AS DATE))) AS d0 FROM {source}"
    )
    return f"""
        WITH base AS ({base}),
        days AS (SELECT CAST(d0 + CAST(i AS INTEGER) AS DATE) AS lfd_date
                 FROM base, generate_series(0, {int(days) - 1}) t(i) WHERE d0 IS NOT NULL)
        SELECT days.lfd_date,
            count(r.container_id) AS boxes,
            count(r.container_id) FILTER (WHERE r.ready_for_pickup) AS ready,
            count(r.container_id) FILTER (WHERE cardinality(r.blocking_holds) > 0) AS on_hold,
            count(r.container_id) FILTER (WHERE r.pickup_appointment_at IS NOT NULL)
                AS with_appointment,
            coalesce(sum(r.projected_demurrage), 0) AS projected_demurrage,
            count(r.container_id) FILTER (WHERE NOT r.costed) AS uncosted
        FROM days LEFT JOIN {source} r
            ON r.lfd_date = days.lfd_date AND r.risk_level <> 'done'
        GROUP BY days.lfd_date ORDER BY days.lfd_date"""


def view_selects(
    types: Mapping[str, Mapping[str, str]], d: Dialect = DUCKDB
) -> list[tuple[str, str]]:
    """``(qualified name, SELECT)`` of the analytics views in dialect ``d``, for a warehouse
    whose ``terminal49`` column types are ``types``; ``containers_wide`` adapts to the
    columns dlt actually created."""
    risk = f"{A}.demurrage_risk"
    return [
        (
            f"{A}.at_risk_containers",
            f"""SELECT row_number() OVER ({URGENCY_ORDER}) AS urgency_rank, *
        FROM {risk}
        WHERE risk_level IN ({AT_RISK_SQL}) {URGENCY_ORDER}""",
        ),
        (f"{A}.exposure_by_terminal", exposure_sql(risk, TERMINAL_KEYS)),
        (f"{A}.exposure_by_carrier", exposure_sql(risk, CARRIER_KEYS)),
        (f"{A}.lfd_calendar", lfd_calendar_sql(risk)),
        (f"{A}.containers_wide", _containers_wide_sql(types, d)),
    ]


def _containers_wide_sql(types: Mapping[str, Mapping[str, str]], d: Dialect) -> str:
    """One row per container with the vendor's DataSync column names (containers_rail).

    The ``*_last_free_day_on`` columns are the LFD columns (local DATEs); their ``_local`` twins
    are the risk table's dates as text.
    """
    have = {t: set(cols) for t, cols in types.items()}

    def c(alias: str, table: str, name: str, typ: str = "VARCHAR") -> str:
        return f'{alias}."{name}"' if name in have.get(table, set()) else f"NULL::{d.type(typ)}"

    def src(table: str, cols: dict[str, str]) -> str:
        if table in have:
            return f'{T}."{table}"'
        sel = ", ".join(f'NULL::{d.type(t)} AS "{n}"' for n, t in cols.items())
        return f"(SELECT {sel} WHERE false)"

    ts = "TIMESTAMPTZ"
    pod_tz = (
        f"coalesce({c('c', 'containers', 'pod_timezone')}, {c('s', 'shipments', 'pod_timezone')})"
    )
    ind_tz = (
        f"coalesce({c('c', 'containers', 'final_destination_timezone')}, "
        f"{c('s', 'shipments', 'destination_timezone')})"
    )
    pol_tz = c("s", "shipments", "pol_timezone")
    empty_tz = c("c", "containers", "empty_terminated_timezone")
    cols: list[str] = []

    def text(out: str, expr: str) -> None:
        cols.append(f"{expr} AS {out}")

    def at(out: str, expr: str, tz: str) -> None:
        cols.append(f"{expr} AS {out}")
        cols.append(f"{d.local_text(expr, tz)} AS {out}_local")

    def lfd(out: str, expr: str, local_date: str) -> None:
        cols.append(f"{expr} AS {out}")
        cols.append(f"{d.date_text(local_date)} AS {out}_local")

    def cc(name: str, sql_type: str = "VARCHAR") -> str:
        return c("c", "containers", name, sql_type)

    def sc(name: str, sql_type: str = "VARCHAR") -> str:
        return c("s", "shipments", name, sql_type)

    text("container_id", "c.id")
    text("container_number", cc("number"))
    text("shipment_id", cc("shipment_id"))
    text("shipment_bill_of_lading_number", sc("bill_of_lading_number"))
    text("shipment_normalized_number", sc("normalized_number"))
    text("shipment_reference_numbers", sc("ref_numbers"))
    text("container_reference_numbers", cc("ref_numbers"))
    text("shipment_tags", sc("tags"))
    text("customer_id", "NULL::VARCHAR")
    text("customer_name", sc("customer_name"))
    text("shipping_line_scac", sc("shipping_line_scac"))
    text("shipping_line_name", sc("shipping_line_name"))
    for pre, port, loc, tz in (
        ("pol", "pol", "port_of_lading_locode", pol_tz),
        ("pod", "pod", "port_of_discharge_locode", pod_tz),
        ("ind", "ind", "destination_locode", ind_tz),
    ):
        text(f"{pre}_country_code", c(port, "ports", "country_code"))
        text(f"{pre}_locode", sc(loc))
        text(f"{pre}_city", c(port, "ports", "city"))
        text(f"{pre}_timezone", tz)
        if pre != "pol":
            t = "pt" if pre == "pod" else "it"
            text(f"{pre}_terminal_firms_code", c(t, "terminals", "firms_code"))
            text(f"{pre}_terminal_nickname", c(t, "terminals", "nickname"))
            text(f"{pre}_terminal_name", c(t, "terminals", "name"))
    at("empty_out_at", cc("empty_out_at", ts), pol_tz)
    at("full_in_at", cc("pol_full_in_at", ts), pol_tz)
    at("pol_loaded_at", cc("pol_vessel_loaded_at", ts), pol_tz)
    at("pol_etd_at", sc("pol_etd_at", ts), pol_tz)
    at("pol_atd_at", sc("pol_atd_at", ts), pol_tz)
    at("pod_eta_at", sc("pod_eta_at", ts), pod_tz)
    at("pod_arrived_at", cc("pod_arrived_at", ts), pod_tz)
    at("pod_berthed_at", "NULL::TIMESTAMPTZ", pod_tz)
    at("pod_discharged_at", cc("pod_discharged_at", ts), pod_tz)

    def stored_lfd(names: tuple[str, ...]) -> str:
        """The first non-NULL of LFD columns ``names`` (DATEs)."""
        present = [cc(n, "DATE") for n in names if n in have.get("containers", set())]
        return f"coalesce({', '.join(present)})" if present else "NULL::DATE"

    lfd("pod_last_free_day_on", stored_lfd(("pickup_lfd_terminal",)), "r.lfd_terminal")
    lfd("ssl_last_free_day_on", stored_lfd(("pickup_lfd_line", "ssl_lfd")), "r.lfd_line")
    at("pod_pickup_appointment_at", cc("pickup_appointment_at", ts), pod_tz)
    at("pod_full_out_at", cc("pod_full_out_at", ts), pod_tz)
    text("pod_rail_carrier_scac", cc("pod_rail_carrier_scac"))
    at("pod_rail_loaded_at", cc("pod_rail_loaded_at", ts), pod_tz)
    at("pod_rail_departed_at", cc("pod_rail_departed_at", ts), pod_tz)
    text("ind_rail_carrier_scac", cc("ind_rail_carrier_scac"))
    at("ind_eta_at", cc("ind_eta_at", ts), ind_tz)
    at("ind_arrived_at", cc("ind_ata_at", ts), ind_tz)
    at("ind_rail_unloaded_at", cc("ind_rail_unloaded_at", ts), ind_tz)
    lfd(
        "ind_last_free_day_on",
        stored_lfd(("pickup_lfd_rail", "ind_facility_lfd_on")),
        "r.lfd_rail",
    )
    at("ind_full_out_at", cc("final_destination_full_out_at", ts), ind_tz)
    at("empty_terminated_at", cc("empty_terminated_at", ts), f"coalesce({empty_tz}, {pod_tz})")
    text("fees_at_pod_terminal", "f.fees_json")
    text("demurrage_at_pod_terminal", d.number_text("f.demurrage"))
    text("holds_at_pod_terminal", "h.holds_json")
    for hold in ("freight", "customs", "usda", "tmf", "other"):
        text(f"{hold}_hold_at_pod_terminal", f"h.{hold}")
    text("location_at_pod_terminal", cc("location_at_pod_terminal"))
    text("availability_known", f"CAST({cc('availability_known', 'BOOLEAN')} AS VARCHAR)")
    text("available_for_pickup", f"CAST({cc('available_for_pickup', 'BOOLEAN')} AS VARCHAR)")
    text("equipment_length", f"CAST({cc('equipment_length', 'BIGINT')} AS INTEGER)")
    text("equipment_type", cc("equipment_type"))
    text("equipment_height", cc("equipment_height"))
    text(
        "equipment",
        f"concat_ws(' ', CAST({cc('equipment_length', 'BIGINT')} AS VARCHAR) "
        f"|| '''', {cc('equipment_height')}, {cc('equipment_type')})",
    )
    text("weight_in_lbs", f"CAST(round({cc('weight_in_lbs', 'DOUBLE')}) AS INTEGER)")
    text("seal_number", cc("seal_number"))
    text("pod_full_out_chassis_number", cc("pod_full_out_chassis_number"))
    text("pod_voyage_number", sc("pod_voyage_number"))
    text("pod_vessel_name", sc("pod_vessel_name"))
    text("pod_vessel_imo", sc("pod_vessel_imo"))
    text("terminal_checked_at", cc("terminal_checked_at", ts))
    text("line_tracking_last_succeeded_at", sc("line_tracking_last_succeeded_at", ts))
    text("line_tracking_stopped_at", sc("line_tracking_stopped_at", ts))
    text("line_tracking_stopped_reason", sc("line_tracking_stopped_reason"))
    text("created_at", cc("created_at", ts))
    text("updated_at", cc("fetched_at", ts))
    holds_src = src(
        "container_holds",
        {
            "container_id": "VARCHAR",
            "name": "VARCHAR",
            "status": "VARCHAR",
            "description": "VARCHAR",
        },
    )
    fees_src = src(
        "container_fees",
        {
            "container_id": "VARCHAR",
            "type": "VARCHAR",
            "amount": "DOUBLE",
            "currency_code": "VARCHAR",
        },
    )
    desc = c("x", "container_holds", "description")
    cur = c("x", "container_fees", "currency_code")
    named = "('freight', 'customs', 'usda', 'tmf')"
    hold_pivot = ", ".join(
        f"max(x.status) FILTER (WHERE lower(x.name) = '{h}') AS {h}"
        for h in ("freight", "customs", "usda", "tmf")
    )
    empty_ids = {"id": "VARCHAR"}
    holds_json = d.json_list({"name": "x.name", "status": "x.status", "description": desc})
    fees_json = d.json_list({"type": "x.type", "amount": "x.amount", "currency_code": cur})
    return f"""
    WITH h AS (
        SELECT x.container_id, {hold_pivot},
            max(x.status) FILTER (WHERE lower(x.name) NOT IN {named}) AS other,
            {holds_json} AS holds_json
        FROM {holds_src} x GROUP BY x.container_id),
    f AS (
        SELECT x.container_id,
            {fees_json} AS fees_json,
            sum(x.amount) FILTER (WHERE x.type = 'demurrage') AS demurrage
        FROM {fees_src} x GROUP BY x.container_id)
    SELECT {", ".join(cols)}
    FROM {T}.containers c
    LEFT JOIN {src("shipments", empty_ids)} s ON s.id = {cc("shipment_id")}
    LEFT JOIN {src("terminals", empty_ids)} pt ON pt.id = {cc("pod_terminal_id")}
    LEFT JOIN {src("terminals", empty_ids)} it ON it.id = {sc("destination_terminal_id")}
    LEFT JOIN {src("ports", empty_ids)} pol ON pol.id = {sc("port_of_lading_id")}
    LEFT JOIN {src("ports", empty_ids)} pod ON pod.id = {sc("port_of_discharge_id")}
    LEFT JOIN {src("ports", empty_ids)} ind ON ind.id = {sc("destination_id")}
    LEFT JOIN h ON h.container_id = c.id
    LEFT JOIN f ON f.container_id = c.id
    LEFT JOIN {A}.demurrage_risk r ON r.container_id = c.id"""


def publish_risk(
    duckdb_path: str | Path | None,
    as_of: datetime | None = None,
    tariffs_path: str | Path | None = None,
    *,
    wait_seconds: float | None = None,
    on_wait: Callable[[str], None] | None = None,
    what: str = "risk publish",
) -> RiskSummary:
    """Recompute the risk table at ``as_of`` (default now, UTC) and publish it with its views,
    holding the warehouse's writer lock as ``what`` (it writes the warehouse like any writer;
    ``wait_seconds`` and ``on_wait`` as in :class:`pipelines.publish.lock.WriterLock`).

    Raises ``TariffError`` (bad CSV, checked before opening the warehouse), ``WarehouseMissing``
    (no file, or no ``terminal49.containers`` in it), ``WarehouseLocked`` or ``WriterBusy``.
    """
    # --- WAREHOUSE DISPATCH (issue 30): risk on PostgreSQL lives in pipelines/pg/risk.py ---
    warehouse = resolve_warehouse(duckdb_path)
    if warehouse.is_postgres:
        from pipelines.pg.risk import publish_risk as publish_risk_postgres

        return publish_risk_postgres(
            warehouse, as_of, tariffs_path, wait_seconds=wait_seconds, on_wait=on_wait, what=what
        )
    # --- end of the warehouse dispatch ---
    started = time.perf_counter()
    tariffs = load_tariffs(tariffs_path)
    as_of = _utc(as_of)
    with _risk_writer(duckdb_path, what, wait_seconds, on_wait) as (con, path):
        df = _publish_all(con, path, as_of, tariffs)
    return summarise(df, str(path), as_of, started)


#: A batch touching more than this share of the account's containers gets a full run.
FULL_SHARE = 0.2
#: A partial run leaves the other rows as they were; once the oldest row is older than this,
#: the next run is a full one, so time-dependent columns (days to the LFD, stale) never lag
#: by more.
PARTIAL_MAX_AGE = timedelta(minutes=15)


def publish_risk_of(
    duckdb_path: str | Path | None,
    containers: Iterable[str],
    shipments: Iterable[str] = (),
    as_of: datetime | None = None,
    tariffs_path: str | Path | None = None,
    *,
    full_share: float = FULL_SHARE,
    max_age: timedelta = PARTIAL_MAX_AGE,
    wait_seconds: float | None = None,
    on_wait: Callable[[str], None] | None = None,
    what: str = "risk publish (changed containers)",
) -> RiskSummary:
    """Recompute and publish the risk of ``containers`` and of the containers of ``shipments``
    only (what a batch of webhook notifications changed), at ``as_of`` (default now, UTC).

    Same engine and same publish as :func:`publish_risk`, in one transaction under the writer
    lock: the rows of those containers in ``analytics.demurrage_risk``, ``charges`` and
    ``charge_days`` are replaced (a container no longer in ``terminal49.containers`` loses its
    rows), ``demurrage_risk_previous`` becomes the table before this publish, the views are
    created again, the binding LFD's history rows and the alerts this publish raises are
    written. So the rows of those containers are what a full run at ``as_of`` gives them, and
    the other rows keep the ``as_of`` of the run that wrote them.

    A full run (:func:`publish_risk`) instead when nothing was published yet, when the
    containers are more than ``full_share`` of the account, when the oldest published row is
    older than ``max_age`` at ``as_of``, or when the published tables' columns differ from the
    engine's. ``RiskSummary.recomputed`` says which: the containers recomputed, or None after a
    full run (``rows`` and the totals then cover the recomputed rows only). Raises as
    :func:`publish_risk`.
    """
    wanted, ships = sorted(set(containers)), sorted(set(shipments))
    # --- WAREHOUSE DISPATCH (issue 30): risk on PostgreSQL lives in pipelines/pg/risk.py ---
    warehouse = resolve_warehouse(duckdb_path)
    if warehouse.is_postgres:
        from pipelines.pg.risk import publish_risk_of as publish_risk_of_postgres

        return publish_risk_of_postgres(
            warehouse,
            wanted,
            ships,
            as_of,
            tariffs_path,
            full_share=full_share,
            max_age=max_age,
            wait_seconds=wait_seconds,
            on_wait=on_wait,
            what=what,
        )
    # --- end of the warehouse dispatch ---
    started = time.perf_counter()
    tariffs = load_tariffs(tariffs_path)
    as_of = _utc(as_of)
    with _risk_writer(duckdb_path, what, wait_seconds, on_wait) as (con, path):
        ids = _affected(con, wanted, ships)
        df = None
        if _partial_fits(con, len(ids), as_of, full_share, max_age):
            df = _publish_some(con, path, as_of, tariffs, ids)
        partial = df is not None
        if df is None:
            df = _publish_all(con, path, as_of, tariffs)
    summary = summarise(df, str(path), as_of, started)
    summary.recomputed = len(ids) if partial else None
    return summary


def _utc(as_of: datetime | None) -> datetime:
    as_of = as_of or datetime.now(UTC)
    return (as_of if as_of.tzinfo else as_of.replace(tzinfo=UTC)).astimezone(UTC)


@contextmanager
def _risk_writer(
    duckdb_path: str | Path | None,
    what: str,
    wait_seconds: float | None,
    on_wait: Callable[[str], None] | None,
) -> Iterator[tuple[duckdb.DuckDBPyConnection, Path]]:
    """The warehouse file open for writing under its writer lock, checked to hold containers."""
    path = _existing(duckdb_path)
    with FileWriterLock(path).hold(what, wait_seconds, on_wait), writing(path) as con:
        _require_containers(con, path)
        yield con, path


def _existing(duckdb_path: str | Path | None) -> Path:
    path = resolve_duckdb_path(duckdb_path)
    if not path.exists():
        raise WarehouseMissing(f"no warehouse at {path}: run `freetime load` first")
    return path


def _require_containers(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    if "containers" not in _columns(con, T):
        raise WarehouseMissing(
            f"the warehouse {path} has no {T}.containers table: run `freetime load` first"
        )


def _affected(
    con: duckdb.DuckDBPyConnection, containers: Sequence[str], shipments: Sequence[str]
) -> list[str]:
    """``containers`` and the containers of ``shipments`` (ids, sorted)."""
    ids = set(containers)
    if shipments:
        rows = con.execute(
            f"SELECT id FROM {T}.containers WHERE shipment_id IN (SELECT unnest(?))",
            [list(shipments)],
        ).fetchall()
        ids.update(str(r[0]) for r in rows)
    return sorted(ids)


#: What the choice between a partial and a full run rests on (the same SQL on both warehouses):
#: the account's containers and the oldest published risk row.
PARTIAL_FACTS_SQL = (
    f"SELECT (SELECT count(*) FROM {T}.containers), min(as_of) FROM {A}.demurrage_risk"
)


def partial_fits(
    count: int,
    total: int,
    oldest: datetime | None,
    as_of: datetime,
    share: float = FULL_SHARE,
    max_age: timedelta = PARTIAL_MAX_AGE,
) -> bool:
    """Whether a run over ``count`` of the account's ``total`` containers may be partial
    (:func:`publish_risk_of`): a risk table is published (``oldest``, its oldest row's
    ``as_of``, is known), ``count`` is within ``share`` of the account and ``oldest`` is no
    older than ``max_age`` at ``as_of``."""
    if oldest is None or count > share * max(int(total), 1):
        return False
    return bool(as_of - oldest <= max_age)


def _partial_fits(
    con: duckdb.DuckDBPyConnection, count: int, as_of: datetime, share: float, max_age: timedelta
) -> bool:
    if "demurrage_risk" not in _columns(con, A):
        return False
    row = con.execute(PARTIAL_FACTS_SQL).fetchone()
    assert row is not None
    return partial_fits(count, row[0], row[1], as_of, share, max_age)


def _compute(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    as_of: datetime,
    tariffs: pl.DataFrame,
    containers: Sequence[str] | None = None,
) -> dict[str, pl.DataFrame]:
    """The risk rows, charges and charge days (registered names -> frames) of ``containers``
    (default all) at ``as_of``."""
    try:
        c = clock(read_warehouse(con, containers), as_of, tariffs)
        # each plan reads only the clock columns it needs: cheaper than materialising
        # the whole clock once
        df = risk_of(c).collect(engine="in-memory")
        parties, days = compute_charges(c).collect()
    except (pl.exceptions.PolarsError, UnconvertedLfds) as exc:  # data the checks miss
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WarehouseIncompatible(f"cannot compute risk from {path}: {first}") from exc
    return {"_risk_new": df, "_charges_new": parties, "_charge_days_new": days}


#: The published table each computed frame goes to.
_TARGETS = {
    "_risk_new": "demurrage_risk",
    "_charges_new": PARTIES_TABLE,
    "_charge_days_new": DAYS_TABLE,
}


def _publish_all(
    con: duckdb.DuckDBPyConnection, path: Path, as_of: datetime, tariffs: pl.DataFrame
) -> pl.DataFrame:
    """Recompute every container and replace the published tables; the new risk rows."""
    new = _compute(con, path, as_of, tariffs)
    with _registered(con, new), _transaction(con):
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {A}")
        _keep_previous(con)
        for name, table in _TARGETS.items():
            con.execute(f"CREATE OR REPLACE TABLE {A}.{table} AS SELECT * FROM {name}")
        _finish(con, f"risk-{as_of.isoformat()}", as_of)
    return new["_risk_new"]


@contextmanager
def _registered(con: duckdb.DuckDBPyConnection, frames: dict[str, pl.DataFrame]) -> Iterator[None]:
    """``frames`` registered on ``con`` under their names while the block runs."""
    for name, frame in frames.items():
        con.register(name, frame.to_arrow())
    try:
        yield
    finally:
        for name in frames:
            con.unregister(name)


@contextmanager
def _transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """The block in one transaction: committed, or rolled back on any error."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
    except Exception:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def _publish_some(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    as_of: datetime,
    tariffs: pl.DataFrame,
    ids: Sequence[str],
) -> pl.DataFrame | None:
    """Recompute ``ids`` and replace their rows of the published tables; the new risk rows,
    or None (nothing written) when a published table's columns differ from the engine's."""
    new = _compute(con, path, as_of, tariffs, ids)
    with _registered(con, new):
        for name, table in _TARGETS.items():
            if _described(con, name) != _described(con, f"{A}.{table}"):
                return None
        with _transaction(con):
            _catch_up_previous(con)
            for name, table in _TARGETS.items():
                con.execute(
                    f"DELETE FROM {A}.{table} WHERE container_id IN (SELECT unnest(?))", [ids]
                )
                con.execute(f"INSERT INTO {A}.{table} SELECT * FROM {name}")
            _finish(con, f"risk-{as_of.isoformat()}-{len(ids)}", as_of)
    return new["_risk_new"]


def _described(con: duckdb.DuckDBPyConnection, relation: str) -> list[tuple[str, str]]:
    try:
        return [(str(r[0]), str(r[1])) for r in con.execute(f"DESCRIBE {relation}").fetchall()]
    except duckdb.CatalogException:
        return []


def _keep_previous(con: duckdb.DuckDBPyConnection) -> None:
    """``demurrage_risk_previous`` := the published risk table (the alerts and
    :func:`pipelines.analytics.risk_changes` compare the two)."""
    if "demurrage_risk" in _columns(con, A):
        con.execute(
            f"CREATE OR REPLACE TABLE {A}.demurrage_risk_previous AS "
            f"SELECT * FROM {A}.demurrage_risk"
        )


def _catch_up_previous(con: duckdb.DuckDBPyConnection) -> None:
    """:func:`_keep_previous` by rewriting only the rows that differ: those the last publish
    changed (a partial run's whole cost would otherwise be copying the table)."""
    # (a missing table is looked up, not DESCRIBEd: an error would abort the transaction)
    if "demurrage_risk_previous" not in _columns(con, A) or _described(
        con, f"{A}.demurrage_risk_previous"
    ) != _described(con, f"{A}.demurrage_risk"):
        _keep_previous(con)
        return
    risk, previous = f"{A}.demurrage_risk", f"{A}.demurrage_risk_previous"
    # rows compared by a hash of the whole row (a 64-bit hash: cheaper than EXCEPT's compare
    # of every column, for a chance of a missed difference of one in 2**64)
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _differ AS
        SELECT coalesce(n.container_id, o.container_id) AS container_id
        FROM (SELECT container_id, hash(r) AS h FROM {risk} r) n
        FULL JOIN (SELECT container_id, hash(p) AS h FROM {previous} p) o
            ON o.container_id = n.container_id
        WHERE n.h IS DISTINCT FROM o.h"""
    )
    con.execute(f"DELETE FROM {previous} WHERE container_id IN (SELECT container_id FROM _differ)")
    con.execute(
        f"INSERT INTO {previous} SELECT * FROM {risk} "
        "WHERE container_id IN (SELECT container_id FROM _differ)"
    )
    con.execute("DROP TABLE _differ")


def _finish(con: duckdb.DuckDBPyConnection, run_id: str, as_of: datetime) -> None:
    """Inside a publish's transaction, after the tables: views, history and alerts."""
    for name, sql in view_selects(_types(con, T)):
        con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
    create_history_views(con)  # charged_days, free_time_used read the engine's tables
    # a move of the binding LFD is history too (pipelines.history)
    record_binding(con, run_id, as_of)
    # the alerts this publish raises commit with it (imported here: alerts read LEVELS)
    from pipelines.alerts.rules import raise_alerts

    raise_alerts(con, as_of)


def summarise(df: pl.DataFrame, warehouse: str, as_of: datetime, started: float) -> RiskSummary:
    """The summary of a published risk run: ``df`` its rows, ``started`` its
    ``time.perf_counter()`` at the start (both warehouses report it alike)."""
    active = df.filter(pl.col("risk_level") != "done")
    counts = dict(df.group_by("risk_level").len().iter_rows())
    return RiskSummary(
        duckdb_path=warehouse,
        as_of=as_of,
        rows=df.height,
        seconds=round(time.perf_counter() - started, 3),
        levels={lv: int(counts.get(lv, 0)) for lv in LEVELS},
        accrued_demurrage=float(active["accrued_demurrage"].sum() or 0.0),
        projected_demurrage=float(active["projected_demurrage"].sum() or 0.0),
        projected_detention=float(df["projected_detention"].sum() or 0.0),
        uncosted=int((~active["costed"]).sum()),
    )


def at_risk(duckdb_path: str | Path | None, levels: Sequence[str] | None = None) -> pl.DataFrame:
    """Published risk rows at the given levels (default overdue, due_today, imminent),
    most urgent first. Raises ``WarehouseMissing`` if nothing was published yet."""
    # --- WAREHOUSE DISPATCH (issue 30): risk on PostgreSQL lives in pipelines/pg/risk.py ---
    warehouse = resolve_warehouse(duckdb_path)
    if warehouse.is_postgres:
        from pipelines.pg.risk import at_risk as at_risk_postgres

        return at_risk_postgres(warehouse, levels)
    # --- end of the warehouse dispatch ---
    lv = list(levels or AT_RISK_LEVELS)
    bad = [x for x in lv if x not in LEVELS]
    if bad:
        raise ValueError(f"unknown risk level(s) {', '.join(bad)}; use {', '.join(LEVELS)}")
    path = resolve_duckdb_path(duckdb_path)
    with reading(path) as con:
        if "demurrage_risk" not in _columns(con, A):
            raise WarehouseMissing(f"no {A}.demurrage_risk in {path}: run `freetime risk` first")
        con.execute("SET TimeZone = 'UTC'")
        marks = ", ".join("?" for _ in lv)
        sql = f"SELECT * FROM {A}.demurrage_risk WHERE risk_level IN ({marks}) {URGENCY_ORDER}"
        frame: pl.DataFrame = con.sql(sql, params=lv).pl()
        return frame
