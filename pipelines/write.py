"""Writing the warehouse: the one path of every writer (the load, webhook apply, documents).

Contract of :func:`write`:
- dlt extracts and normalises the source in the writer's staging slot
  (:mod:`pipelines.publish.staging`), then loads it into the slot's own **incoming** dataset in
  the same DuckDB file (``_incoming_<slot>``: appended rows tagged with dlt's load id).
  Nothing reaches ``terminal49`` yet, so a failure or a kill here changes nothing a reader
  sees, and a package that was not written stays pending and is written by the next run;
- then **one DuckDB transaction publishes** every load dlt completed there and that was not
  published yet (:func:`pipelines.publish.transaction.publish`, merged by the rules of
  :data:`pipelines.publish.merge.MERGES`). A kill at any moment leaves every table before or
  after the load, all together;
- writers stage side by side (a full scan takes an hour at the API's pace) and publish one at
  a time: the writer lock (:class:`pipelines.publish.lock.WriterLock`) is held only for the
  load into the incoming dataset and the publishing transaction, seconds;
- the counts returned are the rows published (inserted), the rows skipped because the
  warehouse held a newer version, and the rows removed: never rows that were not written.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dlt
import duckdb
from dlt.destinations.impl.duckdb.configuration import DuckDbCredentials
from dlt.pipeline.exceptions import PipelineStepFailed

from pipelines.publish.errors import (
    LoadFailed,
    describe,
    locked_message,
    raise_if_interrupted,
    root_cause,
)
from pipelines.publish.lock import FileWriterLock, WriterBusy, WriterLock, writer_lock
from pipelines.publish.merge import LISTED, MERGES, Merge
from pipelines.publish.staging import (
    WRITER_CONFIG,
    conform_pages,
    drop_loaded_packages,
    make_pipeline,
    staging_slot,
    warehouse_column_types,
)
from pipelines.publish.transaction import (
    LOADS_TABLE,
    SCAN_TABLE,
    ScanInfo,
    WriteSummary,
    pending_loads,
    publish,
)
from pipelines.warehouse import WarehouseLocked, is_lock_error, writing

__all__ = [
    "LISTED",
    "LOADS_TABLE",
    "MERGES",
    "SCAN_TABLE",
    "LoadFailed",
    "Merge",
    "ScanInfo",
    "WriteSummary",
    "WriterBusy",
    "WriterLock",
    "make_pipeline",
    "pending_loads",
    "publish",
    "write",
    "writer_lock",
]


def write(
    writer: str,
    source: Any,
    path: Path,
    *,
    lock_retry_seconds: float = 30.0,
    finish: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
    what: str | None = None,
    wait_seconds: float | None = None,
    on_wait: Callable[[str], None] | None = None,
    lock: WriterLock | None = None,
) -> WriteSummary:
    """Stage ``source`` completely in a staging slot of ``writer``, without the writer lock;
    then, holding it (``lock``, default the warehouse's file lock, taken as ``what``: see
    :class:`WriterLock` for ``wait_seconds`` and ``on_wait``), load it into the slot's incoming
    dataset and publish it (with any load left unpublished in that slot by an earlier run) in
    one transaction; ``finish`` runs inside that transaction.

    A reader holding the file is waited for ``lock_retry_seconds``, then
    :class:`WarehouseLocked`; another writer publishing for longer than the wait is
    :class:`WriterBusy`; any other failure is :class:`LoadFailed`.
    """
    with staging_slot(path, writer) as slot:
        try:
            pipeline = make_pipeline(path, slot)
        except OSError as exc:  # a full disk: dlt cannot even write its state
            raise LoadFailed(_unwritable(path, exc)) from exc
        conform_pages(source, warehouse_column_types(path, lock_retry_seconds))
        started = time.monotonic()
        try:
            pipeline.extract(source)
            extract_seconds = time.monotonic() - started
            pipeline.normalize()
        except OSError as exc:  # raised by dlt's storages outside a step (a full disk)
            with contextlib.suppress(Exception):
                pipeline.abort_packages()
            raise LoadFailed(_unwritable(path, exc)) from exc
        except PipelineStepFailed as exc:
            cause = root_cause(exc)
            with contextlib.suppress(OSError):  # a partial extraction must never be loaded
                pipeline.abort_packages()
            raise_if_interrupted(cause)
            if is_lock_error(cause):
                raise WarehouseLocked(locked_message(path, 0)) from cause
            raise LoadFailed(describe(cause, exc.step)) from cause
        lock = lock or FileWriterLock(path)
        try:
            with lock.hold(what or writer, wait_seconds, on_wait):
                published = _load_and_publish(
                    pipeline, writer, slot, path, lock_retry_seconds, finish
                )
        except WriterBusy:  # only the lock raises it: nothing was loaded
            # the next run scans afresh: a stale scan must not be published after it
            pipeline.abort_packages()
            raise
        drop_loaded_packages(pipeline)
    published.extract_seconds = extract_seconds
    return published


def _load_and_publish(
    pipeline: dlt.Pipeline,
    writer: str,
    slot: str,
    path: Path,
    lock_retry_seconds: float,
    finish: Callable[[duckdb.DuckDBPyConnection], None] | None,
) -> WriteSummary:
    """The locked part of :func:`write`: dlt loads the staged packages into the incoming
    dataset, then :func:`publish` makes them the warehouse's."""
    try:
        with writing(path, retry_seconds=lock_retry_seconds, config=WRITER_CONFIG) as con:
            try:
                pipeline.load(credentials=DuckDbCredentials(con))
            except PipelineStepFailed as exc:
                raise_if_interrupted(root_cause(exc))
                raise LoadFailed(describe(root_cause(exc), exc.step)) from exc
            return publish(con, writer, finish, slot=slot)
    except OSError as exc:
        raise LoadFailed(_unwritable(path, exc)) from exc
    except duckdb.Error as exc:  # a full disk, a file that cannot be extended: the old data stays
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LoadFailed(
            f"could not write the warehouse {path}: {reason}; it holds what it held before"
        ) from exc
    except WarehouseLocked as exc:
        raise WarehouseLocked(
            locked_message(path, lock_retry_seconds)
            + "; the scanned data is kept and will be written by the next run"
        ) from exc


def _unwritable(path: Path, exc: OSError) -> str:
    return (
        f"could not write beside the warehouse {path}: {exc.strerror or exc}; it holds what it "
        "held before"
    )
