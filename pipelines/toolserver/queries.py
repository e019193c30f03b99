"""What each tool reads, as plain functions of a snapshot: JSON-ready dicts in, out.

Columns are chosen by what the tables have (every ``*lfd*`` column of ``containers``, whatever
``freetime_loads`` holds), so the tools follow the warehouse as it gains columns. Instants are
ISO 8601 in UTC (``...Z``); LFDs are local calendar dates (``YYYY-MM-DD``).

:func:`prepare` adds to each private snapshot what keeps calls fast at any size, all inside
DuckDB (nothing held in Python memory): indexes on the keys a container is looked up by, the
risk table in urgency order with its rank (:data:`RANKED`) and the search keys in order
(:data:`SEARCH_KEYS`), in the schema :data:`OWN`.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import duckdb

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
from pipelines.pg.cursor import columns
from pipelines.toolserver.snapshot import Snapshot
from pipelines.warehouse import quote

if TYPE_CHECKING:
    from pipelines.toolserver.pgread import PgView

#: What a query reads: a DuckDB snapshot, or a read-only transaction on PostgreSQL
#: (:class:`~pipelines.toolserver.pgread.PgView`, whose cursors take the same calls).
View: TypeAlias = "Snapshot | PgView"
#: a DuckDB connection or cursor, or a :class:`~pipelines.toolserver.pgread.PgCursor`
Cursor = Any

RISK = f"{A}.demurrage_risk"
#: The tool server's own schema in each snapshot (never in the warehouse itself).
OWN = "toolserver"
RANKED = f"{OWN}.risk_ranked"
SEARCH_KEYS = f"{OWN}.search_keys"
#: (schema, table, column) a call looks rows up by: each gets an index in the snapshot.
LOOKUPS = (
    (T, "containers", "number"),
    (T, "containers", "id"),
    (A, "demurrage_risk", "container_id"),
    (T, "shipments", "id"),
    (T, "container_holds", "container_id"),
    (T, "container_fees", "container_id"),
)
#: The columns a risk list shows, in this order (those the risk table has).
RISK_LIST_COLUMNS = (
    "urgency_rank",
    "container_id",
    "container_number",
    "risk_level",
    "risk_reason",
    "lfd_date",
    "lfd_source",
    "days_to_lfd",
    "working_days_to_lfd",
    "ready_for_pickup",
    "blocking_holds",
    "pending_holds",
    "pickup_appointment_at",
    "accrued_demurrage",
    "projected_demurrage",
    "currency",
    "costed",
    "port_of_discharge_locode",
    "pod_terminal_name",
    "pod_terminal_firms_code",
    "shipping_line_scac",
    "customer_name",
    "bill_of_lading_number",
    "current_status",
    "stale",
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
    cur: Cursor, sql: str, params: Sequence[Any] | dict[str, Any] = ()
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


def _is_postgres(x: Any) -> bool:
    """Whether ``x`` (a view or a cursor) reads a PostgreSQL warehouse."""
    return getattr(x, "dialect", "duckdb") == "postgres"


def _public(cols: Sequence[str]) -> list[str]:
    return [c for c in cols if not c.startswith("_dlt")]


def _columns(snap: View, schema: str, table: str) -> list[str]:
    """:func:`columns`, remembered for the snapshot. On PostgreSQL, the tool server's own
    tables (:data:`OWN`) are queries of the live tables (:func:`_ranked`)."""

    def read() -> list[str]:
        with snap.con.cursor() as cur:
            if _is_postgres(snap) and (schema, table) == (OWN, "risk_ranked"):
                risk = columns(cur, A, "demurrage_risk")
                return ["urgency_rank", *risk] if risk else []
            return columns(cur, schema, table)

    cols: list[str] = snap.cached(("columns", schema, table), read)
    return cols


def _ranked(snap: View) -> str:
    """:data:`RANKED`: a table of the DuckDB snapshot, a subquery on PostgreSQL."""
    if _is_postgres(snap):
        return (
            f"(SELECT row_number() OVER ({URGENCY_ORDER}) AS urgency_rank, * FROM {RISK}) "
            "AS risk_ranked"
        )
    return RANKED


def _require_risk(snap: View) -> None:
    if not _columns(snap, A, "demurrage_risk"):
        raise NotFound(f"no {RISK} in the warehouse yet: run `freetime risk` (or `freetime run`)")


# -- preparing a snapshot ------------------------------------------------------------------
def prepare(con: duckdb.DuckDBPyConnection) -> None:
    """Index the lookup keys and build :data:`RANKED` and :data:`SEARCH_KEYS` on a read-write
    connection to a private snapshot (what exists of them: tables may be missing)."""
    for schema, table, col in LOOKUPS:
        if col in columns(con, schema, table):
            con.execute(
                f"CREATE INDEX {quote(f'{OWN}_{table}_{col}')} ON {schema}.{table} ({quote(col)})"
            )
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {OWN}")
    if columns(con, A, "demurrage_risk"):
        con.execute(
            f"CREATE TABLE {RANKED} AS SELECT row_number() OVER ({URGENCY_ORDER}) "
            f"AS urgency_rank, * FROM {RISK} {URGENCY_ORDER}"
        )
    ccols = set(columns(con, T, "containers"))
    if {"id", "number"} <= ccols:
        keys = search_keys_sql(ccols, set(columns(con, T, "shipments")), postgres=False)
        con.execute(f"CREATE TABLE {SEARCH_KEYS} AS {keys} ORDER BY key")


# -- containers at risk --------------------------------------------------------------------
def containers_at_risk(
    snap: View,
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
    have = set(_columns(snap, OWN, "risk_ranked"))
    cond = [f"risk_level IN ({', '.join('?' for _ in lv)})"]
    params: list[Any] = list(lv)

    def col(name: str) -> str:
        return quote(name) if name in have else "NULL"

    if terminal:
        t = terminal.strip().lower()
        cond.append(
            f"(strpos(lower({col('pod_terminal_name')}), ?) > 0 "
            f"OR lower({col('pod_terminal_firms_code')}) = ?)"
        )
        params += [t, t]
    if port:
        p = port.strip().upper()
        cond.append(f"({col('port_of_discharge_locode')} = ? OR {col('destination_locode')} = ?)")
        params += [p, p]
    if carrier:
        cond.append(f"{col('shipping_line_scac')} = ?")
        params.append(carrier.strip().upper())
    if customer:
        cond.append(f"strpos(lower({col('customer_name')}), ?) > 0")
        params.append(customer.strip().lower())
    where = " AND ".join(f"coalesce({c}, false)" for c in cond)
    show = ", ".join(quote(c) for c in RISK_LIST_COLUMNS if c in have)
    ranked = _ranked(snap)
    with snap.con.cursor() as cur:
        rows = _records(
            cur,
            f"SELECT {show} FROM {ranked} WHERE {where} ORDER BY urgency_rank LIMIT {int(limit)}",
            params,
        )
        matching, projected, accrued = cur.execute(
            f"SELECT count(*), coalesce(sum(projected_demurrage), 0), "
            f"coalesce(sum(accrued_demurrage), 0) FROM {RISK} WHERE {where}",
            params,
        ).fetchone() or (0, 0, 0)
        as_of = cur.execute(f"SELECT max(as_of) FROM {RISK}").fetchone()
    return {
        "as_of": jsonable(as_of[0] if as_of else None),
        "levels": lv,
        "matching": int(matching),
        "returned": len(rows),
        "projected_demurrage": float(projected),
        "accrued_demurrage": float(accrued),
        "containers": rows,
    }


# -- one container -------------------------------------------------------------------------
def _row(
    snap: View, cur: Cursor, schema: str, table: str, key: str, value: Any
) -> dict[str, Any] | None:
    """The first row of ``schema.table`` whose ``key`` is ``value`` (an index lookup)."""
    cols = _public(_columns(snap, schema, table))
    if key not in cols:
        return None
    rows = _records(
        cur,
        f"SELECT {', '.join(quote(c) for c in cols)} FROM {schema}.{table} "
        f"WHERE {quote(key)} = ? LIMIT 1",
        [value],
    )
    return rows[0] if rows else None


#: Per-source LFDs of the risk row (the binding one is ``lfd_date``/``lfd_source``).
LFD_SOURCES = ("lfd_line", "lfd_terminal", "lfd_rail", "lfd_pod")
#: Columns of a container's holds and fees that a person reads.
HOLD_COLUMNS = ("name", "status", "description")
FEE_COLUMNS = ("type", "amount", "currency_code")


def get_container(snap: View, container: str) -> dict[str, Any]:
    """One container, by number (any case) or Terminal49 id, as a person asks about it: the
    risk table's columns (:data:`RISK_LIST_COLUMNS`: level, reason, binding LFD with its
    source, days left, holds, appointment, costs, port, terminal, carrier...), its LFD by
    source, its holds and fees; ``more`` names the query that reads every attribute
    (``query_warehouse``). Without a published risk row, ``risk_level`` is None and the
    container's own status and appointment are given."""
    key = container.strip()
    if not key:
        raise ValueError("give a container number (e.g. MSCU1234567) or a container id")
    if not _columns(snap, T, "containers"):
        raise NotFound("the warehouse has no containers yet: run `freetime load`")
    with snap.con.cursor() as cur:
        attrs = _row(snap, cur, T, "containers", "number", key.upper()) or _row(
            snap, cur, T, "containers", "id", key
        )
        if attrs is None:
            raise NotFound(f"no container with number or id {key!r} in the warehouse")
        cid = attrs["id"]
        risk = _row(snap, cur, A, "demurrage_risk", "container_id", cid) or {}
        holds = _children(snap, cur, "container_holds", cid, HOLD_COLUMNS)
        fees = _children(snap, cur, "container_fees", cid, FEE_COLUMNS)
    out: dict[str, Any] = {"container_id": cid, "container_number": attrs.get("number")}
    for c in RISK_LIST_COLUMNS:
        if c not in out and c != "urgency_rank":
            out[c] = risk.get(c, attrs.get(c))
    out["lfds"] = {k.removeprefix("lfd_"): risk[k] for k in LFD_SOURCES if k in risk}
    for k in ("lfd_estimated", "lfd_disagreement_days"):
        if k in risk:
            out[k] = risk[k]
    out["holds"] = holds
    out["fees"] = fees
    out["more"] = (
        "every attribute: query_warehouse with SELECT * FROM terminal49.containers WHERE id = "
        f"'{cid}' (its shipment: terminal49.shipments; the whole risk row: "
        f"analytics.demurrage_risk WHERE container_id = '{cid}')"
    )
    return out


