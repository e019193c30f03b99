"""Writing the warehouse: the one path of every writer (the load, webhook apply, documents).

Contract of :func:`write`:
- **one writer at a time** per warehouse, across processes (:func:`writer_lock`): a second
  writer waits, saying for whom, and gives up with :class:`WriterBusy` after ``wait_seconds``;
- dlt extracts and normalises the source, then loads it into the writer's own **incoming**
  dataset in the same DuckDB file (``_incoming_<writer>``: appended rows tagged with dlt's load
  id). Nothing reaches ``terminal49`` yet, so a failure or a kill here changes nothing a reader
  sees, and a package that was not written stays pending and is written by the next run;
- then **one DuckDB transaction publishes** every load dlt completed there and that was not
  published yet (:func:`publish`): each table is merged by its rule in :data:`MERGES` (the
  newest ``fetched_at`` of a key wins, so an older record never overwrites a newer one; a
  container's holds and fees are replaced with it), a complete full scan removes the records
  the API no longer lists, the load is recorded in ``terminal49.freetime_loads``, and its rows
  leave the incoming dataset. A kill at any moment leaves every table before or after the load,
  all together;
- the counts returned are the rows published (inserted), the rows skipped because the
  warehouse held a newer version, and the rows removed: never rows that were not written.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dlt
import duckdb
import httpx
import pyarrow as pa
from dlt.common.storages import LoadStorage
from dlt.destinations.impl.duckdb.configuration import DuckDbCredentials
from dlt.pipeline.exceptions import PipelineStepFailed

from pipelines import history
from pipelines.config import DATASET, resolve_writer_wait, working_folder
from pipelines.history.views import create_views as create_history_views
from pipelines.terminal49 import settings
from pipelines.terminal49.client import Terminal49Error
from pipelines.terminal49.docs import apply_comments
from pipelines.terminal49.flatten import ColumnTypes
from pipelines.terminal49.scan import ScanIncomplete
from pipelines.warehouse import (
    WarehouseError,
    WarehouseLocked,
    column_types,
    quote,
    reading,
    table_names,
    writing,
)

log = logging.getLogger("freetime.write")

#: DuckDB settings of the writing connection: a bounded buffer pool (DuckDB spills to disk
#: beyond it) keeps the writer's memory bounded whatever the account's size.
WRITER_CONFIG: dict[str, Any] = {
    "memory_limit": "128MB",
    "preserve_insertion_order": False,
    "threads": 1,  # each DuckDB thread holds buffers of its own: one keeps the pool enough
}
LOADS_TABLE = "freetime_loads"
SCAN_TABLE = "freetime_scan"  # one row per load, written by the load's source: what it scanned


class LoadFailed(Exception):
    """The write did not complete; the warehouse holds what it held before. User-safe text."""


class WriterBusy(WarehouseError):
    """Another writer of the warehouse kept it for the whole wait."""


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
#: placeholder marks and what only history reads: they never reach terminal49
_NOT_PUBLISHED = ("_deleted", history.NOTIFICATION_COLUMN, history.OBSERVED_COLUMN)


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
class Published:
    """What :func:`write` published, over every load it published."""

    written: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    removed: dict[str, int] = field(default_factory=dict)
    load_ids: list[str] = field(default_factory=list)
    extract_seconds: float = 0.0

    def add(self, counts: dict[str, int], table: str, n: int) -> None:
        if n:
            counts[table] = counts.get(table, 0) + n


# --- one writer at a time -------------------------------------------------------------------

_held: dict[Path, int] = {}  # lock file -> depth, for a process that writes in nested steps
_held_guard = threading.Lock()


def _lock_path(duckdb_path: Path) -> Path:
    return working_folder(duckdb_path) / "writer.lock"


@contextlib.contextmanager
def writer_lock(
    duckdb_path: Path,
    what: str,
    wait_seconds: float | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold the warehouse's writer lock (an advisory lock on a file in its working folder,
    released by the system if the process dies). While another process holds it, wait: say
    once (``on_wait``, default a warning) whom we wait for, then :class:`WriterBusy` after
    ``wait_seconds`` (default :func:`pipelines.config.resolve_writer_wait`). Re-entrant within
    a process."""
    path = _lock_path(duckdb_path)
    with _held_guard:
        if path in _held:
            _held[path] += 1
            nested = True
        else:
            nested = False
    if nested:
        try:
            yield
        finally:
            with _held_guard:
                _held[path] -= 1
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        wait = resolve_writer_wait(wait_seconds)
        _acquire(fd, path, wait, on_wait or (lambda line: log.warning("%s", line)))
        os.ftruncate(fd, 0)
        holder = {"what": what, "pid": os.getpid(), "started_at": _now().isoformat()}
        os.write(fd, json.dumps(holder).encode())
        with _held_guard:
            _held[path] = 1
        try:
            yield
        finally:
            with _held_guard:
                del _held[path]
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing releases the lock


