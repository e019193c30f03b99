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
- one writer at a time per warehouse, across processes
  (:func:`pipelines.publish.lock.writer_lock`);
- the counts returned are the rows published (inserted), the rows skipped because the
  warehouse held a newer version, and the rows removed: never rows that were not written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
from dlt.destinations.impl.duckdb.configuration import DuckDbCredentials
from dlt.pipeline.exceptions import PipelineStepFailed

from pipelines.publish.errors import (
    LoadFailed,
    describe,
    is_lock_error,
    locked_message,
    root_cause,
)
from pipelines.publish.lock import WriterBusy, WriterLock, writer_lock
from pipelines.publish.merge import LISTED, MERGES, Merge
from pipelines.publish.staging import (
    WRITER_CONFIG,
    conform_pages,
    drop_loaded_packages,
    incoming_dataset,
    make_pipeline,
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
from pipelines.warehouse import WarehouseLocked, writing

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
    "incoming_dataset",
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
) -> WriteSummary:
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
        if is_lock_error(cause):
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
    drop_loaded_packages(pipeline)
    published.extract_seconds = extract_seconds
    return published
