"""``freetime load`` into a PostgreSQL warehouse: :func:`pipelines.load.run_load`'s contract.

The scan, its lists and the summary are the DuckDB path's (:mod:`pipelines.load`); what
differs is where the warehouse is read (the watermark, the source's identity), how writers
serialise (:mod:`.lock`) and how the load is written (:mod:`.write`).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx
from psycopg2.extensions import cursor as Cursor

from pipelines.config import DATASET, ApiSettings, ConfigError, Warehouse, incoming_dataset
from pipelines.pg.connection import check_writable, connection
from pipelines.pg.publish import table_names
from pipelines.pg.write import write
from pipelines.terminal49 import settings as t49
from pipelines.terminal49.scan import ScanStats
from pipelines.warehouse import quote
from pipelines.write import LOADS_TABLE

if TYPE_CHECKING:
    from pipelines.load import LoadSummary


def run_load(
    warehouse: Warehouse,
    api: ApiSettings,
    *,
    full: bool | None = None,
    concurrency: int = t49.DEFAULT_CONCURRENCY,
    on_page: Callable[[ScanStats], None] | None = None,
    on_wait: Callable[[str], None] | None = None,
    transport: httpx.BaseTransport | None = None,
    include_shipments_list: bool = True,
    max_attempts: int = t49.MAX_ATTEMPTS,
    backoff_base_s: float = t49.BACKOFF_BASE_S,
    wait_seconds: float | None = None,
) -> LoadSummary:
    """Scan the account and write it into the PostgreSQL ``warehouse`` (the API key checked
    by the caller). Raises ConfigError, LoadFailed, WarehouseError or WriterBusy."""
    from pipelines.load import (
        SOURCE_TABLE,
        LoadSummary,
        fill_summary,
        key_budget,
        plan_scan,
        scan_client,
        scan_source,
        source_identity,
    )

    check_writable(warehouse, (DATASET, incoming_dataset("load")))
    summary = LoadSummary(duckdb_path=warehouse.path or warehouse.working_folder())
    summary.warehouse = warehouse.display
    started = time.monotonic()
    stats: dict[str, ScanStats] = {}

    def track(s: ScanStats) -> None:
        stats[s.kind] = s
        if on_page:
            on_page(s)

    # scanned without the writers' lock, published under it (pipelines.pg.write)
    identity = source_identity(api.base_url)
    check_source(warehouse, identity, SOURCE_TABLE)
    last = None if full else last_load_started(warehouse)
    scan, lists = plan_scan(last, include_shipments_list)
    summary.kind, summary.window_from = scan.kind, scan.window_from
    client = scan_client(
        api,
        scan,
        key_budget(warehouse),  # shared by the writers of every machine
        concurrency=concurrency,
        transport=transport,
        max_attempts=max_attempts,
        backoff_base_s=backoff_base_s,
    )
    try:
        source = scan_source(client, lists, scan, track)
        published = write(
            "load",
            source,
            warehouse,
            finish=lambda cur: record_source(cur, identity, SOURCE_TABLE),
            what=f"{scan.kind} load",
            wait_seconds=wait_seconds,
            on_wait=on_wait,
        )
    finally:
        client.close()
    fill_summary(summary, published, client, stats)
    summary.seconds = time.monotonic() - started
    return summary


def last_load_started(warehouse: Warehouse) -> dt.datetime | None:
    """The watermark: when the scan of the last completed load started, by the API's clock."""
    with connection(warehouse) as con, con.cursor() as cur:
        if LOADS_TABLE not in table_names(cur, DATASET):
            return None
        cur.execute(
            "SELECT max(coalesce(api_started_at, scan_started_at)) "
            f"FROM {quote(DATASET)}.{LOADS_TABLE} WHERE writer = 'load' AND complete"
        )
        row = cur.fetchone()
    return row[0] if row and row[0] is not None else None


def check_source(warehouse: Warehouse, identity: str, table: str) -> None:
    """ConfigError when the warehouse holds another account than ``identity``."""
    with connection(warehouse) as con, con.cursor() as cur:
        if table not in table_names(cur, DATASET):
            return
        cur.execute(f"SELECT source FROM {quote(DATASET)}.{quote(table)}")
        found = cur.fetchall()
    if found and found[0][0] != identity:
        raise ConfigError(
            f"the warehouse {warehouse.display} holds data loaded from {found[0][0]}; this "
            f"load reads {identity}. Use another warehouse rather than mixing two accounts"
        )


def record_source(cur: Cursor, identity: str, table: str) -> None:
    """Remember which account the warehouse holds, in the publishing transaction."""
    name = f"{quote(DATASET)}.{quote(table)}"
    cur.execute(
        f"CREATE TABLE IF NOT EXISTS {name} "
        "(source VARCHAR NOT NULL, recorded_at TIMESTAMPTZ NOT NULL)"
    )
    cur.execute(f"SELECT source FROM {name}")
    if [r[0] for r in cur.fetchall()] == [identity]:
        return
    cur.execute(f"DELETE FROM {name}")
    cur.execute(f"INSERT INTO {name} VALUES (%s, now())", [identity])