def _children(
    snap: View, cur: Cursor, table: str, cid: str, show: Sequence[str]
) -> list[dict[str, Any]]:
    """The live rows of ``table`` for container ``cid``, the ``show`` columns it has."""
    cols = _columns(snap, T, table)
    if not cols:
        return []
    keep = [c for c in show if c in cols]
    alive = "AND coalesce(_deleted, false) = false" if "_deleted" in cols else ""
    order = "ORDER BY position" if "position" in cols else ""
    sel = ", ".join(quote(c) for c in keep)
    return _records(
        cur, f"SELECT {sel} FROM {T}.{table} WHERE container_id = ? {alive} {order}", [cid]
    )


# -- summaries -----------------------------------------------------------------------------
def summarize_containers(
    snap: View,
    group_by: str = "terminal",
    levels: Sequence[str] | None = None,
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
    source = f"(SELECT * FROM {RISK} {where}) AS risk"
    keys = GROUP_KEYS[group_by]
    # the grouping named (GROUP BY ALL is DuckDB's alone), ties in the order of the keys
    # (byte order, as DuckDB sorts text, whatever the database's collation)
    tie = ", ".join(
        f'{k} COLLATE "C"' if _is_postgres(snap) and k != "lfd_date" else k for k in keys
    )
    sql = (
        exposure_sql(source, keys)
        .replace("GROUP BY ALL", f"GROUP BY {', '.join(keys)}")
        .replace("projected_demurrage DESC", f"projected_demurrage DESC, {tie}")
    )
    with snap.con.cursor() as cur:
        groups = _records(cur, sql, lv)
        as_of = cur.execute(f"SELECT max(as_of) FROM {RISK}").fetchone()
    return {
        "as_of": jsonable(as_of[0] if as_of else None),
        "group_by": group_by,
        "groups_total": len(groups),
        "groups": groups[:limit],
        "totals": {
            k: round(sum(float(g.get(k) or 0) for g in groups), 2)
            for k in (
                "containers",
                "overdue",
                "due_today",
                "imminent",
                "unknown",
                "accrued_demurrage",
                "projected_demurrage",
                "uncosted",
            )
        },
    }


def lfd_calendar(snap: View, days: int = 14) -> dict[str, Any]:
    """Active boxes whose binding LFD falls on each of the next ``days`` days (today first)."""
    _require_risk(snap)
    sql = lfd_calendar_sql(RISK, None, days)
    if _is_postgres(snap):  # DuckDB's range() and len() in PostgreSQL's words
        sql = sql.replace(f"range({int(days)}) t(i)", f"generate_series(0, {int(days) - 1}) t(i)")
        sql = sql.replace("len(r.blocking_holds) > 0", "cardinality(r.blocking_holds) > 0")
    with snap.con.cursor() as cur:
        rows = _records(cur, sql)
        as_of = cur.execute(f"SELECT max(as_of) FROM {RISK}").fetchone()
        overdue = cur.execute(
            f"SELECT count(*) FROM {RISK} WHERE risk_level = 'overdue'"
        ).fetchone()
    return {
        "as_of": jsonable(as_of[0] if as_of else None),
        "days": rows,
        "overdue_before_today": int(overdue[0]) if overdue else 0,
    }


# -- search --------------------------------------------------------------------------------
def search_container(snap: View, query: str, limit: int = 25) -> dict[str, Any]:
    """Containers whose number, bill of lading or a reference number starts with ``query``."""
    q = query.strip().upper()
    if len(q) < 2:
        raise ValueError(
            "give at least 2 characters of a container number, bill of lading or reference number"
        )
    postgres = _is_postgres(snap)
    ccols = set(_columns(snap, T, "containers"))
    if not (_columns(snap, OWN, "search_keys") or (postgres and {"id", "number"} <= ccols)):
        raise NotFound("the warehouse has no containers yet: run `freetime load`")
    scols = set(_columns(snap, T, "shipments"))
    has_risk = bool(_columns(snap, A, "demurrage_risk"))

    def c(name: str) -> str:
        return f"c.{quote(name)}" if name in ccols else "NULL"

    def s(name: str) -> str:
        return f"s.{quote(name)}" if scols and name in scols and "shipment_id" in ccols else "NULL"

    join = (
        f"LEFT JOIN {T}.shipments s ON s.id = c.shipment_id"
        if scols and "shipment_id" in ccols
        else ""
    )
    rjoin = f"LEFT JOIN {RISK} r ON r.container_id = c.id" if has_risk else ""
    risk = "r.risk_level, r.lfd_date" if has_risk else "NULL AS risk_level, NULL AS lfd_date"
    # The keys are in order: a prefix is a range, read from the few row groups holding it.
    upper = q[:-1] + chr(ord(q[-1]) + 1) if ord(q[-1]) < 0x10FFFF else q + "\uffff"
    sql = f"""
        WITH k AS (
            SELECT container_id, min(rank) AS rank, list(ref ORDER BY ref) FILTER (rank = 3)
                AS refs
            FROM {SEARCH_KEYS} WHERE key >= $q AND key < $upper AND starts_with(key, $q)
            GROUP BY container_id)
        SELECT c.id AS container_id, {c("number")} AS container_number,
            {s("bill_of_lading_number")} AS bill_of_lading_number,
            {s("customer_name")} AS customer_name, {c("current_status")} AS current_status,
            {risk},
            CASE k.rank WHEN 1 THEN 'container_number' WHEN 2 THEN 'bill_of_lading_number'
                 ELSE 'reference_number' END AS matched_on,
            coalesce(k.refs, []) AS matching_reference_numbers
        FROM k JOIN {T}.containers c ON c.id = k.container_id {join} {rjoin}
        ORDER BY k.rank <> 1, container_number LIMIT $lim"""
    with snap.con.cursor() as cur:
        if postgres:
            keys = search_keys_sql(ccols, scols, postgres=True)
            sql = f"""
                WITH keys AS ({keys}),
                k AS (
                    SELECT container_id, min(rank) AS rank,
                        array_agg(ref ORDER BY ref) FILTER (WHERE rank = 3) AS refs
                    FROM keys WHERE starts_with(key, %(q)s) GROUP BY container_id)
                SELECT c.id AS container_id, {c("number")} AS container_number,
                    {s("bill_of_lading_number")} AS bill_of_lading_number,
                    {s("customer_name")} AS customer_name,
                    {c("current_status")} AS current_status, {risk},
                    CASE k.rank WHEN 1 THEN 'container_number'
                         WHEN 2 THEN 'bill_of_lading_number' ELSE 'reference_number' END
                        AS matched_on,
                    coalesce(k.refs, ARRAY[]::text[]) AS matching_reference_numbers
                FROM k JOIN {T}.containers c ON c.id = k.container_id {join} {rjoin}
                ORDER BY k.rank <> 1, container_number COLLATE "C" LIMIT %(lim)s"""
            rows = _records(cur, sql, {"q": q, "lim": limit + 1})
        else:
            rows = _records(cur, sql, {"q": q, "upper": upper, "lim": limit + 1})
    return {
        "query": query,
        "returned": min(len(rows), limit),
        "more": len(rows) > limit,
        "containers": rows[:limit],
    }


def search_keys_sql(ccols: set[str], scols: set[str], *, postgres: bool) -> str:
    """The query of :data:`SEARCH_KEYS` (key, container_id, rank, ref): container numbers
    (rank 1), bills of lading (2), reference numbers of the container or its shipment (3).
    ``ccols``/``scols``: the columns ``containers`` and ``shipments`` have. DuckDB's SQL
    (for :func:`prepare`), or PostgreSQL's (a query of the live tables)."""
    parts = [
        f"SELECT upper(number) AS key, id AS container_id, 1 AS rank, "
        f"{'NULL::text' if postgres else 'NULL'} AS ref FROM {T}.containers "
        "WHERE number IS NOT NULL"
    ]
    if "shipment_id" in ccols and {"id", "bill_of_lading_number"} <= scols:
        parts.append(
            f"SELECT upper(s.bill_of_lading_number), c.id, 2, NULL FROM {T}.containers c "
            f"JOIN {T}.shipments s ON s.id = c.shipment_id "
            "WHERE s.bill_of_lading_number IS NOT NULL"
        )
    refs = [f"SELECT id, ref_numbers FROM {T}.containers"] if "ref_numbers" in ccols else []
    if "shipment_id" in ccols and {"id", "ref_numbers"} <= scols:
        refs.append(
            f"SELECT c.id, s.ref_numbers FROM {T}.containers c "
            f"JOIN {T}.shipments s ON s.id = c.shipment_id"
        )
    for src in refs:
        if postgres:  # a JSON array (or a text[]) of reference numbers
            refs_of = (
                "jsonb_array_elements_text(CASE jsonb_typeof(to_jsonb(x.ref_numbers)) WHEN "
                "'array' THEN to_jsonb(x.ref_numbers) ELSE '[]'::jsonb END) r"
            )
            parts.append(
                f"SELECT upper(r), x.id, 3, r FROM ({src}) x, {refs_of} WHERE r IS NOT NULL"
            )
        else:
            parts.append(
                f"SELECT upper(r), id, 3, r FROM (SELECT id, unnest(CAST(ref_numbers AS "
                f"VARCHAR[])) AS r FROM ({src})) WHERE r IS NOT NULL"
            )
    return " UNION ALL ".join(parts)


# -- freshness -----------------------------------------------------------------------------
def freshness(snap: View) -> dict[str, Any]:
    """When the warehouse was last written (loads full or incremental, webhooks applied) and
    the instant the published risk is computed at."""
    with snap.con.cursor() as cur:
        out: dict[str, Any] = {
            "snapshot_taken_at": jsonable(datetime.fromtimestamp(snap.taken_at, UTC))
        }
        loads = columns(cur, T, "freetime_loads")
        if loads:
            out["source"] = f"{T}.freetime_loads"
            order = "published_at" if "published_at" in loads else loads[0]
            out["last_writes"] = _records(
                cur,
                f"SELECT DISTINCT ON (writer) * FROM {T}.freetime_loads "
                f"ORDER BY writer, {quote(order)} DESC NULLS LAST",
            )
            if {"writer", "kind"} <= set(loads):
                done = "AND complete" if "complete" in loads else ""
                for kind in ("full", "incremental"):
                    rows = _records(
                        cur,
                        f"SELECT * FROM {T}.freetime_loads WHERE writer = "
                        f"'load' AND kind = ? {done} ORDER BY "
                        f"{quote(order)} DESC NULLS LAST LIMIT 1",
                        [kind],
                    )
                    out[f"last_{kind}_load"] = rows[0] if rows else None
            rows = (
                _records(
                    cur,
                    f"SELECT max({quote(order)}) AS at FROM {T}.freetime_loads "
                    "WHERE writer = 'webhooks'",
                )
                if "writer" in loads
                else []
            )
            out["webhooks_applied_at"] = rows[0]["at"] if rows else None
        else:
            out["source"] = "fallback: containers.fetched_at and dlt's load log"
            if "fetched_at" in columns(cur, T, "containers"):
                out["containers_fetched_at"] = _records(
                    cur, f"SELECT max(fetched_at) AS at FROM {T}.containers"
                )[0]["at"]
            if columns(cur, T, "_dlt_loads"):
                out["last_load"] = (
                    _records(
                        cur,
                        f"SELECT load_id, inserted_at FROM {T}._dlt_loads WHERE status = 0 "
                        "ORDER BY inserted_at DESC LIMIT 1",
                    )[0:1]
                    or None
                )
                if out["last_load"]:
                    out["last_load"] = out["last_load"][0]
            wcols = columns(cur, T, "webhook_notifications")
            stamp = next(
                (
                    c
                    for c in ("applied_at", "received_at", "created_at", "fetched_at")
                    if c in wcols
                ),
                None,
            )
            out["webhooks_applied_at"] = (
                _records(cur, f"SELECT max({quote(stamp)}) AS at FROM {T}.webhook_notifications")[
                    0
                ]["at"]
                if stamp
                else None
            )
        if columns(cur, A, "demurrage_risk"):
            row = _records(cur, f"SELECT max(as_of) AS as_of, count(*) AS containers FROM {RISK}")[
                0
            ]
            out["risk_as_of"] = row["as_of"]
            out["risk_containers"] = row["containers"]
        else:
            out["risk_as_of"] = None
    return out


# -- resources -----------------------------------------------------------------------------
def schema_text(snap: View) -> str:
    """The warehouse's tables and columns with their types and comments, as Markdown."""
    if _is_postgres(snap):
        return _schema_text(*_schema_postgres(snap))
    with snap.con.cursor() as cur:
        tables = cur.execute(
            "SELECT schema_name, table_name, comment FROM duckdb_tables() WHERE schema_name IN "
            "(?, ?) UNION ALL SELECT schema_name, view_name, comment FROM duckdb_views() WHERE "
            "schema_name IN (?, ?) ORDER BY 1, 2",
            [T, A, T, A],
        ).fetchall()
        cols = cur.execute(
            "SELECT schema_name, table_name, column_name, data_type, comment FROM "
            "duckdb_columns() WHERE schema_name IN (?, ?) ORDER BY schema_name, table_name, "
            "column_index",
            [T, A],
        ).fetchall()
    return _schema_text(tables, cols)


def _schema_postgres(snap: View) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The tables and views of the warehouse's schemas with their comments, and their
    columns with their types (by DuckDB's names) and comments, from PostgreSQL's catalog."""
    from pipelines.pg.publish import DUCKDB_NAMES

    with snap.con.cursor() as cur:
        tables = cur.execute(
            "SELECT n.nspname, c.relname, obj_description(c.oid, 'pg_class') FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname IN (?, ?) "
            "AND c.relkind IN ('r', 'p', 'v', 'm') ORDER BY 1, 2 COLLATE \"C\"",
            [T, A],
        ).fetchall()
        cols = cur.execute(
            "SELECT n.nspname, c.relname, a.attname, format_type(a.atttypid, NULL), "
            "col_description(c.oid, a.attnum) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname IN (?, ?) AND c.relkind IN ('r', 'p', 'v', 'm') AND a.attnum > 0 "
            "AND NOT a.attisdropped ORDER BY n.nspname, c.relname, a.attnum",
            [T, A],
        ).fetchall()
    named = [(s, t, c, DUCKDB_NAMES.get(typ, typ.upper()), com) for s, t, c, typ, com in cols]
    return tables, named


def _schema_text(tables: Sequence[tuple[Any, ...]], cols: Sequence[tuple[Any, ...]]) -> str:
    """The Markdown of :func:`schema_text`."""
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


# -- invoices (pipelines.invoices) -----------------------------------------------------------
def audit_invoice(snap: View, invoice: str, issuer: str | None = None) -> dict[str, Any]:
    """The audit of one imported invoice's current version, as ``freetime invoices audit``
    computes it: per line the billed and computed amounts, the amount in dispute, the
    findings (code and sentence) and the deadline to dispute."""
    from pipelines.invoices.audit import audit_invoice as audit

    try:
        with snap.con.cursor() as cur:
            results = audit(cur, invoice, issuer)
    except LookupError as exc:
        raise NotFound(str(exc)) from None
    lines = [
        {
            "line_number": r.line.line_number,
            "container_number": r.line.line.container_number,
            "party": r.line.party,
            "charge": r.line.charge,
            "billed_from": jsonable(r.line.line.billed_from),
            "billed_to": jsonable(r.line.line.billed_to),
            "billed_amount": r.line.line.amount,
            "computed_amount": r.computed,
            "difference": r.difference,
            "disputed_amount": r.disputed,
            "findings": [{"code": c, "sentence": s} for c, s in r.findings],
            "dispute_by": jsonable(r.dispute_by),
        }
        for r in results
    ]
    first = results[0].line if results else None
    return {
        "invoice_number": invoice,
        "issuer_name": first.issuer_name if first else issuer,
        "version": first.version if first else None,
        "currency": first.currency if first else None,
        "billed_amount": round(sum(x["billed_amount"] for x in lines), 2),
        "disputed_amount": round(sum(x["disputed_amount"] for x in lines), 2),
        "dispute_by": min((x["dispute_by"] for x in lines), default=None),
        "lines": lines,
    }
