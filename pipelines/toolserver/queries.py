"""What each tool reads, as plain functions of a snapshot: JSON-ready dicts in, out.

Columns are chosen by what the tables have (every ``*lfd*`` column of ``containers``, whatever
``freetime_loads`` holds), so the tools follow the warehouse as it gains columns. Instants are
ISO 8601 in UTC (``...Z``); LFDs are local calendar dates (``YYYY-MM-DD``).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Literal

import duckdb
import polars as pl

from pipelines.analytics.publish import (
    CARRIER_KEYS,
    TERMINAL_KEYS,
    URGENCY_ORDER,
    exposure_sql,
    lfd_calendar_sql,
)
from pipelines.analytics.risk import AT_RISK_LEVELS, LEVELS
from pipelines.config import ANALYTICS_SCHEMA as A
from pipelines.config import DATASET as T
from pipelines.toolserver.snapshot import Snapshot

RISK = f"{A}.demurrage_risk"
#: The columns a risk list shows, in this order (those the risk table has).
RISK_LIST_COLUMNS = (
    "urgency_rank", "container_id", "container_number", "risk_level", "risk_reason",
    "lfd_date", "lfd_source", "days_to_lfd", "working_days_to_lfd", "ready_for_pickup",
    "blocking_holds", "pending_holds", "pickup_appointment_at", "accrued_demurrage",
    "projected_demurrage", "currency", "costed", "port_of_discharge_locode", "pod_terminal_name",
    "pod_terminal_firms_code", "shipping_line_scac", "customer_name", "bill_of_lading_number",
    "current_status", "stale",
)
GroupBy = Literal["terminal", "port", "carrier", "customer", "risk_level", "lfd_date"]
GROUP_KEYS: dict[str, tuple[str, ...]] = {
    "terminal": TERMINAL_KEYS,
    "port": ("port_of_discharge_locode",),
    "carrier": CARRIER_KEYS,
    "customer": ("customer_name",),
    "risk_level": ("risk_level",),
    "lfd_date": ("lfd_date",),
}


class NotFound(LookupError):
    """Nothing matches; the message says what was looked for."""


# -- values --------------------------------------------------------------------------------
def jsonable(value: Any) -> Any:
    """A DuckDB/polars value as JSON: instants in UTC with ``Z``, dates as ``YYYY-MM-DD``."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return str(value)


def _records(
    cur: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] | dict[str, Any] = ()
) -> list[dict[str, Any]]:
    rel = cur.execute(sql, params if isinstance(params, dict) else list(params))
    names = [d[0] for d in rel.description or []]
    types = [str(d[1]) for d in rel.description or []]
    out = []
    for row in rel.fetchall():
        rec = {}
        for n, t, v in zip(names, types, row, strict=True):
            if t == "JSON" and isinstance(v, str):
                with contextlib.suppress(ValueError):
                    v = json.loads(v)
            rec[n] = jsonable(v)
        out.append(rec)
    return out


def columns(cur: duckdb.DuckDBPyConnection, schema: str, table: str) -> list[str]:
    """The columns of ``schema.table`` in order; empty when it does not exist."""
    rows = cur.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = ? AND "
        "table_name = ? ORDER BY ordinal_position", [schema, table]).fetchall()
    return [r[0] for r in rows]


def _public(cols: Sequence[str]) -> list[str]:
    return [c for c in cols if not c.startswith("_dlt")]


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _require_risk(snap: Snapshot) -> None:
    if not snap.memoized("has_risk", lambda cur: bool(columns(cur, A, "demurrage_risk"))):
        raise NotFound(f"no {RISK} in the warehouse yet: run `freetime risk` (or `freetime run`)")


# -- containers at risk --------------------------------------------------------------------
def warm(snap: Snapshot) -> None:
    """Build what the frequent calls reuse, before the snapshot serves them."""
    if columns(snap.con, A, "demurrage_risk"):
        snap.memoized("risk_frame", _risk_frame)
    _keyed(snap, T, "containers", ("number", "id"))
    _keyed(snap, A, "demurrage_risk", ("container_id",))
    _keyed(snap, T, "shipments", ("id",))