def _acquire(fd: int, path: Path, wait_seconds: float, on_wait: Callable[[str], None]) -> None:
    deadline = time.monotonic() + wait_seconds
    said = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            holder = _holder(path)
            if time.monotonic() >= deadline:
                raise WriterBusy(
                    f"the warehouse is being written by {holder} and was not free after "
                    f"{wait_seconds:.0f}s; try again later"
                ) from None
            if not said:
                on_wait(f"waiting for {holder} to finish writing the warehouse")
                said = True
            time.sleep(0.2)


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
        started = dt.datetime.fromisoformat(info["started_at"]).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"the {info['what']} (pid {info['pid']}) that started at {started}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another writer"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# --- dlt into the incoming dataset ----------------------------------------------------------


class _DropDltNoise(logging.Filter):
    """dlt warns on every Arrow table whose nullability differs from its schema (the flattener
    declares key columns non-null, dlt's schema keeps its own): noise here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "when merging arrow schema with dlt schema" not in record.getMessage()


_DLT_NOISE = _DropDltNoise()


def incoming_dataset(writer: str) -> str:
    """The dataset a writer's dlt pipeline loads into, before :func:`publish`."""
    return f"_incoming_{writer}"


def make_pipeline(duckdb_path: Path, writer: str) -> dlt.Pipeline:
    """The dlt pipeline of ``writer`` ("load", "webhooks", "documents"): its own working folder
    and state beside the warehouse, loading into :func:`incoming_dataset`."""
    dlt_logger = logging.getLogger("dlt")
    if _DLT_NOISE not in dlt_logger.filters:
        dlt_logger.addFilter(_DLT_NOISE)
    # publish() picks each load's rows by their load id, which dlt adds to Arrow rows only when
    # told so, whatever the project's .dlt/config.toml says
    dlt.config["normalize.parquet_normalizer.add_dlt_load_id"] = True
    credentials = DuckDbCredentials(str(duckdb_path), global_config=WRITER_CONFIG)
    return dlt.pipeline(
        pipeline_name=f"freetime_{writer}",
        destination=dlt.destinations.duckdb(credentials),
        dataset_name=incoming_dataset(writer),
        pipelines_dir=str(working_folder(duckdb_path)),
    )


def write(
    writer: str,
    source: Any,
    path: Path,
    *,
    lock_retry_seconds: float = 30.0,
    finish: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
) -> Published:
    """Extract ``source`` completely, load it into the incoming dataset, then publish it (and
    any load of this writer left unpublished by an earlier run) in one transaction.

    The caller holds :func:`writer_lock`. ``finish`` runs inside the publishing transaction.
    A reader holding the file is waited for ``lock_retry_seconds``, then
    :class:`WarehouseLocked`; any other failure is :class:`LoadFailed`.
    """
    pipeline = make_pipeline(path, writer)
    conform_pages(source, warehouse_column_types(path, lock_retry_seconds))
    started = time.monotonic()
    try:
        pipeline.extract(source)
        extract_seconds = time.monotonic() - started
        pipeline.normalize()
    except PipelineStepFailed as exc:
        cause = root_cause(exc)
        pipeline.abort_packages()  # a partial extraction must never be loaded later
        if isinstance(cause, KeyboardInterrupt):
            raise KeyboardInterrupt("the load was interrupted; nothing was written") from None
        if _is_lock_error(cause):
            raise WarehouseLocked(locked_message(path, 0)) from cause
        raise LoadFailed(describe(cause, exc.step)) from cause
    try:
        with writing(path, retry_seconds=lock_retry_seconds, config=WRITER_CONFIG) as con:
            try:
                pipeline.load(credentials=DuckDbCredentials(con))
            except PipelineStepFailed as exc:
                raise LoadFailed(describe(root_cause(exc), exc.step)) from exc
            published = publish(con, writer, finish)
    except WarehouseLocked as exc:
        raise WarehouseLocked(
            locked_message(path, lock_retry_seconds)
            + "; the scanned data is kept and will be written by the next run"
        ) from exc
    _drop_loaded_packages(pipeline)
    published.extract_seconds = extract_seconds
    return published


def warehouse_column_types(path: Path, lock_retry_seconds: float = 30.0) -> ColumnTypes:
    """The column types of dataset ``terminal49`` in the warehouse (none for a new file)."""
    if not path.exists():
        return ColumnTypes()
    with reading(path, retry_seconds=lock_retry_seconds) as con:
        rows = con.execute(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE schema_name = ?",
            [DATASET],
        ).fetchall()
    return ColumnTypes.from_duckdb(rows)


