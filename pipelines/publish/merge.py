"""The merge rules: how a staged load's rows replace the warehouse's, table by table.

The newest ``fetched_at`` of a key wins, whoever wrote it and whenever it is published, so an
older record never overwrites a newer one; a container's holds and fees are replaced with it;
a complete full scan removes the records no list served, unless a writer published them after
the scan started. History (:mod:`pipelines.history`) records each change as it is merged.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import duckdb

from pipelines import history
from pipelines.config import DATASET
from pipelines.publish.columns import NOT_PUBLISHED, align_target
from pipelines.warehouse import column_types, quote, table_names


@dataclass(frozen=True)
class Merge:
    """How a table's incoming rows are merged into ``terminal49``.

    ``key``: the columns that identify a row. ``version``: the column whose newest value wins
    (None: the latest load wins). ``parent``: for a child table (a container's holds, fees),
    the parent table; its rows are replaced all together, with the parent's version, and a
    placeholder row (``_deleted`` true) stands for "reported, and empty".
    """

    key: tuple[str, ...] = ("id",)
    version: str | None = "fetched_at"
    parent: str | None = None
    parent_key: str = "container_id"


#: Every table any writer writes, with its merge rule: the one place they are declared.
#: Tables are published in this order (a child after its parent).
MERGES: dict[str, Merge] = {
    "containers": Merge(),
    "container_holds": Merge(key=("container_id", "position"), parent="containers"),
    "container_fees": Merge(key=("container_id", "position"), parent="containers"),
    "shipments": Merge(),
    "terminals": Merge(),
    "ports": Merge(),
    "documents": Merge(),
    "email_submissions": Merge(),
    "document_representations": Merge(),
    "webhook_notifications": Merge(version=None),
    "transport_events": Merge(),
    "estimated_events": Merge(),
    "container_changes": Merge(key=("notification_id", "field"), version=None),
}
#: What a complete full scan of a list may remove: table -> the child tables that go with it.
LISTED = {"containers": ("container_holds", "container_fees"), "shipments": ()}


@dataclass
class RowCounts:
    """Rows published (inserted), skipped (the warehouse held newer), removed; per table."""

    written: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    removed: dict[str, int] = field(default_factory=dict)

    def add(self, counts: dict[str, int], table: str, n: int) -> None:
        if n:
            counts[table] = counts.get(table, 0) + n


def merge_table(
    con: duckdb.DuckDBPyConnection,
    inc: str,
    table: str,
    rule: Merge,
    load_id: str,
    out: RowCounts,
    ctx: history.Context | None = None,
) -> None:
    incoming = column_types(con, inc, table)
    align_target(con, table, incoming)
    src = f"{quote(inc)}.{quote(table)}"
    dst = f"{quote(DATASET)}.{quote(table)}"
    keys = ", ".join(quote(k) for k in rule.key)
    version = quote(rule.version) if rule.version else "rowid"
    # the newest incoming row per key (a load can see a record twice; a job re-run after a kill
    # can append the same rows twice). Only their row ids are kept aside: the rows are read
    # from the incoming table through the view, so memory stays bounded whatever the load's size
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE _new_ids AS SELECT arg_max(rowid, {version}) AS rid "
        f"FROM {src} WHERE _dlt_load_id = ? GROUP BY {keys}",
        [load_id],
    )
    _define_new(con, src, load_id)
    if rule.parent is not None:
        _merge_children(con, table, rule, src, dst, load_id, incoming, out, ctx)
        return
    if ctx is not None:
        history.record_rows(con, table, incoming, ctx)
    on = " AND ".join(f"t.{quote(k)} = n.{quote(k)}" for k in rule.key)
    newer = f"t.{version} > n.{version}" if rule.version else "false"
    skipped = _count(
        con,
        f"SELECT count(*) FROM _new n WHERE EXISTS (SELECT 1 FROM {dst} t WHERE {on} AND {newer})",
    )
    con.execute(f"DELETE FROM {dst} t USING _new n WHERE {on} AND NOT ({newer})")
    cols = ", ".join(quote(c) for c in incoming if c not in NOT_PUBLISHED)
    inserted = _count(
        con,
        f"INSERT INTO {dst} ({cols}) SELECT {cols} FROM _new n "
        f"WHERE NOT EXISTS (SELECT 1 FROM {dst} t WHERE {on})",
    )
    out.add(out.written, table, inserted)
    out.add(out.skipped, table, skipped)


def _merge_children(
    con: duckdb.DuckDBPyConnection,
    table: str,
    rule: Merge,
    src: str,
    dst: str,
    load_id: str,
    incoming: Mapping[str, str],
    out: RowCounts,
    ctx: history.Context | None = None,
) -> None:
    """Replace the children of every container whose newest fetch this load holds, unless the
    warehouse holds a newer version of that container (or of its children)."""
    pk, version = quote(rule.parent_key), quote(rule.version or "fetched_at")
    parent = f"{quote(DATASET)}.{quote(rule.parent or '')}"
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE _owners AS SELECT {pk} AS owner, max({version}) AS v "
        f"FROM _new GROUP BY {pk}"
    )
    older = _count(  # only the rows of each container's newest fetch
        con,
        f"DELETE FROM _new_ids WHERE rid IN (SELECT n.rowid FROM {src} n "
        f"WHERE n.rowid IN (SELECT rid FROM _new_ids) "
        f"AND n.{version} < (SELECT v FROM _owners o WHERE o.owner = n.{pk}))",
    )
    if older:
        _define_new(con, src, load_id)
    newer_parent = (
        f" OR EXISTS (SELECT 1 FROM {parent} p WHERE p.id = o.owner AND p.fetched_at > o.v)"
        if rule.parent in table_names(con, DATASET)
        else ""
    )
    con.execute(
        f"DELETE FROM _owners o WHERE EXISTS (SELECT 1 FROM {dst} t WHERE t.{pk} = o.owner "
        f"AND t.{version} > o.v){newer_parent}"
    )
    kept = _count(con, "SELECT count(*) FROM _owners")
    owners = _count(con, f"SELECT count(DISTINCT {pk}) FROM _new")
    if ctx is not None:
        history.record_children(con, table, incoming, ctx)
    con.execute(f"DELETE FROM {dst} t USING _owners o WHERE t.{pk} = o.owner")
    cols = ", ".join(quote(c) for c in incoming if c not in NOT_PUBLISHED)
    real = "NOT coalesce(n._deleted, false)" if "_deleted" in incoming else "true"
    if kept < owners:
        real += f" AND n.{pk} IN (SELECT owner FROM _owners)"
    inserted = _count(con, f"INSERT INTO {dst} ({cols}) SELECT {cols} FROM _new n WHERE {real}")
    out.add(out.written, table, inserted)
    out.add(out.skipped, table, owners - kept)


def remove_unlisted(
    con: duckdb.DuckDBPyConnection,
    inc: str,
    table: str,
    children: Sequence[str],
    load_id: str,
    scan_started: dt.datetime,
    out: RowCounts,
    ctx: history.Context,
    loads_table: str,
) -> None:
    """After a complete full scan: remove the records of ``table`` (and their children) that
    the API no longer lists, unless they were fetched after the scan started or published
    after it started (by any writer: a webhook may deliver, during the scan, a record the API
    produced before it; ``loads_table`` logs when each load was published); history records
    each removal."""
    dst = f"{quote(DATASET)}.{quote(table)}"
    later = ""
    if "_dlt_load_id" in column_types(con, DATASET, table):
        later = (
            f"AND coalesce(t._dlt_load_id, '') NOT IN (SELECT load_id FROM "
            f"{quote(DATASET)}.{quote(loads_table)} WHERE published_at >= $started)"
        )
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE _gone AS SELECT id FROM {dst} t "
        f"WHERE t.fetched_at < $started {later} AND NOT EXISTS (SELECT 1 FROM "
        f"{quote(inc)}.{quote(table)} i WHERE i._dlt_load_id = $load AND i.id = t.id)",
        {"started": scan_started, "load": load_id},
    )
    history.record_removed(con, table, ctx, scan_started)
    removed = _count(con, f"DELETE FROM {dst} WHERE id IN (SELECT id FROM _gone)")
    out.add(out.removed, table, removed)
    for child in children:
        if child in table_names(con, DATASET):
            n = _count(
                con,
                f"DELETE FROM {quote(DATASET)}.{quote(child)} "
                "WHERE container_id IN (SELECT id FROM _gone)",
            )
            out.add(out.removed, child, n)


def _define_new(con: duckdb.DuckDBPyConnection, src: str, load_id: str) -> None:
    """View ``_new``: the rows of ``_new_ids``, read from the incoming table. When they are all
    the load's rows (the usual case: no record seen twice), the view filters on the load id
    alone, so that no statement has to hold the ids in a hash table."""
    of_load = "_dlt_load_id = '" + load_id.replace("'", "''") + "'"
    rows = _count(con, f"SELECT count(*) FROM {src} WHERE {of_load}")
    chosen = _count(con, "SELECT count(*) FROM _new_ids")
    which = of_load if rows == chosen else "rowid IN (SELECT rid FROM _new_ids)"
    con.execute(f"CREATE OR REPLACE TEMP VIEW _new AS SELECT * FROM {src} WHERE {which}")


def _count(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    row = con.execute(sql).fetchone()
    return int(row[0]) if row and row[0] is not None else 0
