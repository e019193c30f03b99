"""The publishing transaction: a staged load becomes what every reader of the warehouse sees.

:func:`publish` runs under the writer lock (:mod:`.lock`), in one DuckDB transaction: every
load a staging slot completed and did not publish yet is merged table by table
(:mod:`.merge`), recorded in ``terminal49.freetime_loads``, and its rows leave the incoming
dataset; then the tables' comments and the history views are refreshed. A failure or a kill
at any moment leaves every table before or after the load, all together.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from pipelines import history
from pipelines.config import DATASET, incoming_dataset
from pipelines.history.views import create_views as create_history_views
from pipelines.publish.merge import LISTED, MERGES, RowCounts, merge_table, remove_unlisted
from pipelines.terminal49.docs import apply_comments
from pipelines.warehouse import quote, table_names

LOADS_TABLE = "freetime_loads"
SCAN_TABLE = "freetime_scan"  # one row per load, written by the load's source: what it scanned


@dataclass
class ScanInfo:
    """What a load scanned, recorded with its package (table :data:`SCAN_TABLE`)."""

    kind: str  # "full" or "incremental"
    started_at: dt.datetime  # this machine's clock, like every fetched_at
    window_from: dt.date | None = None
    #: the API's clock when the scan started (its Date header), which its filters compare with
    api_started_at: dt.datetime | None = None
    #: lists scanned completely and unfiltered: their records no longer listed are removed
    complete_lists: tuple[str, ...] = ()

    def table(self) -> pa.Table:
        return pa.table(
            {
                "kind": [self.kind],
                "started_at": pa.array([self.started_at], pa.timestamp("us", tz="UTC")),
                "window_from": pa.array([self.window_from], pa.date32()),
                "api_started_at": pa.array(
                    [self.api_started_at or self.started_at], pa.timestamp("us", tz="UTC")
                ),
                "complete_lists": [",".join(self.complete_lists)],
            }
        )


@dataclass
class WriteSummary(RowCounts):
    """What one write published, over every load it published."""

    load_ids: list[str] = field(default_factory=list)
    extract_seconds: float = 0.0


def pending_loads(con: duckdb.DuckDBPyConnection, slot: str) -> list[str]:
    """Loads dlt completed in staging slot ``slot``'s incoming dataset and not yet published,
    oldest first."""
    inc = incoming_dataset(slot)
    if "_dlt_loads" not in table_names(con, inc):
        return []
    done = ""
    if LOADS_TABLE in table_names(con, DATASET):
        done = f"AND load_id NOT IN (SELECT load_id FROM {quote(DATASET)}.{LOADS_TABLE})"
    rows = con.execute(
        f"SELECT load_id FROM {quote(inc)}._dlt_loads WHERE status = 0 {done} ORDER BY load_id"
    ).fetchall()
    return [r[0] for r in rows]


def publish(
    con: duckdb.DuckDBPyConnection,
    writer: str,
    finish: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
    *,
    slot: str | None = None,
) -> WriteSummary:
    """Publish the pending loads of ``writer``'s staging ``slot`` (default: the slot named
    ``writer``) into ``terminal49``, all in one transaction; ``finish`` runs inside it."""
    out = WriteSummary()
    slot = slot or writer
    loads = pending_loads(con, slot)
    if not loads:
        return out
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(DATASET)}")
        ensure_loads_table(con)
        for load_id in loads:
            _publish_load(con, writer, slot, load_id, out)
            out.load_ids.append(load_id)
        apply_comments(con, DATASET)
        create_history_views(con)
        if finish is not None:
            finish(con)
        con.execute("COMMIT")
    except BaseException:
        # DuckDB may have ended the transaction itself (a full disk invalidates it): a ROLLBACK
        # then fails with "no transaction is active", which must not hide the cause
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
    return out


def ensure_loads_table(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {quote(DATASET)}.{LOADS_TABLE} ("
        "load_id VARCHAR NOT NULL, writer VARCHAR NOT NULL, kind VARCHAR, "
        "scan_started_at TIMESTAMPTZ, api_started_at TIMESTAMPTZ, "
        "published_at TIMESTAMPTZ NOT NULL, window_from DATE, "
        "complete BOOLEAN NOT NULL, rows_written BIGINT NOT NULL, rows_skipped BIGINT NOT NULL, "
        "rows_removed BIGINT NOT NULL)"
    )


def _publish_load(
    con: duckdb.DuckDBPyConnection, writer: str, slot: str, load_id: str, out: WriteSummary
) -> None:
    inc = incoming_dataset(slot)
    present = table_names(con, inc)
    scan = _scan_info(con, inc, load_id) if SCAN_TABLE in present else None
    before = (dict(out.written), dict(out.skipped), dict(out.removed))
    ctx = history_context(writer, load_id, scan)
    for table, rule in MERGES.items():
        if table in present:
            merge_table(con, inc, table, rule, load_id, out, ctx)
    if scan is not None:
        for listed, children in LISTED.items():
            if listed in scan.complete_lists and listed in present:
                remove_unlisted(
                    con, inc, listed, children, load_id, scan.started_at, out, ctx, LOADS_TABLE
                )
    for table in present:
        if not table.startswith("_dlt_"):
            con.execute(
                f"DELETE FROM {quote(inc)}.{quote(table)} WHERE _dlt_load_id = ?", [load_id]
            )

    def delta(now: dict[str, int], then: dict[str, int]) -> int:
        return sum(now.values()) - sum(then.values())

    con.execute(
        f"INSERT INTO {quote(DATASET)}.{LOADS_TABLE} VALUES (?, ?, ?, ?, ?, now(), ?, ?, ?, ?, ?)",
        [
            load_id,
            writer,
            scan.kind if scan else None,
            scan.started_at if scan else None,
            scan.api_started_at if scan else None,
            scan.window_from if scan else None,
            scan is not None,
            delta(out.written, before[0]),
            delta(out.skipped, before[1]),
            delta(out.removed, before[2]),
        ],
    )


def history_context(writer: str, load_id: str, scan: ScanInfo | None) -> history.Context:
    """How history records this load: its kind, and the API's clock against ours."""
    if scan is None:
        return history.Context(load_id, "webhook" if writer == "webhooks" else writer)
    offset = scan.api_started_at - scan.started_at if scan.api_started_at else dt.timedelta(0)
    return history.Context(load_id, scan.kind, offset)


def _scan_info(con: duckdb.DuckDBPyConnection, inc: str, load_id: str) -> ScanInfo | None:
    row = con.execute(
        f"SELECT kind, started_at, window_from, complete_lists, api_started_at "
        f"FROM {quote(inc)}.{SCAN_TABLE} "
        "WHERE _dlt_load_id = ? LIMIT 1",
        [load_id],
    ).fetchone()
    if row is None:
        return None
    lists = tuple(x for x in (row[3] or "").split(",") if x)
    return ScanInfo(
        kind=row[0],
        started_at=row[1],
        window_from=row[2],
        complete_lists=lists,
        api_started_at=row[4],
    )