def conform_pages(source: Any, types: ColumnTypes) -> None:
    """Conform every Arrow table the source's resources yield to the warehouse's types (see
    :meth:`ColumnTypes.conform`: a value of another type lands in ``<column>__raw`` instead of
    failing this write and every later one)."""
    for resource in source.resources.values():
        if isinstance(resource.table_name, str):
            resource.add_map(_conformer(types, resource.table_name))


def _conformer(types: ColumnTypes, table: str) -> Callable[[Any], Any]:
    # one parameter only: dlt passes a second argument (the item's meta) to a map that takes two
    def conform(item: Any) -> Any:
        return types.conform(table, item) if isinstance(item, pa.Table) else item

    return conform


def _drop_loaded_packages(pipeline: dlt.Pipeline) -> None:
    """Delete the packages dlt keeps after loading them (their files would pile up with each
    scheduled load); their rows are in the warehouse. Never fails the write."""
    loaded = Path(pipeline.working_dir) / "load" / LoadStorage.LOADED_FOLDER
    if not loaded.is_dir():
        return
    for package in loaded.iterdir():
        try:
            shutil.rmtree(package)
        except OSError as exc:
            log.warning("could not delete %s: %s", package, exc)


# --- publishing -----------------------------------------------------------------------------


def pending_loads(con: duckdb.DuckDBPyConnection, writer: str) -> list[str]:
    """Loads dlt completed in ``writer``'s incoming dataset and not yet published, oldest
    first."""
    inc = incoming_dataset(writer)
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
) -> Published:
    """Publish ``writer``'s pending loads into ``terminal49``, all in one transaction."""
    out = Published()
    loads = pending_loads(con, writer)
    if not loads:
        return out
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(DATASET)}")
        _ensure_loads_table(con)
        for load_id in loads:
            _publish_load(con, writer, load_id, out)
            out.load_ids.append(load_id)
        apply_comments(con, DATASET)
        create_history_views(con)
        if finish is not None:
            finish(con)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return out


