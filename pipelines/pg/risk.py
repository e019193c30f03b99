"""Demurrage risk on a PostgreSQL warehouse: :func:`pipelines.analytics.publish_risk`'s contract.

The inputs are read with a columnar driver (ADBC's PostgreSQL driver: ``terminal49`` tables
straight into Arrow, then polars), the rules are those of the DuckDB path (one
:func:`pipelines.analytics.risk.clock` for the risk rows and
:func:`pipelines.analytics.charges.compute_charges`), and everything the DuckDB path publishes
is published in one PostgreSQL transaction: ``analytics.demurrage_risk`` (the old rows copied
to ``demurrage_risk_previous``), ``analytics.charges`` and ``analytics.charge_days``, the
views (:mod:`pipelines.pg.views`), the binding LFD's history rows and the alerts the run
raises (``analytics.alert_outbox``). ``demurrage_risk`` is a view over the published one of
two slots (:mod:`pipelines.pg.slots`): the new rows go into the other slot by ADBC's bulk
ingest (COPY) and the commit publishes it, so a reader is never blocked, sees every table
before or after the publish, whole, and reads rows a vacuum marked visible to all (a change
of the columns takes a brief lock instead). The charges are replaced by DELETE and COPY in
place. Two risk runs of one warehouse publish one after the other (a transaction-level
advisory lock).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from pipelines.alerts.rules import NEEDED
from pipelines.analytics.charges import DAYS_TABLE, PARTIES_TABLE, compute_charges
from pipelines.analytics.publish import (
    PARTIAL_FACTS_SQL,
    URGENCY_ORDER,
    RiskSummary,
    WarehouseIncompatible,
    partial_fits,
    read_frames,
    summarise,
)
from pipelines.analytics.risk import (
    AT_RISK_LEVELS,
    LEVELS,
    UnconvertedLfds,
    WarehouseFrames,
    clock,
    risk_of,
)
from pipelines.analytics.tariffs import load_tariffs
from pipelines.config import ANALYTICS_SCHEMA as A
from pipelines.config import DATASET as T
from pipelines.config import Warehouse
from pipelines.history import BINDING_BASIS_FIELD, BINDING_FIELD
from pipelines.pg.connection import check_writable, dsn_with_password, masked
from pipelines.pg.lock import writer_lock
from pipelines.pg.publish import DUCKDB_NAMES, HISTORY, HISTORY_COLUMNS, ensure_history
from pipelines.pg.reader import ensure_lookup_indexes
from pipelines.pg.slots import SCHEMA as SLOTS
from pipelines.pg.slots import batches, clear_spare, publish_slot, published_table, vacuum
from pipelines.pg.views import create_views, raise_alerts
from pipelines.warehouse import WarehouseMissing, WarehouseUnusable, quote

RISK, PREVIOUS = "demurrage_risk", "demurrage_risk_previous"
#: the advisory lock key of risk publishers (held for a publish's transaction)
RISK_KEY = int.from_bytes(hashlib.sha256(b"freetime.risk").digest()[:8], "big") >> 1


@contextmanager
def adbc_connection(warehouse: Warehouse) -> Iterator[Any]:
    """An ADBC connection (a transaction until commit), UTC session; WarehouseUnusable with
    one masked line when it cannot connect."""
    import adbc_driver_manager
    import adbc_driver_postgresql.dbapi as adbc

    try:
        con = adbc.connect(dsn_with_password(warehouse))
    except adbc_driver_manager.Error as exc:
        # the driver prefixes libpq's own message: keep libpq's, as psycopg2 gives it
        text = " ".join(str(exc).split()).removeprefix("IO: [libpq] Failed to connect: ")
        raise WarehouseUnusable(
            f"cannot connect to the warehouse {warehouse.display}: {masked(text, warehouse)}"
        ) from None
    try:
        with con.cursor() as cur:
            cur.execute("SET TIME ZONE 'UTC'")
        yield con
    finally:
        con.close()


def _types(cur: Any, schema: str) -> dict[str, dict[str, str]]:
    """``{table: {column: DuckDB type name}}`` of ``schema``."""
    cur.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        f"WHERE table_schema = '{schema}' ORDER BY table_name, ordinal_position"
    )
    out: dict[str, dict[str, str]] = {}
    for table, column, typ in cur.fetchall():
        out.setdefault(table, {})[column] = DUCKDB_NAMES.get(typ, typ.upper())
    return out


def _frame(cur: Any, sql: str) -> pl.DataFrame:
    cur.execute(sql)
    df = pl.from_arrow(cur.fetch_arrow_table())
    assert isinstance(df, pl.DataFrame)
    return df


def read_warehouse(cur: Any) -> WarehouseFrames:
    """:func:`pipelines.analytics.read_warehouse` over ADBC: the needed columns only, in
    Arrow; WarehouseIncompatible for a column compute_risk cannot read."""
    return read_frames(_types(cur, T), lambda _table, sql: _frame(cur, sql))


def publish_risk(
    warehouse: Warehouse,
    as_of: datetime | None = None,
    tariffs_path: str | Path | None = None,
    *,
    wait_seconds: float | None = None,
    on_wait: Callable[[str], None] | None = None,
    what: str = "risk publish",
) -> RiskSummary:
    """Recompute the risk table at ``as_of`` (default now, UTC) and publish it in one
    transaction, holding the writers' advisory lock as ``what`` (see
    :func:`pipelines.pg.lock.writer_lock` for ``wait_seconds`` and ``on_wait``). Raises
    ``TariffError``, ``WarehouseMissing`` (no ``terminal49.containers``),
    ``WarehouseIncompatible``, ``WarehouseUnusable`` or ``WriterBusy``. Before the
    transaction the spare slot is emptied, after it the published one vacuumed
    (:mod:`pipelines.pg.slots`), under the same lock."""
    started = time.perf_counter()
    tariffs = load_tariffs(tariffs_path)
    as_of = as_of or datetime.now(UTC)
    as_of = (as_of if as_of.tzinfo else as_of.replace(tzinfo=UTC)).astimezone(UTC)
    check_writable(warehouse, (A, SLOTS))
    with writer_lock(warehouse, what, wait_seconds, on_wait):
        clear_spare(warehouse)
        df, slot = _compute_and_publish(warehouse, as_of, tariffs)
        vacuum(warehouse, slot)  # still a writer: the next one finds the slots vacuumed
    return summarise(df, warehouse.display, as_of, started)


def _compute_and_publish(
    warehouse: Warehouse, as_of: datetime, tariffs: pl.DataFrame
) -> tuple[pl.DataFrame, str]:
    """:func:`publish_risk`'s transaction (the caller holds the writers' lock): the inputs
    read, the rows computed and published; the risk rows and the slot published."""
    with adbc_connection(warehouse) as con, con.cursor() as cur:
        if "containers" not in _types(cur, T):
            raise WarehouseMissing(
                f"the warehouse {warehouse.display} has no {T}.containers table: run "
                "`freetime load` first"
            )
        try:
            c = clock(read_warehouse(cur), as_of, tariffs)
            df = risk_of(c).collect(engine="in-memory")
            parties, days = compute_charges(c).collect()
        except (pl.exceptions.PolarsError, UnconvertedLfds) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise WarehouseIncompatible(
                f"cannot compute risk from {warehouse.display}: {first}"
            ) from None
        try:
            slot = _publish(cur, df, parties, days, f"risk-{as_of.isoformat()}", as_of)
            con.commit()
        except BaseException:
            con.rollback()
            raise
    return df, slot


def _publish(
    cur: Any,
    df: pl.DataFrame,
    parties: pl.DataFrame,
    days: pl.DataFrame,
    run_id: str,
    as_of: datetime,
) -> str:
    """Inside the caller's transaction: the rows of ``df`` replace ``analytics.demurrage_risk``
    (:func:`pipelines.pg.slots.publish_slot`), whose rows replace ``demurrage_risk_previous``;
    the engine's rows replace ``charges`` and ``charge_days``; then the views, the binding
    LFD's history and the alerts. The slot published, for :func:`pipelines.pg.slots.vacuum`
    after the commit."""
    cur.execute(f"SELECT pg_advisory_xact_lock({RISK_KEY})")
    # the commit waits for its WAL on disk even on a server with asynchronous commits: the
    # vacuum right after it marks the new rows visible to all only once it is there
    cur.execute("SET LOCAL synchronous_commit = on")
    cur.execute(f"CREATE SCHEMA IF NOT EXISTS {A}")
    tables = _columns(cur, A)
    previous = None
    if tables.get(RISK) is not None:
        # the alerts compare these columns only: the rest of the old rows is not read
        have = {c for c, _ in tables[RISK]}
        compared = ", ".join(c for c in NEEDED if c in have)
        previous = _frame(cur, f"SELECT {compared} FROM {A}.{RISK}") if compared else None
        if tables.get(PREVIOUS) == tables[RISK]:
            cur.execute(f"DELETE FROM {A}.{PREVIOUS}")
            cur.execute(f"INSERT INTO {A}.{PREVIOUS} SELECT * FROM {A}.{RISK}")
        else:
            cur.execute(f"DROP TABLE IF EXISTS {A}.{PREVIOUS} CASCADE")
            cur.execute(f"CREATE TABLE {A}.{PREVIOUS} AS SELECT * FROM {A}.{RISK}")
    for table, frame in ((PARTIES_TABLE, parties), (DAYS_TABLE, days)):
        _replace(cur, table, frame, tables.get(table))
    raise_alerts(cur, df, previous, as_of)
    rows = df.to_arrow()
    slot = publish_slot(cur, rows, _ingested_columns(cur, rows))
    create_views(cur, _types(cur, T))
    ensure_lookup_indexes(cur)  # a table created anew gets its lookup index again
    record_binding(cur, run_id, as_of)
    return slot


def _ingested_columns(cur: Any, rows: pa.Table) -> list[tuple[str, str]]:
    """The columns (name, PostgreSQL type) the bulk ingest of ``rows`` creates, from an empty
    temporary table: the rows themselves are written once, into their table (a copy through
    a temporary table cost as much again as the COPY)."""
    cur.execute("DROP TABLE IF EXISTS _new_rows")
    cur.adbc_ingest("_new_rows", rows.slice(0, 0), mode="create", temporary=True)
    columns = _temp_columns(cur, "_new_rows")
    cur.execute("DROP TABLE _new_rows")
    return columns


def _replace(
    cur: Any, table: str, frame: pl.DataFrame, published: list[tuple[str, str]] | None
) -> None:
    """The rows of ``frame`` replace those of ``analytics.<table>`` (whose columns are
    ``published``): DELETE, then the rows COPied straight into it, when the columns are the
    same; else a new table (the views over the old one go with it and are created again)."""
    rows = frame.to_arrow()
    if published == _ingested_columns(cur, rows):
        cur.execute(f"DELETE FROM {A}.{table}")
        cur.adbc_ingest(table, batches(rows), mode="append", db_schema_name=A)
    else:
        cur.execute(f"DROP TABLE IF EXISTS {A}.{table} CASCADE")
        cur.adbc_ingest(table, batches(rows), mode="create", db_schema_name=A)


def _columns(cur: Any, schema: str) -> dict[str, list[tuple[str, str]]]:
    cur.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        f"WHERE table_schema = '{schema}' ORDER BY table_name, ordinal_position"
    )
    out: dict[str, list[tuple[str, str]]] = {}
    for table, column, typ in cur.fetchall():
        out.setdefault(table, []).append((column, typ))
    return out


def record_binding(cur: Any, run_id: str, observed_at: datetime | None = None) -> None:
    """:func:`pipelines.history.record_binding` on PostgreSQL: the changes of the binding LFD
    (``lfd_binding``) and its basis (``binding_basis``) against the last values history
    holds, ``how`` ``risk``."""
    ensure_history(cur)
    cur.execute(
        f"""
        INSERT INTO {HISTORY} ({HISTORY_COLUMNS})
        WITH now AS (
            SELECT r.container_id AS id, v.field, v.new FROM {A}.{RISK} r
            CROSS JOIN LATERAL (VALUES
                ('{BINDING_FIELD}', CAST(CAST(r.lfd_date AS DATE) AS text)),
                ('{BINDING_BASIS_FIELD}', CAST(r.lfd_source AS text))
            ) AS v(field, new)
        ), last AS (
            SELECT DISTINCT ON (entity_id, field) entity_id AS id, field, new_value AS old
            FROM {HISTORY} WHERE entity = 'container'
              AND field IN ('{BINDING_FIELD}', '{BINDING_BASIS_FIELD}')
            ORDER BY entity_id, field, observed_at DESC
        )
        SELECT 'container', now.id, now.field, last.old, now.new,
               coalesce($1::timestamptz, now()), now(), 'risk', NULL, $2
        FROM now LEFT JOIN last ON last.id = now.id AND last.field = now.field
        WHERE last.old IS DISTINCT FROM now.new AND (last.id IS NOT NULL OR now.new IS NOT NULL)
        """,
        [observed_at, run_id],
    )


def at_risk(warehouse: Warehouse, levels: Sequence[str] | None = None) -> pl.DataFrame:
    """:func:`pipelines.analytics.at_risk` on PostgreSQL: published rows at ``levels``, most
    urgent first; WarehouseMissing before any risk run."""
    lv = list(levels or AT_RISK_LEVELS)
    bad = [x for x in lv if x not in LEVELS]
    if bad:
        raise ValueError(f"unknown risk level(s) {', '.join(bad)}; use {', '.join(LEVELS)}")
    with adbc_connection(warehouse) as con, con.cursor() as cur:
        if RISK not in _columns(cur, A):
            raise WarehouseMissing(
                f"no {A}.{RISK} in {warehouse.display}: run `freetime risk` first"
            )
        listed = ", ".join("'" + x + "'" for x in lv)  # checked against LEVELS above
        return _frame(
            cur, f"SELECT * FROM {A}.{RISK} WHERE risk_level IN ({listed}) {URGENCY_ORDER}"
        )


def publish_risk_of(
    warehouse: Warehouse,
    containers: Sequence[str],
    shipments: Sequence[str] = (),
    as_of: datetime | None = None,
    tariffs_path: str | Path | None = None,
    *,
    full_share: float,
    max_age: timedelta,
    wait_seconds: float | None = None,
    on_wait: Callable[[str], None] | None = None,
    what: str = "risk publish (changed containers)",
) -> RiskSummary:
    """:func:`pipelines.analytics.publish_risk_of` on PostgreSQL: the rows of ``containers``
    and of the containers of ``shipments`` recomputed and published in one transaction (risk,
    charges, charge days, previous, views, binding history, alerts), or a full
    :func:`publish_risk` in the same cases as on DuckDB."""
    started = time.perf_counter()
    tariffs = load_tariffs(tariffs_path)
    as_of = as_of or datetime.now(UTC)
    as_of = (as_of if as_of.tzinfo else as_of.replace(tzinfo=UTC)).astimezone(UTC)
    df: pl.DataFrame | None = None
    with (
        writer_lock(warehouse, what, wait_seconds, on_wait),
        adbc_connection(warehouse) as con,
        con.cursor() as cur,
    ):
        types = _types(cur, T)
        if "containers" not in types:
            raise WarehouseMissing(
                f"the warehouse {warehouse.display} has no {T}.containers table: run "
                "`freetime load` first"
            )
        try:
            count = _changed(cur, containers, shipments)
            if _partial_fits(cur, count, as_of, full_share, max_age):
                df = _publish_some(cur, types, tariffs, f"risk-{as_of.isoformat()}-{count}", as_of)
            if df is None:
                con.rollback()
            else:
                con.commit()
        except BaseException:
            con.rollback()
            raise
    if df is None:
        return publish_risk(
            warehouse, as_of, tariffs_path, wait_seconds=wait_seconds, on_wait=on_wait, what=what
        )
    summary = summarise(df, warehouse.display, as_of, started)
    summary.recomputed = count
    return summary


#: How each table's rows are narrowed to the containers of ``_changed``.
_ONLY = {
    "containers": "id IN (SELECT id FROM _changed)",
    "container_holds": "container_id IN (SELECT id FROM _changed)",
    "container_fees": "container_id IN (SELECT id FROM _changed)",
    "shipments": f"id IN (SELECT shipment_id FROM {T}.containers "
    "WHERE id IN (SELECT id FROM _changed))",
}


def _changed(cur: Any, containers: Sequence[str], shipments: Sequence[str]) -> int:
    """Temporary table ``_changed``: ``containers`` and the containers of ``shipments``
    (distinct ids); how many."""
    cur.execute("DROP TABLE IF EXISTS _changed")
    cur.execute("DROP TABLE IF EXISTS _changed_ships")
    cur.adbc_ingest(
        "_changed", pa.table({"id": pa.array(list(containers), pa.string())}), temporary=True
    )
    cur.adbc_ingest(
        "_changed_ships", pa.table({"id": pa.array(list(shipments), pa.string())}), temporary=True
    )
    cur.execute(
        f"INSERT INTO _changed SELECT c.id FROM {T}.containers c "
        "WHERE c.shipment_id IN (SELECT id FROM _changed_ships) "
        "AND c.id NOT IN (SELECT id FROM _changed)"
    )
    cur.execute("SELECT count(DISTINCT id) FROM _changed")
    return int(cur.fetchone()[0])


def _partial_fits(cur: Any, count: int, as_of: datetime, share: float, max_age: timedelta) -> bool:
    if RISK not in _columns(cur, A):
        return False
    cur.execute(PARTIAL_FACTS_SQL)
    total, oldest = cur.fetchone()
    return partial_fits(count, total, oldest, as_of, share, max_age)


def _publish_some(
    cur: Any, types: dict[str, dict[str, str]], tariffs: pl.DataFrame, run_id: str, as_of: datetime
) -> pl.DataFrame | None:
    """Inside the caller's transaction: the rows of the ``_changed`` containers recomputed
    and swapped in (DELETE and INSERT); the new risk rows, or None when a published table's
    columns differ from the engine's (the caller rolls back and runs in full)."""

    def fetch(table: str, sql: str) -> pl.DataFrame:
        return _frame(cur, f"{sql} WHERE {_ONLY[table]}" if table in _ONLY else sql)

    try:
        c = clock(read_frames(types, fetch), as_of, tariffs)
        df = risk_of(c).collect(engine="in-memory")
        parties, days = compute_charges(c).collect()
    except (pl.exceptions.PolarsError, UnconvertedLfds) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WarehouseIncompatible(f"cannot compute risk: {first}") from None
    cur.execute(f"SELECT pg_advisory_xact_lock({RISK_KEY})")
    tables = _columns(cur, A)
    new = {RISK: df, PARTIES_TABLE: parties, DAYS_TABLE: days}
    for table, frame in new.items():
        cur.execute(f"DROP TABLE IF EXISTS _new_{table}")
        cur.adbc_ingest(f"_new_{table}", frame.to_arrow(), mode="create", temporary=True)
        if tables.get(table) != _temp_columns(cur, f"_new_{table}"):
            return None
    have = {c for c, _ in tables[RISK]}
    compared = ", ".join(c for c in NEEDED if c in have)
    previous = (
        _frame(
            cur,
            f"SELECT {compared} FROM {A}.{RISK} WHERE container_id IN (SELECT id FROM _changed)",
        )
        if compared
        else None
    )
    _catch_up_previous(cur, tables)
    # the few changed rows are written in place, in the published slot (a few pages)
    for table in new:
        target = published_table(cur) if table == RISK else f"{A}.{table}"
        cur.execute(f"DELETE FROM {target} WHERE container_id IN (SELECT id FROM _changed)")
        names = ", ".join(quote(c) for c, _ in tables[table])  # the new rows' (checked above)
        cur.execute(f"INSERT INTO {target} ({names}) SELECT {names} FROM _new_{table}")
        cur.execute(f"DROP TABLE _new_{table}")
    create_views(cur, _types(cur, T))
    ensure_lookup_indexes(cur)
    record_binding(cur, run_id, as_of)
    raise_alerts(cur, df, previous, as_of)
    return df


