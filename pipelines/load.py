"""One load of the account into the DuckDB warehouse: the call that the CLI and flows share.

Contract of :func:`run_load`:
- **full or incremental.** The first load of a warehouse, ``full=True`` (``freetime load
  --full``, the nightly ``reconcile`` flow) scan every container and shipment; otherwise the
  load asks only for what changed since the last completed load: containers by
  ``filter[updated_at]`` from the UTC date that load started minus one day (with their
  shipments included), and shipments created or whose ETA changed since then. An API that
  ignores a filter serves the whole list: slower, still right;
- the scan (reconciled, see :mod:`pipelines.terminal49.scan`) completes before anything is
  written, and the write is one transaction (:mod:`pipelines.write`): a load that fails or is
  killed leaves the previous warehouse, and the watermark, as they were;
- a complete full scan removes the containers (with their holds and fees) and shipments the
  API no longer lists; an incremental or failed one removes nothing;
- loads scan side by side (each stages in its own slot, :mod:`pipelines.publish.staging`) and
  publish one at a time: a load waits for the writer lock only to publish;
- the API key is passed to the HTTP client only: never to dlt (state, trace), never logged.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pyarrow as pa

from pipelines.config import (
    DATASET,
    ApiSettings,
    ConfigError,
    Warehouse,
    resolve_warehouse,
    working_folder,
)
from pipelines.terminal49 import ListSpec, terminal49_source
from pipelines.terminal49 import settings as t49
from pipelines.terminal49._ratelimit import BudgetStore
from pipelines.terminal49.client import Terminal49Client
from pipelines.terminal49.scan import ScanStats
from pipelines.warehouse import reading, table_names
from pipelines.write import (
    LOADS_TABLE,
    LoadFailed,
    ScanInfo,
    WriteSummary,
    write,
)

PIPELINE_NAME = "freetime_load"
TABLES = ("containers", "shipments", "container_holds", "container_fees", "terminals", "ports")
SOURCE_TABLE = "freetime_source"

__all__ = ["LoadFailed", "LoadSummary", "run_load"]


@dataclass
class LoadSummary:
    """What one load did."""

    duckdb_path: Path
    #: where the load went, to show (a PostgreSQL URL with its password masked)
    warehouse: str | None = None
    kind: str = "full"  # or "incremental"
    #: incremental: the first UTC date whose changes were asked for
    window_from: dt.date | None = None
    rows: dict[str, int] = field(default_factory=dict)  # rows written per table
    skipped: dict[str, int] = field(default_factory=dict)  # the warehouse held newer rows
    removed: dict[str, int] = field(default_factory=dict)  # no longer listed by the API
    requests: int = 0
    #: seconds the scan waited for the key's budget (shared with the warehouse's other writers)
    budget_wait_seconds: float = 0.0
    retries: int = 0
    rate_limited: int = 0
    pages: int = 0
    reconcile_pages: int = 0
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    extract_seconds: float = 0.0
    load_id: str | None = None
    #: seconds from the start of the scan at which each request was sent
    request_times: list[float] = field(default_factory=list, repr=False)

    def table_counts_line(self) -> str:
        return ", ".join(f"{t} {n}" for t, n in self.rows.items())

    def window_line(self) -> str:
        if self.kind == "full":
            return "full load: every container and shipment"
        return f"incremental load: changes since {self.window_from} (UTC)"


def run_load(
    duckdb_path: str | os.PathLike[str] | Warehouse | None = None,
    api: ApiSettings | None = None,
    *,
    full: bool | None = None,
    concurrency: int = t49.DEFAULT_CONCURRENCY,
    on_page: Callable[[ScanStats], None] | None = None,
    on_wait: Callable[[str], None] | None = None,
    transport: httpx.BaseTransport | None = None,
    include_shipments_list: bool = True,
    max_attempts: int = t49.MAX_ATTEMPTS,
    backoff_base_s: float = t49.BACKOFF_BASE_S,
    lock_retry_seconds: float = 30.0,
    wait_seconds: float | None = None,
) -> LoadSummary:
    """Scan the account (``full``: True, False, or None to decide from the warehouse) and
    write it. ``duckdb_path``: a DuckDB path, a ``postgresql://`` URL or a
    :class:`~pipelines.config.Warehouse` (default: ``FREETIME_WAREHOUSE``, see
    :func:`~pipelines.config.resolve_warehouse`). Raises ConfigError, LoadFailed,
    WarehouseError (WarehouseLocked, WriterBusy)."""
    api = api or ApiSettings.resolve()
    if not api.api_key:
        raise ConfigError(
            "no API key: set TERMINAL49_API_KEY (or sources.terminal49.api_key in "
            ".dlt/secrets.toml), or use --sandbox to load from the local sandbox"
        )
    # --- WAREHOUSE DISPATCH (issue 30): a PostgreSQL warehouse loads through pipelines/pg ---
    warehouse = resolve_warehouse(duckdb_path)
    if warehouse.is_postgres:
        from pipelines.pg.load import run_load as run_load_postgres

        return run_load_postgres(
            warehouse,
            api,
            full=full,
            concurrency=concurrency,
            on_page=on_page,
            on_wait=on_wait,
            transport=transport,
            include_shipments_list=include_shipments_list,
            max_attempts=max_attempts,
            backoff_base_s=backoff_base_s,
            wait_seconds=wait_seconds,
        )
    assert warehouse.path is not None
    path = warehouse.path
    # --- end of the warehouse dispatch ---
    summary = LoadSummary(duckdb_path=path)
    started = time.monotonic()
    stats: dict[str, ScanStats] = {}

    def track(s: ScanStats) -> None:
        stats[s.kind] = s
        if on_page:
            on_page(s)

    identity = source_identity(api.base_url)
    check_source(path, identity, lock_retry_seconds)
    last = None if full else last_load_started(path, lock_retry_seconds)
    scan, lists = plan_scan(last, include_shipments_list)
    summary.kind, summary.window_from = scan.kind, scan.window_from
    client = scan_client(
        api,
        scan,
        working_folder(path),
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
            path,
            lock_retry_seconds=lock_retry_seconds,
            finish=lambda con: record_source(con, identity),
            what=f"{scan.kind} load",
            wait_seconds=wait_seconds,
            on_wait=on_wait,
        )
    finally:
        client.close()
    fill_summary(summary, published, client, stats)
    summary.seconds = time.monotonic() - started
    return summary


def plan_scan(
    last: dt.datetime | None, include_shipments_list: bool = True
) -> tuple[ScanInfo, list[ListSpec]]:
    """What a load scans: everything (``last`` None: no completed load, or ``--full``), else
    what changed since the UTC date of ``last`` minus one day."""
    scan = ScanInfo(kind="full", started_at=dt.datetime.now(dt.UTC))
    if last is None:
        lists = full_lists(include_shipments_list)
        scan.complete_lists = tuple(spec.kind for spec in lists)
    else:
        scan.kind = "incremental"
        scan.window_from = last.date() - dt.timedelta(days=1)
        lists = incremental_lists(scan.window_from)
    return scan, lists


def key_budget(warehouse: Warehouse) -> Path | BudgetStore:
    """Where the API key's budget is kept for the writers of ``warehouse``: the database of a
    PostgreSQL warehouse (shared by every machine), else the DuckDB file's working folder."""
    if warehouse.is_postgres:
        from pipelines.pg.budget import DatabaseBudget

        return DatabaseBudget(warehouse)
    assert warehouse.path is not None
    return working_folder(warehouse.path)