def _ensure_loads_table(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {quote(DATASET)}.{LOADS_TABLE} ("
        "load_id VARCHAR NOT NULL, writer VARCHAR NOT NULL, kind VARCHAR, "
        "scan_started_at TIMESTAMPTZ, api_started_at TIMESTAMPTZ, "
        "published_at TIMESTAMPTZ NOT NULL, window_from DATE, "
        "complete BOOLEAN NOT NULL, rows_written BIGINT NOT NULL, rows_skipped BIGINT NOT NULL, "
        "rows_removed BIGINT NOT NULL)"
    )


def _publish_load(
    con: duckdb.DuckDBPyConnection, writer: str, load_id: str, out: Published
) -> None:
    inc = incoming_dataset(writer)
    present = table_names(con, inc)
    scan = _scan_info(con, inc, load_id) if SCAN_TABLE in present else None
    before = (dict(out.written), dict(out.skipped), dict(out.removed))
    ctx = _history_context(writer, load_id, scan)
    for table, rule in MERGES.items():
        if table in present:
            _merge_table(con, inc, table, rule, load_id, out, ctx)
    if scan is not None:
        for listed, children in LISTED.items():
            if listed in scan.complete_lists and listed in present:
                _remove_unlisted(con, inc, listed, children, load_id, scan.started_at, out, ctx)
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


def _history_context(writer: str, load_id: str, scan: ScanInfo | None) -> history.Context:
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


def _align_target(con: duckdb.DuckDBPyConnection, table: str, incoming: Mapping[str, str]) -> None:
    """Create ``terminal49.<table>`` like the incoming rows, or give it their new columns and
    types (a declared type that changed: see :func:`_converted`)."""
    target = column_types(con, DATASET, table)
    cols = {c: t for c, t in incoming.items() if c not in _NOT_PUBLISHED}
    name = f"{quote(DATASET)}.{quote(table)}"
    if not target:
        defs = ", ".join(f"{quote(c)} {t}" for c, t in cols.items())
        con.execute(f"CREATE TABLE {name} ({defs})")
        return
    for column, typ in cols.items():
        if column not in target:
            con.execute(f"ALTER TABLE {name} ADD COLUMN {quote(column)} {typ}")
        elif target[column] != typ:
            using = _converted(con, table, column, target, typ)
            con.execute(f"ALTER TABLE {name} ALTER {quote(column)} TYPE {typ} USING {using}")


def _converted(
    con: duckdb.DuckDBPyConnection,
    table: str,
    column: str,
    target: Mapping[str, str],
    typ: str,
) -> str:
    """How the rows a warehouse holds take a declared column's new type ``typ``.

    An LFD an older warehouse holds as an instant (TIMESTAMPTZ) becomes the calendar date of
    that instant in its record's zone, as a load reads an instant LFD (:mod:`.flatten`): in
    UTC, local midnight east of UTC falls on the day before, and a one-day LFD change that
    never happened would enter history. Other values are cast; one that does not convert
    becomes NULL.
    """
    cast = f"TRY_CAST({quote(column)} AS {typ})"
    zone_names = settings.LFD_ZONES.get(column) if table == "containers" else None
    if not zone_names or typ != "DATE" or target[column] != "TIMESTAMP WITH TIME ZONE":
        return cast
    zone = "coalesce(" + ", ".join([*(quote(z) for z in zone_names if z in target), "'UTC'"]) + ")"
    names = [
        r[0]
        for r in con.execute(
            f"SELECT DISTINCT {zone} FROM {quote(DATASET)}.{quote(table)}"
        ).fetchall()
    ]
    # known names, read from DuckDB's list: a failed statement would abort the transaction
    zones = {r[0] for r in con.execute("SELECT name FROM pg_timezone_names()").fetchall()}
    known = [n for n in names if n in zones]
    if not known:  # no record names a zone DuckDB knows: none of its instants names a date
        return f"CAST(NULL AS {typ})"
    listed = ", ".join("'" + n.replace("'", "''") + "'" for n in known)
    # a zone name DuckDB does not know gives NULL, as a load gives an instant in an unknown zone
    local = f"CAST(timezone({zone}, {quote(column)}) AS DATE)"
    return f"CASE WHEN {zone} IN ({listed}) THEN {local} END"


def _merge_table(
    con: duckdb.DuckDBPyConnection,
    inc: str,
    table: str,
    rule: Merge,
    load_id: str,
    out: Published,
    ctx: history.Context | None = None,
) -> None:
    incoming = column_types(con, inc, table)
    _align_target(con, table, incoming)
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
    cols = ", ".join(quote(c) for c in incoming if c not in _NOT_PUBLISHED)
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
    out: Published,
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
    cols = ", ".join(quote(c) for c in incoming if c not in _NOT_PUBLISHED)
    real = "NOT coalesce(n._deleted, false)" if "_deleted" in incoming else "true"
    if kept < owners:
        real += f" AND n.{pk} IN (SELECT owner FROM _owners)"
    inserted = _count(con, f"INSERT INTO {dst} ({cols}) SELECT {cols} FROM _new n WHERE {real}")
    out.add(out.written, table, inserted)
    out.add(out.skipped, table, owners - kept)


def _remove_unlisted(
    con: duckdb.DuckDBPyConnection,
    inc: str,
    table: str,
    children: Sequence[str],
    load_id: str,
    scan_started: dt.datetime,
    out: Published,
    ctx: history.Context,
) -> None:
    """After a complete full scan: remove the records of ``table`` (and their children) that
    the API no longer lists, unless they were written after the scan started; history
    records each removal."""
    dst = f"{quote(DATASET)}.{quote(table)}"
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE _gone AS SELECT id FROM {dst} t "
        f"WHERE t.fetched_at < ? AND NOT EXISTS (SELECT 1 FROM {quote(inc)}.{quote(table)} i "
        "WHERE i._dlt_load_id = ? AND i.id = t.id)",
        [scan_started, load_id],
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


# --- errors ---------------------------------------------------------------------------------


def locked_message(path: Path, waited: float) -> str:
    return (
        f"the warehouse {path} stayed locked by another process (an open notebook, a duckdb "
        f"shell or another load) for {waited:.0f}s"
    )


def _is_lock_error(exc: BaseException) -> bool:
    text = str(exc)
    return "Could not set lock" in text or "Conflicting lock" in text


def root_cause(exc: BaseException) -> BaseException:
    """The first API error in ``exc``'s chain, else the innermost exception."""
    seen = set()
    while exc.__cause__ is not None or exc.__context__ is not None:
        if id(exc) in seen:
            break
        seen.add(id(exc))
        if isinstance(exc, Terminal49Error | ScanIncomplete):
            return exc
        nxt = exc.__cause__ or exc.__context__
        assert nxt is not None
        exc = nxt
    return exc


def describe(cause: BaseException, step: str) -> str:
    """A user-safe line for a failed step."""
    if isinstance(cause, Terminal49Error | ScanIncomplete):
        return f"load failed while reading the API: {cause}"
    if isinstance(cause, httpx.HTTPError):
        return f"load failed while reading the API: {type(cause).__name__}: {cause}"
    return f"load failed at the {step} step: {type(cause).__name__}: {cause}"