def _risk_frame(cur: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """The whole risk table, most urgent first, with its rank (memoized per snapshot)."""
    df = cur.sql(f"SELECT * FROM {RISK} {URGENCY_ORDER}").pl()
    return df.with_row_index("urgency_rank", offset=1)


def containers_at_risk(
    snap: Snapshot,
    levels: Sequence[str] | None = None,
    terminal: str | None = None,
    port: str | None = None,
    carrier: str | None = None,
    customer: str | None = None,
    limit: int = 25,
) -> dict[str, Any]:
    """Risk rows at ``levels`` (default overdue, due_today, imminent), most urgent first."""
    _require_risk(snap)
    lv = list(levels or AT_RISK_LEVELS)
    bad = [x for x in lv if x not in LEVELS]
    if bad:
        raise ValueError(f"unknown risk level {', '.join(bad)}; use {', '.join(LEVELS)}")
    df: pl.DataFrame = snap.memoized("risk_frame", _risk_frame)
    cond = pl.col("risk_level").is_in(lv)
    if terminal:
        t = terminal.strip().lower()
        cond &= (pl.col("pod_terminal_name").str.to_lowercase().str.contains(t, literal=True)
                 | (pl.col("pod_terminal_firms_code").str.to_lowercase() == t))
    if port:
        p = port.strip().upper()
        cond &= (pl.col("port_of_discharge_locode") == p) | (pl.col("destination_locode") == p)
    if carrier:
        cond &= pl.col("shipping_line_scac") == carrier.strip().upper()
    if customer:
        cond &= pl.col("customer_name").str.to_lowercase().str.contains(
            customer.strip().lower(), literal=True)
    hits = df.filter(cond.fill_null(False))
    show = [c for c in RISK_LIST_COLUMNS if c in hits.columns]
    page = hits.head(limit).select(show).to_dicts()
    rows = [{k: jsonable(v) for k, v in r.items()} for r in page]
    as_of = df["as_of"].max() if df.height else None
    return {
        "as_of": jsonable(as_of),
        "levels": lv,
        "matching": hits.height,
        "returned": len(rows),
        "projected_demurrage": float(hits["projected_demurrage"].sum() or 0.0),
        "accrued_demurrage": float(hits["accrued_demurrage"].sum() or 0.0),
        "containers": rows,
    }


# -- one container -------------------------------------------------------------------------
class _Keyed:
    """A table held in memory with a dict from key values to row positions: a lookup by
    container number or id is a dict hit, not a scan (memoized per snapshot)."""

    def __init__(self, cur: duckdb.DuckDBPyConnection, table: str, keys: Sequence[str]) -> None:
        desc = cur.execute(f"SELECT * FROM {table} LIMIT 0").description or []
        self.json_cols = {d[0] for d in desc if str(d[1]) == "JSON"}
        cols = _public([d[0] for d in desc])
        self.df = cur.sql(f"SELECT {', '.join(_q(c) for c in cols)} FROM {table}").pl()
        self.index: dict[str, int] = {}
        for k in keys:
            for i, v in enumerate(self.df[k].to_list()):
                if v is not None:
                    self.index.setdefault(str(v), i)

    def get(self, key: str) -> dict[str, Any] | None:
        i = self.index.get(key)
        if i is None:
            return None
        row = self.df.row(i, named=True)
        for c in self.json_cols:
            if isinstance(row.get(c), str):
                with contextlib.suppress(ValueError):
                    row[c] = json.loads(row[c])
        return {k: jsonable(v) for k, v in row.items()}


def _keyed(snap: Snapshot, schema: str, table: str, keys: Sequence[str]) -> _Keyed | None:
    def build(cur: duckdb.DuckDBPyConnection) -> _Keyed | None:
        return _Keyed(cur, f"{schema}.{table}", keys) if columns(cur, schema, table) else None

    found: _Keyed | None = snap.memoized(f"keyed:{schema}.{table}", build)
    return found


def get_container(snap: Snapshot, container: str) -> dict[str, Any]:
    """Everything about one container, by number (any case) or Terminal49 id."""
    key = container.strip()
    if not key:
        raise ValueError("give a container number (e.g. MSCU1234567) or a container id")
    table = _keyed(snap, T, "containers", ("number", "id"))
    if table is None:
        raise NotFound("the warehouse has no containers yet: run `freetime load`")
    attrs = table.get(key.upper()) or table.get(key)
    if attrs is None:
        raise NotFound(f"no container with number or id {key!r} in the warehouse")
    cid = attrs["id"]
    risks = _keyed(snap, A, "demurrage_risk", ("container_id",))
    risk = risks.get(cid) if risks else None
    ships = _keyed(snap, T, "shipments", ("id",))
    sid = attrs.get("shipment_id")
    shipment = ships.get(sid) if ships and sid else None
    cur = snap.con.cursor()
    try:
        holds = _children(snap, cur, "container_holds", cid)
        fees = _children(snap, cur, "container_fees", cid)
    finally:
        cur.close()
    lfds: dict[str, Any] = {c: attrs[c] for c in attrs if "lfd" in c or c == "import_deadlines"}
    binding = None
    if risk is not None:
        binding = {k: risk.get(k) for k in ("lfd_date", "lfd_source", "lfd_estimated",
                                            "days_to_lfd", "working_days_to_lfd",
                                            "lfd_disagreement_days") if k in risk}
        lfds.update({k: risk[k] for k in ("lfd_line", "lfd_terminal", "lfd_rail") if k in risk})
    fee_sum = sum(float(f.get("amount") or 0) for f in fees
                  if str(f.get("type") or "").lower() != "total")
    return {
        "container_id": cid,
        "container_number": attrs.get("number"),
        "attributes": attrs,
        "lfds": lfds,
        "binding_lfd": binding,
        "holds": holds,
        "fees": fees,
        "fees_sum_without_total": round(fee_sum, 2),
        "risk": risk,
        "shipment": shipment,
    }


def _children(
    snap: Snapshot, cur: duckdb.DuckDBPyConnection, table: str, cid: str
) -> list[dict[str, Any]]:
    cols: list[str] = snap.memoized(f"columns:{table}", lambda c: columns(c, T, table))
    if not cols:
        return []
    keep = [c for c in _public(cols) if c not in ("container_id", "_deleted", "fetched_at")]
    alive = "AND coalesce(_deleted, false) = false" if "_deleted" in cols else ""
    order = "ORDER BY position" if "position" in cols else ""
    sel = ", ".join(_q(c) for c in keep)
    return _records(cur, f"SELECT {sel} FROM {T}.{table} WHERE container_id = ? {alive} {order}",
                    [cid])


# -- summaries -----------------------------------------------------------------------------
def summarize_containers(
    snap: Snapshot, group_by: str = "terminal", levels: Sequence[str] | None = None,
    limit: int = 100,
) -> dict[str, Any]:
    """Counts by level, accrued and projected cost per group (active containers)."""
    _require_risk(snap)
    if group_by not in GROUP_KEYS:
        raise ValueError(f"unknown grouping {group_by!r}; use one of {', '.join(GROUP_KEYS)}")
    lv = list(levels or [])
    bad = [x for x in lv if x not in LEVELS]
    if bad:
        raise ValueError(f"unknown risk level {', '.join(bad)}; use {', '.join(LEVELS)}")
    where = f"WHERE risk_level IN ({', '.join('?' for _ in lv)})" if lv else ""
    source = f"(SELECT * FROM {RISK} {where})"
    sql = exposure_sql(source, GROUP_KEYS[group_by])
    cur = snap.con.cursor()
    try:
        groups = _records(cur, sql, lv)
        as_of = cur.execute(f"SELECT max(as_of) FROM {RISK}").fetchone()
    finally:
        cur.close()
    return {
        "as_of": jsonable(as_of[0] if as_of else None),
        "group_by": group_by,
        "groups_total": len(groups),
        "groups": groups[:limit],
        "totals": {
            k: round(sum(float(g.get(k) or 0) for g in groups), 2)
            for k in ("containers", "overdue", "due_today", "imminent", "unknown",
                      "accrued_demurrage", "projected_demurrage", "uncosted")
        },
    }


def lfd_calendar(snap: Snapshot, days: int = 14) -> dict[str, Any]:
    """Active boxes whose binding LFD falls on each of the next ``days`` days (today first)."""
    _require_risk(snap)
    cur = snap.con.cursor()
    try:
        rows = _records(cur, lfd_calendar_sql(RISK, None, days))
        as_of = cur.execute(f"SELECT max(as_of) FROM {RISK}").fetchone()
        overdue = cur.execute(
            f"SELECT count(*) FROM {RISK} WHERE risk_level = 'overdue'").fetchone()
    finally:
        cur.close()
    return {"as_of": jsonable(as_of[0] if as_of else None), "days": rows,
            "overdue_before_today": int(overdue[0]) if overdue else 0}


# -- search --------------------------------------------------------------------------------
def search_container(snap: Snapshot, query: str, limit: int = 25) -> dict[str, Any]:
    """Containers whose number, bill of lading or a reference number starts with ``query``."""
    q = query.strip().upper()
    if len(q) < 2:
        raise ValueError("give at least 2 characters of a container number, bill of lading "
                         "or reference number")
    cur = snap.con.cursor()
    try:
        ccols = set(columns(cur, T, "containers"))
        scols = set(columns(cur, T, "shipments"))
        if not ccols:
            raise NotFound("the warehouse has no containers yet: run `freetime load`")

        def c(name: str) -> str:
            return f"c.{_q(name)}" if name in ccols else "NULL"

        def s(name: str) -> str:
            return f"s.{_q(name)}" if name in scols else "NULL"

        def refs(expr: str) -> str:
            return (f"coalesce(list_filter(CAST({expr} AS VARCHAR[]), "
                    "lambda r: starts_with(upper(r), $q)), [])")

        join = (f"LEFT JOIN {T}.shipments s ON s.id = c.shipment_id"
                if scols and "shipment_id" in ccols else
                "LEFT JOIN (SELECT NULL AS id WHERE false) s ON false")
        has_risk = bool(columns(cur, A, "demurrage_risk"))
        rjoin = (f"LEFT JOIN {RISK} r ON r.container_id = c.id" if has_risk else
                 "LEFT JOIN (SELECT NULL AS container_id, NULL AS risk_level, NULL AS lfd_date "
                 "WHERE false) r ON false")
        sql = f"""
            WITH m AS (
                SELECT c.id AS container_id, {c('number')} AS container_number,
                    {s('bill_of_lading_number')} AS bill_of_lading_number,
                    {s('customer_name')} AS customer_name, {c('current_status')} AS current_status,
                    r.risk_level, r.lfd_date,
                    starts_with(upper({c('number')}), $q) AS by_number,
                    starts_with(upper({s('bill_of_lading_number')}), $q) AS by_bl,
                    list_concat({refs(c('ref_numbers'))}, {refs(s('ref_numbers'))}) AS refs
                FROM {T}.containers c {join} {rjoin})
            SELECT container_id, container_number, bill_of_lading_number, customer_name,
                current_status, risk_level, lfd_date,
                CASE WHEN by_number THEN 'container_number'
                     WHEN by_bl THEN 'bill_of_lading_number'
                     ELSE 'reference_number' END AS matched_on,
                refs AS matching_reference_numbers
            FROM m WHERE by_number OR by_bl OR len(refs) > 0
            ORDER BY NOT coalesce(by_number, false), container_number LIMIT $lim"""
        rows = _records(cur, sql, {"q": q, "lim": limit + 1})
    finally:
        cur.close()
    return {"query": query, "returned": min(len(rows), limit), "more": len(rows) > limit,
            "containers": rows[:limit]}


# -- freshness -----------------------------------------------------------------------------
def freshness(snap: Snapshot) -> dict[str, Any]:
    """When the warehouse was last written (loads full or incremental, webhooks applied) and
    the instant the published risk is computed at."""
    cur = snap.con.cursor()
    try:
        out: dict[str, Any] = {"snapshot_taken_at": jsonable(
            datetime.fromtimestamp(snap.taken_at, UTC))}
        loads = columns(cur, T, "freetime_loads")
        if loads:
            out["source"] = f"{T}.freetime_loads"
            order = "published_at" if "published_at" in loads else loads[0]
            out["last_writes"] = _records(
                cur, f"SELECT * FROM {T}.freetime_loads QUALIFY row_number() OVER "
                     f"(PARTITION BY writer ORDER BY {_q(order)} DESC NULLS LAST) = 1 "
                     "ORDER BY writer")
            if {"writer", "kind"} <= set(loads):
                done = "AND complete" if "complete" in loads else ""
                for kind in ("full", "incremental"):
                    rows = _records(cur, f"SELECT * FROM {T}.freetime_loads WHERE writer = "
                                         f"'load' AND kind = ? {done} ORDER BY "
                                         f"{_q(order)} DESC NULLS LAST LIMIT 1", [kind])
                    out[f"last_{kind}_load"] = rows[0] if rows else None
            rows = _records(cur, f"SELECT max({_q(order)}) AS at FROM {T}.freetime_loads "
                                 "WHERE writer = 'webhooks'") if "writer" in loads else []
            out["webhooks_applied_at"] = rows[0]["at"] if rows else None
        else:
            out["source"] = "fallback: containers.fetched_at and dlt's load log"
            if "fetched_at" in columns(cur, T, "containers"):
                out["containers_fetched_at"] = _records(
                    cur, f"SELECT max(fetched_at) AS at FROM {T}.containers")[0]["at"]
            if columns(cur, T, "_dlt_loads"):
                out["last_load"] = _records(
                    cur, f"SELECT load_id, inserted_at FROM {T}._dlt_loads WHERE status = 0 "
                         "ORDER BY inserted_at DESC LIMIT 1")[0:1] or None
                if out["last_load"]:
                    out["last_load"] = out["last_load"][0]
            wcols = columns(cur, T, "webhook_notifications")
            stamp = next((c for c in ("applied_at", "received_at", "created_at", "fetched_at")
                          if c in wcols), None)
            out["webhooks_applied_at"] = _records(
                cur, f"SELECT max({_q(stamp)}) AS at FROM {T}.webhook_notifications"
            )[0]["at"] if stamp else None
        if columns(cur, A, "demurrage_risk"):
            row = _records(cur, f"SELECT max(as_of) AS as_of, count(*) AS containers "
                                f"FROM {RISK}")[0]
            out["risk_as_of"] = row["as_of"]
            out["risk_containers"] = row["containers"]
        else:
            out["risk_as_of"] = None
    finally:
        cur.close()
    return out


# -- resources -----------------------------------------------------------------------------
def schema_text(snap: Snapshot) -> str:
    """The warehouse's tables and columns with their types and comments, as Markdown."""
    cur = snap.con.cursor()
    try:
        tables = cur.execute(
            "SELECT schema_name, table_name, comment FROM duckdb_tables() WHERE schema_name IN "
            "(?, ?) UNION ALL SELECT schema_name, view_name, comment FROM duckdb_views() WHERE "
            "schema_name IN (?, ?) ORDER BY 1, 2", [T, A, T, A]).fetchall()
        cols = cur.execute(
            "SELECT schema_name, table_name, column_name, data_type, comment FROM "
            "duckdb_columns() WHERE schema_name IN (?, ?) ORDER BY schema_name, table_name, "
            "column_index", [T, A]).fetchall()
    finally:
        cur.close()
    by_table: dict[tuple[str, str], list[tuple[str, str, str | None]]] = {}
    for s, t, c, typ, com in cols:
        by_table.setdefault((s, t), []).append((c, typ, com))
    lines = ["# freetime warehouse schema", ""]
    for s, t, com in tables:
        if t.startswith("_dlt"):
            continue
        lines.append(f"## {s}.{t}")
        if com:
            lines.append(str(com))
        lines.append("")
        for c, typ, ccom in by_table.get((s, t), []):
            lines.append(f"- `{c}` {typ}" + (f": {ccom}" if ccom else ""))
        lines.append("")
    return "\n".join(lines)