def scan_client(
    api: ApiSettings, scan: ScanInfo, budget: Path | BudgetStore, **options: Any
) -> Terminal49Client:
    """The scan's client (``options``: :class:`Terminal49Client`'s), pacing in the key's
    budget shared with the warehouse's other writers (``budget``); a full scan yields to
    them: it has the night."""
    return Terminal49Client.for_api(api, budget=budget, yield_budget=scan.kind == "full", **options)


def scan_source(
    client: Terminal49Client,
    lists: list[ListSpec],
    scan: ScanInfo,
    on_page: Callable[[ScanStats], None],
) -> Any:
    """The dlt source scanning ``lists``; its scan record takes the API's clock from the
    first answer."""

    def scan_info() -> pa.Table:
        scan.api_started_at = client.stats.first_answer_date
        return scan.table()

    return terminal49_source(client, lists, on_page=on_page, scan_info=scan_info)


def fill_summary(
    summary: LoadSummary,
    published: WriteSummary,
    client: Terminal49Client,
    stats: dict[str, ScanStats],
) -> None:
    """Fill ``summary`` with what the write published and what the scan asked (on every
    warehouse)."""
    summary.rows = {t: published.written.get(t, 0) for t in TABLES}
    summary.skipped = published.skipped
    summary.removed = published.removed
    summary.load_id = published.load_ids[-1] if published.load_ids else None
    summary.extract_seconds = published.extract_seconds
    summary.requests = client.stats.requests
    summary.budget_wait_seconds = client.limiter.waited_s
    summary.request_times = list(client.stats.sent_at)
    summary.retries = client.stats.retries
    summary.rate_limited = client.stats.rate_limited
    summary.pages = sum(s.pages for s in stats.values())
    summary.reconcile_pages = sum(s.reconcile_pages for s in stats.values())
    summary.warnings = [w for s in stats.values() for w in s.warnings]


