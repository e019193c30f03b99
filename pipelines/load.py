"""One load of the account into the DuckDB warehouse: the call that the CLI and flows share.

Contract of :func:`run_load`:
- the whole account is scanned (and reconciled) before anything is written, so a load that
  fails leaves the previous warehouse intact and consistent, and the next load starts clean;
- on success every table in dataset ``terminal49`` equals what the API serves;
- the API key is passed to the HTTP client only: never to dlt (state, trace), never logged.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
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

from pipelines._memory import fewer_collections, release_unused
from pipelines.config import (
    DATASET,
    ApiSettings,
    ConfigError,
    resolve_duckdb_path,
    staging_dataset,
    working_folder,
)
from pipelines.terminal49 import settings as t49
from pipelines.terminal49 import terminal49_source
from pipelines.terminal49.client import Terminal49Client, Terminal49Error
from pipelines.terminal49.docs import apply_comments
from pipelines.terminal49.flatten import ColumnTypes
from pipelines.terminal49.scan import ScanIncomplete, ScanStats
from pipelines.warehouse import WarehouseLocked, reading, table_names, writing

log = logging.getLogger("freetime.load")

PIPELINE_NAME = "freetime_terminal49"
DUCKDB_MEMORY_LIMIT = "96MB"
#: The DuckDB settings of every connection a load writes through. The merge of a large load
#: would otherwise take DuckDB's default (80% of RAM) and keep it: a bounded buffer pool (it
#: spills to disk beyond) keeps the loader's memory bounded. 96 MB, not more: DuckDB fills
#: whatever it is given, so with 256 MB the loader's peak grew from 311 MB (20,000 containers)
#: to 469 MB (100,000); with 96 MB it is 279 and 343 MB, and writing 100,000 takes as long.
#: One DuckDB thread: dlt already runs the load jobs (staging copies, merges) in parallel
#: threads; DuckDB's own workers on top of them only contend (100k containers: 2.4 s to write
#: instead of 2.75 s).
WRITER_CONFIG: dict[str, Any] = {
    "memory_limit": DUCKDB_MEMORY_LIMIT,
    "preserve_insertion_order": False,
    "threads": 1,
}
#: A package of more rows than this is written one table at a time (one dlt load worker): four
#: merges of a 1,000,000-container load (4,150,000 rows) at once ran out of the 96 MB, one at a
#: time they fit (peak RSS 376 MB). 100,000 containers (415,000 rows) fit in parallel, which
#: writes them in 2.6-3.0 s instead of 3.4-3.7 s.
ONE_TABLE_AT_A_TIME_ROWS = 500_000
TABLES = ("containers", "shipments", "container_holds", "container_fees", "terminals", "ports")


class LoadFailed(Exception):
    """The load did not complete; the warehouse holds the previous load. Message is user-safe.

    A warehouse that stays locked by another process raises
    :class:`pipelines.warehouse.WarehouseLocked` instead (a retry later can succeed).
    """


@dataclass
class LoadSummary:
    """What one load did."""

    duckdb_path: Path
    rows: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    retries: int = 0
    rate_limited: int = 0
    pages: int = 0
    reconcile_pages: int = 0
    seconds: float = 0.0
    extract_seconds: float = 0.0
    load_id: str | None = None
    #: seconds from the start of the scan at which each request was sent
    request_times: list[float] = field(default_factory=list, repr=False)

    def table_counts_line(self) -> str:
        return ", ".join(f"{t} {n}" for t, n in self.rows.items())


class _DropDltNoise(logging.Filter):
    """Two dlt warnings that are pure noise here, dropped.

    - dlt warns on every Arrow table whose nullability differs from its schema (the flattener
      declares key columns non-null, dlt's schema keeps its own hints);
    - a warehouse loaded before the record tables' source filter keeps their ``dedup_sort``
      hint in its stored schema, which dlt then ignores and warns about at every load (the
      filter keeps the newest fetch, see ``pipelines.terminal49._parent``).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return (
            "when merging arrow schema with dlt schema" not in message
            and "Staging data is declared as already deduplicated" not in message
        )


_DLT_NOISE = _DropDltNoise()


def make_pipeline(duckdb_path: Path, name: str = PIPELINE_NAME) -> dlt.Pipeline:
    """A dlt pipeline writing dataset ``terminal49`` of one warehouse file.

    Each writer (the load, webhook apply, documents) has its own ``name`` and so its own
    working folder and state, all beside the warehouse file (:func:`working_folder`: a
    ConfigError when that folder cannot be created or written).
    """
    dlt_logger = logging.getLogger("dlt")
    if _DLT_NOISE not in dlt_logger.filters:
        dlt_logger.addFilter(_DLT_NOISE)
    credentials = DuckDbCredentials(str(duckdb_path), global_config=WRITER_CONFIG)
    return dlt.pipeline(
        pipeline_name=name,
        destination=dlt.destinations.duckdb(credentials),
        dataset_name=DATASET,
        pipelines_dir=str(working_folder(duckdb_path)),
    )


def run_load(
    duckdb_path: str | os.PathLike[str] | None = None,
    api: ApiSettings | None = None,
    *,
    concurrency: int = t49.DEFAULT_CONCURRENCY,
    on_page: Callable[[ScanStats], None] | None = None,
    transport: httpx.BaseTransport | None = None,
    include_shipments_list: bool = True,
    max_attempts: int = t49.MAX_ATTEMPTS,
    backoff_base_s: float = t49.BACKOFF_BASE_S,
    lock_retry_seconds: float = 30.0,
) -> LoadSummary:
    """Scan the account and merge it into the warehouse. Raises ConfigError or LoadFailed."""
    api = api or ApiSettings.resolve()
    if not api.api_key:
        raise ConfigError(
            "no API key: set TERMINAL49_API_KEY (or sources.terminal49.api_key in "
            ".dlt/secrets.toml), or use --sandbox to load from the local sandbox"
        )
    path = resolve_duckdb_path(duckdb_path)
    identity = source_identity(api.base_url)
    check_source(path, identity, lock_retry_seconds)
    summary = LoadSummary(duckdb_path=path)
    started = time.monotonic()
    pages: dict[str, ScanStats] = {}

    def track(stats: ScanStats) -> None:
        pages[stats.kind] = stats
        if on_page:
            on_page(stats)

    client = Terminal49Client.for_api(
        api,
        concurrency=concurrency,
        transport=transport,
        max_attempts=max_attempts,
        backoff_base_s=backoff_base_s,
    )
    pipeline = make_pipeline(path)
    try:
        source = terminal49_source(
            client, on_page=track, include_shipments_list=include_shipments_list
        )
        written = write_source(
            pipeline, source, path, lock_retry_seconds,
            finish=lambda con: finish_warehouse(con, identity),
        )
        summary.extract_seconds = written.extract_seconds
        summary.rows = {t: written.rows.get(t, 0) for t in TABLES}
        summary.load_id = written.load_id
    finally:
        client.close()
    summary.requests = client.stats.requests
    summary.request_times = list(client.stats.sent_at)
    summary.retries = client.stats.retries
    summary.rate_limited = client.stats.rate_limited
    summary.pages = sum(s.pages for s in pages.values())
    summary.reconcile_pages = sum(s.reconcile_pages for s in pages.values())
    summary.seconds = time.monotonic() - started
    return summary


@dataclass
class Written:
    """What :func:`write_source` wrote: rows per table, the load id, seconds spent extracting."""

    rows: dict[str, int]
    load_id: str | None
    extract_seconds: float


SOURCE_TABLE = "freetime_source"


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


def finish_warehouse(con: duckdb.DuckDBPyConnection, identity: str) -> None:
    """After a load, in its connection: the comments (see :func:`apply_comments`) and the
    source (see :func:`check_source`), each written only where it changed."""
    apply_comments(con, DATASET)
    record_source(con, identity)


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


def write_source(
    pipeline: dlt.Pipeline,
    source: Any,
    path: Path,
    lock_retry_seconds: float = 30.0,
    finish: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
) -> Written:
    """Extract ``source`` completely, normalise, then write it to the warehouse at ``path``.

    The contract every writer of the warehouse shares (the load, webhook apply, documents):
    nothing is written unless extraction finished (a failed extraction is aborted, never loaded
    later); a reader holding the file is waited for ``lock_retry_seconds`` and then reported as
    :class:`WarehouseLocked`; any other failure is :class:`LoadFailed` with a user-safe message.

    Every Arrow page is conformed to the types its table's columns already have (see
    :class:`pipelines.terminal49.flatten.ColumnTypes`), so a value of another type lands in
    ``<column>__raw`` instead of failing this load and every later one.

    ``finish`` runs in the connection that wrote the package, once it is written.
    """
    conform_pages(source, warehouse_column_types(path, lock_retry_seconds))
    started = time.monotonic()
    try:
        with fewer_collections():
            pipeline.extract(source)
        extract_seconds = time.monotonic() - started
        normalized = pipeline.normalize()
    except PipelineStepFailed as exc:
        cause = _root_cause(exc)
        pipeline.abort_packages()  # a partial extraction must never be loaded later
        if isinstance(cause, KeyboardInterrupt):  # Ctrl+C stays an interrupt, not a failure
            raise KeyboardInterrupt("the load was interrupted; nothing was written") from None
        if _is_lock_error(cause):  # dlt reads its state from the warehouse first
            raise WarehouseLocked(_locked_message(path, 0)) from cause
        raise LoadFailed(_describe(cause, exc.step)) from cause
    counts = normalized.row_counts if normalized else {}
    release_unused(collect_garbage=True)  # before DuckDB fills its buffers: peaks add up
    workers = 1 if sum(counts.values()) > ONE_TABLE_AT_A_TIME_ROWS else None
    info = _load_step(pipeline, path, lock_retry_seconds, finish, workers)
    _drop_loaded_packages(pipeline)
    return Written(
        rows={t: int(n) for t, n in counts.items()},
        load_id=info.loads_ids[-1] if info.loads_ids else None,
        extract_seconds=extract_seconds,
    )


def warehouse_column_types(path: Path, lock_retry_seconds: float = 30.0) -> ColumnTypes:
    """The column types dataset ``terminal49`` has in the warehouse (none for a new file)."""
    if not path.exists():
        return ColumnTypes()
    with reading(path, retry_seconds=lock_retry_seconds) as con:
        rows = con.execute(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() "
            "WHERE schema_name = ?",
            [DATASET],
        ).fetchall()
    return ColumnTypes.from_duckdb(rows)


def conform_pages(source: Any, types: ColumnTypes) -> None:
    """Conform every Arrow table the source's resources yield (other items pass unchanged)."""
    for resource in source.resources.values():
        if isinstance(resource.table_name, str):
            resource.add_map(_conformer(types, resource.table_name))


def _conformer(types: ColumnTypes, table: str) -> Callable[[Any], Any]:
    # one parameter only: dlt passes a second argument (the item's meta) to a map that takes two
    def conform(item: Any) -> Any:
        return types.conform(table, item) if isinstance(item, pa.Table) else item

    return conform


def _drop_loaded_packages(pipeline: dlt.Pipeline) -> None:
    """Delete the packages dlt keeps after writing them (``load/loaded/<load id>``: every
    table's Parquet file, 6 MB for 20,000 containers), which would otherwise pile up with
    each scheduled load. The data is in the warehouse; a package that was not written is
    pending, not loaded, and stays for the next load. Never fails the load."""
    loaded = Path(pipeline.working_dir) / "load" / LoadStorage.LOADED_FOLDER
    if not loaded.is_dir():
        return
    for package in loaded.iterdir():
        try:
            shutil.rmtree(package)
        except OSError as exc:
            logging.getLogger(__name__).warning("could not delete %s: %s", package, exc)


def _load_step(
    pipeline: dlt.Pipeline,
    path: Path,
    lock_retry_seconds: float,
    finish: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
    workers: int | None = None,
) -> Any:
    """Write the normalised package through a connection of ours, run ``finish`` in it and
    empty dlt's staging tables before it closes; while a reader holds the file, wait (for
    ``lock_retry_seconds``) and then raise WarehouseLocked. ``workers``: dlt's load workers
    (its configuration when None).

    DuckDB writes what a connection changed into the file when it closes (a checkpoint). dlt
    merges through staging tables and empties them only when the next load starts, so every
    row was written to the file twice: 1.0 s of a 2.3 s write for 100,000 containers, and a
    file that carried a full copy of the last load. Emptied first, the checkpoint takes 0.55 s.

    A package that could not be written stays pending in the pipeline folder; the next load
    writes it first, so nothing that was scanned is lost.
    """
    try:
        with writing(path, retry_seconds=lock_retry_seconds, config=WRITER_CONFIG) as con:
            info = _load_packages(pipeline, con, workers)
            if finish is not None:
                finish(con)
            empty_staging(con, pipeline.dataset_name)
            return info
    except WarehouseLocked as exc:
        raise WarehouseLocked(
            _locked_message(path, lock_retry_seconds)
            + "; the scanned data is kept and will be written by the next load"
        ) from exc


#: DuckDB's buffer pool for the last try of a package that ran out of memory (see
#: :func:`_load_packages`): the pool a load used before the 96 MB one.
FALLBACK_MEMORY_LIMIT = "256MB"


def _load_packages(
    pipeline: dlt.Pipeline, con: duckdb.DuckDBPyConnection, workers: int | None
) -> Any:
    """dlt's load of every pending package through ``con``; LoadFailed if it fails.

    A package whose writing runs out of DuckDB memory (a merge, or already the creation of the
    tables) is tried again, one table at a time, and then once more with a buffer pool of
    :data:`FALLBACK_MEMORY_LIMIT`: the one-table-at-a-time rule of :func:`write_source` is a
    measured threshold, not a guarantee, and a package that failed would otherwise fail the same
    way at every later load. Each try resumes the package where the last one stopped (dlt keeps
    the jobs that finished), and every merge is one transaction.
    """
    tries: list[tuple[int | None, str | None]] = [(workers, None)]
    if workers != 1:
        tries.append((1, None))
    tries.append((1, FALLBACK_MEMORY_LIMIT))
    for n, (count, memory) in enumerate(tries):
        if memory is not None:
            con.execute(f"SET memory_limit = '{memory}'")
        try:
            credentials = DuckDbCredentials(con)
            if count is None:  # dlt's configuration decides
                return pipeline.load(credentials=credentials)
            return pipeline.load(credentials=credentials, workers=count)
        except PipelineStepFailed as exc:
            cause = _root_cause(exc)
            if not isinstance(cause, duckdb.OutOfMemoryException) or n == len(tries) - 1:
                raise LoadFailed(_describe(cause, exc.step)) from exc
            following = tries[n + 1]
            log.warning(
                "DuckDB ran out of memory writing the load; trying again one table at a time%s",
                f" with a {following[1]} buffer pool" if following[1] else "",
            )
    raise AssertionError("unreachable")  # the last try returns or raises


def empty_staging(con: duckdb.DuckDBPyConnection, dataset: str) -> None:
    """Delete every row of dlt's staging tables for ``dataset`` (see
    :func:`pipelines.config.staging_dataset`): they only carry a load's rows to its merge, and
    dlt empties them again before it uses them."""
    schema = staging_dataset(dataset)
    for name in sorted(table_names(con, schema)):
        con.execute(f'DELETE FROM "{schema}"."{name}"')


def _locked_message(path: Path, waited: float) -> str:
    return (
        f"the warehouse {path} stayed locked by another process (an open notebook, a duckdb "
        f"shell or another load) for {waited:.0f}s"
    )


def _is_lock_error(exc: BaseException) -> bool:
    text = str(exc)
    return "Could not set lock" in text or "Conflicting lock" in text


def _root_cause(exc: BaseException) -> BaseException:
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


def _describe(cause: BaseException, step: str) -> str:
    if isinstance(cause, Terminal49Error | ScanIncomplete):
        return f"load failed while reading the API: {cause}"
    if isinstance(cause, httpx.HTTPError):
        return f"load failed while reading the API: {type(cause).__name__}: {cause}"
    return f"load failed at the {step} step: {type(cause).__name__}: {cause}"
