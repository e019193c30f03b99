"""The risk rows of a PostgreSQL warehouse in two slots: ``analytics.demurrage_risk`` is a view.

The rows live in a table partitioned in two slots, ``freetime_risk.slot_a`` and ``slot_b``
(the partitions of ``freetime_risk.slots`` by its column ``slot``), and the one row of
``freetime_risk.published`` says which slot is published. ``analytics.demurrage_risk`` is a
view of the published slot's rows (without the column ``slot``): the executor prunes the
other partition once it read the pointer, so a query of the view reads one slot, by the
same index a query of a table would use. A full risk publish writes the slot nobody reads
(DELETE, then COPY) and flips the pointer in its transaction: until the commit every reader
reads the old slot, untouched (its pages all-visible since the last publish vacuumed it, so
a dashboard's aggregate stays an index-only scan); from the commit on, the new one, which the
publisher vacuums right after (:func:`vacuum`). Nothing a reader does waits for the publish,
and no reader sees half of it.

A warehouse whose ``demurrage_risk`` is a table (an older freetime), or whose slots have other
columns than the engine's rows (a newer freetime), gets new slots and a new view in the
publish's transaction (a brief lock, as a change of a table's columns takes anyway).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg2
import pyarrow as pa

from pipelines.config import ANALYTICS_SCHEMA as A
from pipelines.config import Warehouse
from pipelines.pg.connection import connection
from pipelines.warehouse import quote

log = logging.getLogger("freetime.pg.slots")

#: the schema of the slots and of the pointer (not one users query: they read the view)
SCHEMA = "freetime_risk"
SLOTS = f"{SCHEMA}.slots"
POINTER = f"{SCHEMA}.published"
RISK = f"{A}.demurrage_risk"
#: the indexes of each slot: the tool server's lookup by container, and the count and cost by
#: terminal and level a dashboard refreshes (an index-only scan of a few narrow columns, the
#: slot among them for the view's filter): ``(suffix, keys, covered)``. Each slot has its own
#: (not attached to an index of ``slots``): the publish builds the spare slot's after its
#: COPY, from sorted rows, as compact as a new table's
INDEXES = (
    ("container_id", ("container_id",), ()),
    (
        "by_terminal",
        ("pod_terminal_name", "risk_level"),
        ("days_to_lfd", "projected_demurrage", "accrued_demurrage", "slot"),
    ),
)


#: rows per batch of a bulk ingest (see :func:`batches`)
BATCH_ROWS = 50_000


def batches(rows: pa.Table) -> pa.RecordBatchReader:
    """``rows`` as a stream of batches of :data:`BATCH_ROWS` (slices, not copies): ADBC's
    driver encodes a whole batch before it sends any of it, so in one batch the server waits
    for the client's encoding of every row and the client for the server's; batch by batch,
    one encodes the next while the other writes the last, and the buffer is one batch."""
    return pa.RecordBatchReader.from_batches(rows.schema, rows.to_batches(BATCH_ROWS))


def slot_table(slot: str) -> str:
    """The qualified table of ``slot`` (``a`` or ``b``)."""
    return f"{SCHEMA}.slot_{slot}"


def published_slot(cur: Any) -> str | None:
    """The published slot (``a`` or ``b``) when ``analytics.demurrage_risk`` is the view over
    the slots; None when it is a table or absent."""
    cur.execute(
        f"SELECT c.relkind::text, to_regclass('{POINTER}') IS NOT NULL FROM pg_class c "
        f"WHERE c.oid = to_regclass('{RISK}')"
    )
    row = cur.fetchone()
    if row is None or row[0] != "v" or not row[1]:
        return None
    cur.execute(f"SELECT slot FROM {POINTER}")
    found = cur.fetchone()
    return str(found[0]) if found else None


def published_table(cur: Any) -> str:
    """Where the published risk rows are written in place (a partial run; an INSERT that
    names the risk columns: the slot's own column defaults to it): the published slot, or
    ``analytics.demurrage_risk`` itself when it is still a table."""
    slot = published_slot(cur)
    return slot_table(slot) if slot else RISK


def _slot_columns(cur: Any) -> list[tuple[str, str]]:
    """The columns of the slots but ``slot``, in order."""
    # here: the views module imports polars, which the readers of SCHEMA never need
    from pipelines.pg.views import columns_of

    return [(c, t) for c, t in columns_of(cur, SCHEMA, "slots").items() if c != "slot"]


def _in_slot(rows: pa.Table, slot: str) -> pa.RecordBatchReader:
    """``rows`` with the column ``slot`` last, as :func:`batches` streams them."""
    return batches(rows.append_column("slot", pa.array([slot] * rows.num_rows, pa.string())))


def publish_slot(cur: Any, rows: pa.Table, columns: list[tuple[str, str]]) -> str:
    """Inside the caller's transaction: ``rows`` (whose bulk ingest gives ``columns``) become
    the published risk rows; the slot they were written to. The slot nobody reads is
    emptied, filled and published by the pointer; new slots and view when there are none
    yet or their columns are not ``columns`` (the views over ``demurrage_risk`` go with the
    old view: the caller creates them again)."""
    current = published_slot(cur)
    names = {c for c, _ in columns} | {"slot"}
    if current is not None and _slot_columns(cur) == columns:
        target = "b" if current == "a" else "a"
        # DELETE, not TRUNCATE: TRUNCATE would lock out every reader of the view until the
        # commit (a query of the view locks both slots, even the one it prunes)
        cur.execute(f"DELETE FROM {slot_table(target)}")
        cur.adbc_ingest(
            f"slot_{target}", _in_slot(rows, target), mode="append", db_schema_name=SCHEMA
        )
        _index(cur, target, names)
        cur.execute(f"UPDATE {POINTER} SET slot = '{target}'")
        return target
    cur.execute(f"SELECT relkind::text FROM pg_class WHERE oid = to_regclass('{RISK}')")
    kind = cur.fetchone()
    if kind is not None:
        cur.execute(f"DROP {'VIEW' if kind[0] == 'v' else 'TABLE'} {RISK} CASCADE")
    cur.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    cur.execute(f"DROP TABLE IF EXISTS {SLOTS}, {slot_table('a')}, {slot_table('b')} CASCADE")
    # slot a takes the rows and the column types their bulk ingest gives; the partitioned
    # table is made like it, then takes it as a partition, and slot b is made empty
    cur.adbc_ingest("slot_a", _in_slot(rows, "a"), mode="create", db_schema_name=SCHEMA)
    cur.execute(f"CREATE TABLE {SLOTS} (LIKE {slot_table('a')}) PARTITION BY LIST (slot)")
    cur.execute(f"ALTER TABLE {SLOTS} ATTACH PARTITION {slot_table('a')} FOR VALUES IN ('a')")
    cur.execute(f"CREATE TABLE {slot_table('b')} PARTITION OF {SLOTS} FOR VALUES IN ('b')")
    for slot in ("a", "b"):
        cur.execute(f"ALTER TABLE {slot_table(slot)} ALTER slot SET DEFAULT '{slot}'")
    for slot in ("a", "b"):
        _index(cur, slot, names)
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {POINTER} (one boolean PRIMARY KEY DEFAULT true "
        "CHECK (one), slot text NOT NULL CHECK (slot IN ('a', 'b')))"
    )
    cur.execute(
        f"INSERT INTO {POINTER} (slot) VALUES ('a') "
        "ON CONFLICT (one) DO UPDATE SET slot = excluded.slot"
    )
    # the pointer is read once per query (an InitPlan), and the executor then prunes the
    # partition of the other slot: never scanned
    listed = ", ".join(quote(c) for c, _ in columns)
    cur.execute(
        f"CREATE VIEW {RISK} AS SELECT {listed} FROM {SLOTS} "
        f"WHERE slot = (SELECT slot FROM {POINTER})"
    )
    return "a"


#: the longest a vacuum waits for the snapshots taken before it (see :func:`_settle`)
SETTLE_SECONDS = 2.0


def _settle(cur: Any) -> None:
    """Wait, at most :data:`SETTLE_SECONDS`, until no other session of the database holds a
    snapshot taken before now: a vacuum keeps every row such a snapshot may still see (the
    deleted ones) and marks no page holding rows it may not see (the new ones) visible to
    all. Readers' queries are short: the wait is theirs. (A writer that may not see other
    roles' sessions, without ``pg_read_all_stats``, does not wait: its vacuum does less.)"""
    cur.execute("SELECT clock_timestamp()")
    row = cur.fetchone()
    assert row is not None
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline:
        cur.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend' "
            "AND backend_xmin IS NOT NULL AND xact_start < %s)",
            [row[0]],
        )
        older = cur.fetchone()
        if not (older and older[0]):
            return
        time.sleep(0.02)