def full_lists(include_shipments_list: bool = True) -> list[ListSpec]:
    """Every container and (unless told otherwise) every shipment. A load without the shipments
    list asks for the containers' shipments as includes."""
    if not include_shipments_list:
        return [ListSpec("containers", t49.CONTAINERS_PATH, t49.CONTAINER_INCLUDE_WITH_SHIPMENT)]
    return [
        ListSpec("containers", t49.CONTAINERS_PATH, t49.CONTAINER_INCLUDE),
        ListSpec("shipments", t49.SHIPMENTS_PATH, t49.SHIPMENT_INCLUDE),
    ]


def incremental_lists(since: dt.date) -> list[ListSpec]:
    """What changed from UTC date ``since`` on: containers updated (the filter compares the
    stored UTC date, so a change at 23:59 the day before the last load is included), with their
    shipments; shipments created, and shipments whose ETA changed."""
    instant = f"{since.isoformat()}T00:00:00Z"
    return [
        ListSpec(
            "containers",
            t49.CONTAINERS_PATH,
            t49.CONTAINER_INCLUDE_WITH_SHIPMENT,
            {"filter[updated_at]": f">={since.isoformat()}"},
        ),
        ListSpec(
            "shipments",
            t49.SHIPMENTS_PATH,
            t49.SHIPMENT_INCLUDE,
            {"filter[created_at]": f">={instant}"},
        ),
        ListSpec(
            "shipments",
            t49.SHIPMENTS_PATH,
            t49.SHIPMENT_INCLUDE,
            {"filter[pod_eta_changed_at]": f">={instant}"},
        ),
    ]


def last_load_started(path: Path, lock_retry_seconds: float = 30.0) -> dt.datetime | None:
    """When the scan of the last completed load of this warehouse started, by the API's clock
    (its watermark), or None when it holds none."""
    if not path.exists():
        return None
    with reading(path, retry_seconds=lock_retry_seconds) as con:
        if LOADS_TABLE not in table_names(con, DATASET):
            return None
        row = con.execute(
            "SELECT max(coalesce(api_started_at, scan_started_at)) "
            f'FROM "{DATASET}"."{LOADS_TABLE}" '
            "WHERE writer = 'load' AND complete"
        ).fetchone()
    return row[0] if row and row[0] is not None else None


def source_identity(base_url: str) -> str:
    """Which account a warehouse is loaded from: ``sandbox`` for any loopback address (the
    embedded sandbox listens on a new port each run), else the base URL."""
    host = (httpx.URL(base_url).host or "").lower()
    if host in {"localhost", "::1", "[::1]"} or host.startswith("127."):
        return "sandbox"
    return base_url.rstrip("/")


def check_source(path: Path, identity: str, lock_retry_seconds: float = 30.0) -> None:
    """Refuse to merge one account into a warehouse that holds another (ConfigError).

    Loading the synthetic sandbox into a warehouse of real data (``freetime run`` once the key
    is gone from the environment) would mix invented containers into real ones for good.
    """
    if not path.exists():
        return
    with reading(path, retry_seconds=lock_retry_seconds) as con:
        if SOURCE_TABLE not in table_names(con, DATASET):
            return
        found = con.execute(f'SELECT source FROM "{DATASET}"."{SOURCE_TABLE}"').fetchall()
    if found and found[0][0] != identity:
        raise ConfigError(
            f"the warehouse {path} holds data loaded from {found[0][0]}; this load reads "
            f"{identity}. Use another --duckdb file (or remove {path}) rather than mixing "
            "two accounts in one warehouse"
        )


def record_source(con: duckdb.DuckDBPyConnection, identity: str) -> None:
    """Remember which account the warehouse holds (see :func:`check_source`); ``recorded_at``
    is when that account was first recorded."""
    if SOURCE_TABLE in table_names(con, DATASET):
        found = con.execute(f'SELECT source FROM "{DATASET}"."{SOURCE_TABLE}"').fetchall()
        if [row[0] for row in found] == [identity]:
            return
    con.execute(
        f'CREATE TABLE IF NOT EXISTS "{DATASET}"."{SOURCE_TABLE}" '
        "(source VARCHAR NOT NULL, recorded_at TIMESTAMPTZ NOT NULL)"
    )
    con.execute(f'DELETE FROM "{DATASET}"."{SOURCE_TABLE}"')
    con.execute(f'INSERT INTO "{DATASET}"."{SOURCE_TABLE}" VALUES (?, now())', [identity])
