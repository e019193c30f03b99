"""History that is never rewritten: every change of the fields that matter for free time.

Contract:
- ``terminal49.history`` is append-only. One row per change of one field of one record:
  ``entity`` (``container`` or ``shipment``), ``entity_id``, ``field``, ``old_value`` and
  ``new_value`` (text, see :func:`text_sql`), ``observed_at`` (when freetime saw the new value,
  by the API's clock), ``fetched_at`` (the same moment by this machine's clock), ``how``
  (``full``, ``incremental`` or ``webhook``), ``notification_id`` (webhooks) and ``load_id``;
- it is written by :mod:`pipelines.write` inside the transaction that publishes a load, from
  the rows the load replaces: a load that fails adds nothing, and a value that did not change
  (the same data loaded again) adds nothing. A record seen for the first time adds one row per
  tracked field that has a value, with ``old_value`` NULL;
- tracked container fields (:func:`tracked_columns`): every column with ``lfd`` in its name
  (the wire copies ``*_wire`` and unparsed ``*__raw`` excepted) and :data:`CONTAINER_FIELDS`;
  holds as ``hold:<name>`` (value: the hold's status; NULL when it is not listed), fees as
  ``fee:<type>`` (value: the amount); shipment fields :data:`SHIPMENT_FIELDS`;
- a record that a complete full scan no longer finds, and that the load removes, adds one row:
  field ``listed``, from ``true`` to ``false`` (:func:`record_removed`).

This module never imports :mod:`pipelines.write` (which calls it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import duckdb

from pipelines.config import DATASET
from pipelines.warehouse import column_types
from pipelines.warehouse import quote as q

HISTORY_TABLE = "history"
#: Container columns tracked besides every LFD column.
CONTAINER_FIELDS = (
    "current_status",
    "available_for_pickup",
    "availability_known",
    "has_pod_deadlines",
    "pickup_appointment_at",
    "pod_terminal_id",
    "pod_arrived_at",
    "pod_discharged_at",
    "pod_full_out_at",
    "final_destination_full_out_at",
    "empty_terminated_at",
)
SHIPMENT_FIELDS = ("pod_eta_at", "destination_eta_at", "pod_ata_at", "destination_ata_at")
#: Child tables whose rows are tracked per container: table -> (field prefix, name, value).
CHILD_FIELDS = {
    "container_holds": ("hold", "name", "status"),
    "container_fees": ("fee", "type", "amount"),
}
ENTITY = {"containers": "container", "shipments": "shipment"}
#: Incoming columns a writer may add for history; never published.
NOTIFICATION_COLUMN = "_notification_id"
OBSERVED_COLUMN = "_observed_at"


@dataclass(frozen=True)
class Context:
    """How the load being published saw its rows."""

    load_id: str
    how: str  # full, incremental, webhook
    #: API clock minus this machine's clock when the load's scan started (0 when unknown)
    clock_offset: dt.timedelta = dt.timedelta(0)


def tracked_columns(table: str, columns: Iterable[str]) -> list[str]:
    """The tracked columns of ``table`` among ``columns`` (in their order)."""
    if table == "containers":
        return [
            c
            for c in columns
            if ("lfd" in c and not c.endswith(("_wire", "__raw"))) or c in CONTAINER_FIELDS
        ]
    if table == "shipments":
        return [c for c in columns if c in SHIPMENT_FIELDS]
    return []


def text_sql(expr: str, duck_type: str) -> str:
    """SQL turning ``expr`` of ``duck_type`` into the text history keeps: instants as ISO 8601
    UTC (``2025-11-05T05:00:00Z``, whatever the session's zone), anything else as DuckDB
    casts it (dates ``2025-11-05``, booleans ``true``)."""
    if duck_type.startswith("TIMESTAMP WITH TIME ZONE"):
        return f"strftime(timezone('UTC', {expr}), '%Y-%m-%dT%H:%M:%SZ')"
    return f"CAST({expr} AS VARCHAR)"


def ensure_table(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {q(DATASET)}.{HISTORY_TABLE} ("
        "entity VARCHAR NOT NULL, entity_id VARCHAR NOT NULL, field VARCHAR NOT NULL, "
        "old_value VARCHAR, new_value VARCHAR, observed_at TIMESTAMPTZ NOT NULL, "
        "fetched_at TIMESTAMPTZ, how VARCHAR NOT NULL, notification_id VARCHAR, "
        "load_id VARCHAR NOT NULL)"
    )


def _observed(columns: Mapping[str, str], ctx: Context, alias: str = "n") -> str:
    shifted = f"{alias}.fetched_at + INTERVAL '{ctx.clock_offset.total_seconds()} seconds'"
    if OBSERVED_COLUMN in columns:
        return f"coalesce({alias}.{OBSERVED_COLUMN}, {shifted})"
    return shifted


def _notification(columns: Mapping[str, str], alias: str = "n") -> str:
    return f"{alias}.{NOTIFICATION_COLUMN}" if NOTIFICATION_COLUMN in columns else "NULL"


def record_rows(
    con: duckdb.DuckDBPyConnection,
    table: str,
    incoming: Mapping[str, str],
    ctx: Context,
) -> int:
    """Append the changes of the rows in temp table ``_new`` that will replace (or add to)
    ``terminal49.<table>``; call before the merge touches the table. Returns rows appended."""
    fields = tracked_columns(table, incoming)
    if table not in ENTITY or not fields:
        return 0
    ensure_table(con)
    dst = f"{q(DATASET)}.{q(table)}"
    pairs = ", ".join(
        f"{{'field': '{c}', 'old': {text_sql('t.' + q(c), incoming[c])}, "
        f"'new': {text_sql('n.' + q(c), incoming[c])}}}"
        for c in fields
    )
    sql = f"""
        INSERT INTO {q(DATASET)}.{HISTORY_TABLE}
        SELECT '{ENTITY[table]}', id, field, old, new, observed_at, fetched_at, ?,
               notification_id, ?
        FROM (
            SELECT n.id, {_observed(incoming, ctx)} AS observed_at, n.fetched_at,
                   {_notification(incoming)} AS notification_id,
                   unnest([{pairs}], recursive := true)
            FROM _new n LEFT JOIN {dst} t ON t.id = n.id
            WHERE NOT EXISTS (SELECT 1 FROM {dst} x WHERE x.id = n.id
                              AND x.fetched_at > n.fetched_at)
        )
        WHERE old IS DISTINCT FROM new
    """
    return _count(con.execute(sql, [ctx.how, ctx.load_id]))


def record_children(
    con: duckdb.DuckDBPyConnection,
    table: str,
    incoming: Mapping[str, str],
    ctx: Context,
) -> int:
    """Append the hold or fee changes of the containers in temp table ``_owners`` whose rows in
    ``terminal49.<table>`` are about to be replaced by those in ``_new``. Returns rows
    appended."""
    if table not in CHILD_FIELDS:
        return 0
    prefix, name, value = CHILD_FIELDS[table]
    if name not in incoming or value not in incoming:
        return 0
    ensure_table(con)
    dst = f"{q(DATASET)}.{q(table)}"
    agg = (
        f"CAST(sum({q(value)}) AS VARCHAR)"
        if incoming[value] in ("DOUBLE", "BIGINT", "INTEGER")
        else f"string_agg(DISTINCT CAST({q(value)} AS VARCHAR), ',' ORDER BY "
        f"CAST({q(value)} AS VARCHAR))"
    )
    real = "NOT coalesce(n._deleted, false)" if "_deleted" in incoming else "true"
    sql = f"""
        INSERT INTO {q(DATASET)}.{HISTORY_TABLE}
        WITH new_rows AS (
            SELECT * FROM _new n WHERE {real}
              AND n.container_id IN (SELECT owner FROM _owners)
        ), stamp AS (
            SELECT n.container_id, any_value({_observed(incoming, ctx)}) AS observed_at,
                   any_value(n.fetched_at) AS fetched_at,
                   any_value({_notification(incoming)}) AS notification_id
            FROM _new n WHERE n.container_id IN (SELECT owner FROM _owners)
            GROUP BY n.container_id
        ), old AS (
            SELECT container_id, coalesce({q(name)}, '?') AS k, {agg} AS v
            FROM {dst} WHERE container_id IN (SELECT owner FROM _owners) GROUP BY ALL
        ), new AS (
            SELECT container_id, coalesce({q(name)}, '?') AS k, {agg} AS v
            FROM new_rows GROUP BY ALL
        )
        SELECT 'container', s.container_id, '{prefix}:' || coalesce(new.k, old.k), old.v,
               new.v, s.observed_at, s.fetched_at, ?, s.notification_id, ?
        FROM old FULL JOIN new ON old.container_id = new.container_id AND old.k = new.k
        JOIN stamp s ON s.container_id = coalesce(new.container_id, old.container_id)
        WHERE old.v IS DISTINCT FROM new.v
    """
    return _count(con.execute(sql, [ctx.how, ctx.load_id]))


def record_removed(
    con: duckdb.DuckDBPyConnection, table: str, ctx: Context, scanned_at: dt.datetime
) -> int:
    """Append a ``listed`` change (``true`` to ``false``) for each id in temp table ``_gone``:
    the records of ``table`` the complete full scan that started at ``scanned_at`` (this
    machine's clock) no longer found. Call before they are deleted. Returns rows appended."""
    if table not in ENTITY:
        return 0
    ensure_table(con)
    sql = f"""
        INSERT INTO {q(DATASET)}.{HISTORY_TABLE}
        SELECT '{ENTITY[table]}', id, 'listed', 'true', 'false', ?, ?, ?, NULL, ? FROM _gone
    """
    observed = scanned_at + ctx.clock_offset
    return _count(con.execute(sql, [observed, scanned_at, ctx.how, ctx.load_id]))


def _count(cur: duckdb.DuckDBPyConnection) -> int:
    row = cur.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


#: History fields of the binding LFD, a risk output (:func:`record_binding`).
BINDING_FIELD, BINDING_BASIS_FIELD = "lfd_binding", "binding_basis"


def record_binding(
    con: duckdb.DuckDBPyConnection, run_id: str, observed_at: dt.datetime | None = None
) -> int:
    """Append the changes of the binding LFD of ``analytics.demurrage_risk`` (``lfd_date`` as
    field ``lfd_binding``, ``lfd_source`` as ``binding_basis``) against the last values history
    holds; ``how`` is ``risk`` and ``load_id`` is ``run_id``. Call it after the risk table is
    published, in the same transaction when there is one. Returns rows appended (0 without a
    risk table)."""
    if not {"container_id", "lfd_date", "lfd_source"} <= set(
        column_types(con, "analytics", "demurrage_risk")
    ):
        return 0
    ensure_table(con)
    h = f"{q(DATASET)}.{HISTORY_TABLE}"
    sql = f"""
        INSERT INTO {h}
        WITH now AS (
            SELECT container_id AS id, unnest([
                {{'field': '{BINDING_FIELD}', 'new': CAST(CAST(lfd_date AS DATE) AS VARCHAR)}},
                {{'field': '{BINDING_BASIS_FIELD}', 'new': CAST(lfd_source AS VARCHAR)}}
            ], recursive := true)
            FROM analytics.demurrage_risk
        ), last AS (
            -- arg_max_null: a binding cleared last (new_value NULL) is the last value
            SELECT entity_id AS id, field, arg_max_null(new_value, observed_at) AS old
            FROM {h} WHERE entity = 'container'
              AND field IN ('{BINDING_FIELD}', '{BINDING_BASIS_FIELD}')
            GROUP BY ALL
        )
        SELECT 'container', now.id, now.field, last.old, now.new, coalesce(?, now()), now(),
               'risk', NULL, ?
        FROM now LEFT JOIN last ON last.id = now.id AND last.field = now.field
        WHERE last.old IS DISTINCT FROM now.new AND (last.id IS NOT NULL OR now.new IS NOT NULL)
    """
    return _count(con.execute(sql, [observed_at, run_id]))