def clear_spare(warehouse: Warehouse) -> None:
    """Before a full publish, outside its transaction (as its writer): drop the indexes of the
    slot nobody reads, empty it and vacuum it, so that the publish's COPY fills emptied pages
    (the slot as compact as a new table, no dead rows among the new ones, no index to update
    row by row) and the publish's own DELETE finds nothing. No reader reads that slot; none
    waits (the file is not truncated, which would lock it). An index whose drop waited
    longer than :data:`SETTLE_SECONDS` for a reader's open transaction is left (invalid, or
    whole): the publish then builds the slot's index under another name."""
    with connection(warehouse, autocommit=True) as con, con.cursor() as cur:
        slot = published_slot(cur)
        if slot is None:
            return
        spare = slot_table("b" if slot == "a" else "a")
        cur.execute("SET synchronous_commit = on")  # see pipelines.pg.risk._publish
        cur.execute(
            f"SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = '{spare}'::regclass"
        )
        indexes = [str(r[0]) for r in cur.fetchall()]
        # CONCURRENTLY: waits for the transactions that hold the slot (every query of the
        # view does, briefly), never makes one wait; a transaction left open holds it
        # longer than the run should wait
        cur.execute(f"SET lock_timeout = '{int(SETTLE_SECONDS * 1000)}ms'")
        for index in indexes:
            try:
                cur.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index}")
            except psycopg2.errors.LockNotAvailable:
                log.warning("the spare risk slot keeps its index %s: a session holds it", index)
                break
        cur.execute("RESET lock_timeout")
        cur.execute(f"DELETE FROM {spare}")
        _settle(cur)
        cur.execute(f"VACUUM (TRUNCATE false) {spare}")