def _catch_up_previous(cur: Any, tables: dict[str, list[tuple[str, str]]]) -> None:
    """``demurrage_risk_previous`` := the published risk table, by rewriting only the rows
    that differ (those the last publish changed; compared as text, which every column type
    has): copying the whole table would be most of a partial run's cost."""
    if tables.get(PREVIOUS) != tables[RISK]:
        cur.execute(f"DROP TABLE IF EXISTS {A}.{PREVIOUS} CASCADE")
        cur.execute(f"CREATE TABLE {A}.{PREVIOUS} AS SELECT * FROM {A}.{RISK}")
        return
    cur.execute("DROP TABLE IF EXISTS _differ")
    cur.execute(
        f"""CREATE TEMPORARY TABLE _differ AS
        SELECT coalesce(r.container_id, p.container_id) AS container_id
        FROM {A}.{RISK} r FULL JOIN {A}.{PREVIOUS} p ON p.container_id = r.container_id
        WHERE r::text IS DISTINCT FROM p::text"""
    )
    cur.execute(
        f"DELETE FROM {A}.{PREVIOUS} WHERE container_id IN (SELECT container_id FROM _differ)"
    )
    cur.execute(
        f"INSERT INTO {A}.{PREVIOUS} SELECT * FROM {A}.{RISK} "
        "WHERE container_id IN (SELECT container_id FROM _differ)"
    )
    cur.execute("DROP TABLE _differ")


def _temp_columns(cur: Any, name: str) -> list[tuple[str, str]]:
    cur.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = pg_my_temp_schema()::regnamespace::text "
        f"AND table_name = '{name}' ORDER BY ordinal_position"
    )
    return [(c, t) for c, t in cur.fetchall()]
