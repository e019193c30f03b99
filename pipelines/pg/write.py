"""The writers' path on PostgreSQL: dlt stages the load, one transaction publishes it.

The contract of :func:`pipelines.write.write`, with dlt's postgres destination: the source is
extracted and normalised completely, loaded into the incoming schema of the writer's staging
slot (``_incoming_<slot>``, where dlt commits each table's job on its own), and only then
published into ``terminal49`` by :func:`pipelines.pg.publish.publish` in one transaction of
its own. The writers' lock is held for that load and the publish only, never for the scan,
so a long scan never holds up another writer. A failure or a kill before the publish
commits changes nothing a reader sees; a load dlt completed but that was not published is
published by the next run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import dlt
import psycopg2
from dlt.pipeline.exceptions import PipelineStepFailed
from psycopg2.extensions import cursor as Cursor

from pipelines.config import DATASET, Warehouse, incoming_dataset
from pipelines.pg.connection import connection, dsn_with_password, masked, one_line
from pipelines.pg.lock import staging_slot, writer_lock
from pipelines.pg.publish import DUCKDB_NAMES, publish
from pipelines.publish.errors import LoadFailed, describe, raise_if_interrupted, root_cause
from pipelines.publish.lock import WriterBusy
from pipelines.publish.staging import (
    capabilities_once,
    conform_pages,
    drop_loaded_packages,
    quiet_dlt_and_tag_loads,
)
from pipelines.publish.transaction import WriteSummary
from pipelines.terminal49.flatten import ColumnTypes


def make_pipeline(warehouse: Warehouse, slot: str) -> dlt.Pipeline:
    """The dlt pipeline of staging slot ``slot`` into its incoming schema of the PostgreSQL
    warehouse, with its packages and state in the warehouse's local working folder."""
    quiet_dlt_and_tag_loads()
    # dlt gzips the CSV files it COPYs into PostgreSQL by default: half the normalize step's
    # time (more than all of it on DuckDB, whose Parquet files are not recompressed), for
    # files that live seconds in the local working folder; text files only, so the DuckDB
    # pipelines' Parquet files are unchanged
    dlt.config["normalize.data_writer.disable_compression"] = True
    return dlt.pipeline(
        pipeline_name=f"freetime_{slot}",
        destination=capabilities_once(
            dlt.destinations.postgres(credentials=dsn_with_password(warehouse))
        ),
        dataset_name=incoming_dataset(slot),
        pipelines_dir=str(warehouse.working_folder()),
    )


def warehouse_column_types(warehouse: Warehouse) -> ColumnTypes:
    """The column types of ``terminal49`` on the server, by their DuckDB names."""
    with connection(warehouse) as con, con.cursor() as cur:
        cur.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s",
            [DATASET],
        )
        rows = [(t, c, DUCKDB_NAMES.get(typ, typ.upper())) for t, c, typ in cur.fetchall()]
    return ColumnTypes.from_duckdb(rows)


def write(
    writer: str,
    source: Any,
    warehouse: Warehouse,
    *,
    finish: Callable[[Cursor], None] | None = None,
    what: str | None = None,
    wait_seconds: float | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> WriteSummary:
    """Extract ``source`` and normalise it in a staging slot of ``writer``
    (:func:`pipelines.pg.lock.staging_slot`), without the writers' lock; then, holding it (as
    ``what``; ``wait_seconds`` and ``on_wait`` as :func:`pipelines.pg.lock.writer_lock`'s),
    load it into the slot's incoming schema and publish it (and any staged load of the slot
    left unpublished) in one transaction. LoadFailed (the password masked) when a step
    fails; WriterBusy when another writer kept the lock for the whole wait; the warehouse
    holds what it held."""
    with staging_slot(warehouse, writer) as slot:
        pipeline = make_pipeline(warehouse, slot)
        conform_pages(source, warehouse_column_types(warehouse))
        started = time.monotonic()
        try:
            pipeline.extract(source)
            extract_seconds = time.monotonic() - started
            pipeline.normalize()
        except PipelineStepFailed as exc:
            cause = root_cause(exc)
            pipeline.abort_packages()  # a partial extraction must never be loaded later
            raise_if_interrupted(cause)
            raise LoadFailed(masked(describe(cause, exc.step), warehouse)) from None
        try:
            with writer_lock(warehouse, what or writer, wait_seconds, on_wait):
                published = _load_and_publish(pipeline, writer, slot, warehouse, finish)
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
    warehouse: Warehouse,
    finish: Callable[[Cursor], None] | None,
) -> WriteSummary:
    """The locked part of :func:`write`: dlt loads the staged packages into the slot's
    incoming schema, then one transaction publishes them."""
    try:
        pipeline.load()
    except PipelineStepFailed as exc:
        raise_if_interrupted(root_cause(exc))
        message = masked(describe(root_cause(exc), exc.step), warehouse)
        raise LoadFailed(message + "; the scanned data is kept for the next run") from None
    # named, so that an operator (and a test) sees the publish in pg_stat_activity
    with connection(warehouse, application=f"freetime publish {writer}") as con:
        try:
            return publish(con, writer, finish, slot=slot)
        except psycopg2.Error as exc:
            raise LoadFailed(
                f"the publish into {warehouse.display} failed and changed nothing: "
                f"{one_line(exc, warehouse)}; the staged load is published by the next run"
            ) from None