def _index(cur: Any, slot: str, names: set[str]) -> None:
    """The :data:`INDEXES` of ``slot`` whose columns are among ``names`` and that it lacks (a
    valid index of that name, or of that name and a number): an invalid one left by
    :func:`clear_spare` keeps its name, the new one takes the first free."""
    cur.execute(
        "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        f"WHERE i.indrelid = '{slot_table(slot)}'::regclass"
    )
    have = {str(name): bool(valid) for name, valid in cur.fetchall()}
    for suffix, keys, covered in INDEXES:
        base = f"slot_{slot}_{suffix}"
        taken = [n for n in have if n == base or n.startswith(base + "_")]
        if not set(keys + covered) <= names or any(have[n] for n in taken):
            continue
        name, k = base, 0
        while name in have:
            k += 1
            name = f"{base}_{k}"
        include = f" INCLUDE ({', '.join(covered)})" if covered else ""
        cur.execute(f"CREATE INDEX {name} ON {slot_table(slot)} ({', '.join(keys)}){include}")


def vacuum(warehouse: Warehouse, slot: str) -> None:
    """After the publish's commit: ``VACUUM (ANALYZE)`` the slot just published, once the
    snapshots from before the commit are gone, so that its pages are all-visible (a
    dashboard's aggregate an index-only scan that reads no row) and its statistics are the
    new rows'. Waits for no reader's lock (it takes none they wait for)."""
    with connection(warehouse, autocommit=True) as con, con.cursor() as cur:
        _settle(cur)
        cur.execute(f"VACUUM (ANALYZE) {slot_table(slot)}")
