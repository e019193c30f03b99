"""Staging: a writer's rows on their way to the warehouse, before anyone takes the writer lock.

Each writer stages in a **slot** of its own (:func:`staging_slot`): a dlt pipeline with its own
working folder beside the warehouse and its own incoming dataset (``_incoming_<slot>``) in the
warehouse file. dlt extracts and normalises there without touching the warehouse, so a full
scan, an incremental sync and webhook batches stage side by side; two writers of one kind (two
loads) get two slots. A slot outlives a killed writer: what it staged and did not publish is
published by the next writer that takes the slot.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dlt
import pyarrow as pa
from dlt.common.destination import Destination, DestinationCapabilitiesContext
from dlt.common.normalizers.naming import NamingConvention
from dlt.common.storages import LoadStorage
from dlt.destinations.impl.duckdb.configuration import DuckDbCredentials

from pipelines.config import DATASET, incoming_dataset, working_folder
from pipelines.terminal49.flatten import ColumnTypes
from pipelines.warehouse import reading

log = logging.getLogger("freetime.write")

#: DuckDB settings of the writing connection: a bounded buffer pool (DuckDB spills to disk
#: beyond it) keeps the writer's memory bounded whatever the account's size.
WRITER_CONFIG: dict[str, Any] = {
    "memory_limit": "128MB",
    "preserve_insertion_order": False,
    "threads": 1,  # each DuckDB thread holds buffers of its own: one keeps the pool enough
}
#: Slots one kind of writer may stage in at once (a full scan and an incremental sync of
#: the same warehouse take two).
MAX_SLOTS = 8


class _DropDltNoise(logging.Filter):
    """Noise here: dlt warns on every Arrow table whose nullability differs from its schema
    (the flattener declares key columns non-null, dlt's schema keeps its own); and it logs a
    traceback for a failing job or trace file (a full disk), a failure it raises to the write,
    which reports it in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info or record.funcName == "suppress_and_warn":
            return False
        message = record.getMessage()
        return not (
            "when merging arrow schema with dlt schema" in message
            or "Traceback (most recent call last)" in message  # a retried job's failure
        )


_DLT_NOISE = _DropDltNoise()


@contextlib.contextmanager
def staging_slot(duckdb_path: Path, writer: str) -> Iterator[str]:
    """A staging slot of ``writer`` that no other process or thread uses, held for the block:
    ``writer`` itself when free, else ``writer_2``, ``writer_3``... (an advisory lock on a file
    in the working folder, released if the process dies)."""
    folder = working_folder(duckdb_path)
    for n in range(1, MAX_SLOTS + 1):
        slot = writer if n == 1 else f"{writer}_{n}"
        fd = os.open(folder / f"staging-{slot}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield slot
        finally:
            os.close(fd)
        return
    raise RuntimeError(f"more than {MAX_SLOTS} {writer} writers of {duckdb_path} at once")


def quiet_dlt_and_tag_loads() -> None:
    """What every writer's dlt pipeline needs, on any warehouse: dlt's log without the noise
    a user cannot act on, and dlt's load id on every Arrow row."""
    dlt_logger = logging.getLogger("dlt")
    if _DLT_NOISE not in dlt_logger.filters:
        dlt_logger.addFilter(_DLT_NOISE)
    # publish() picks each load's rows by their load id, which dlt adds to Arrow rows only when
    # told so, whatever the project's .dlt/config.toml says
    dlt.config["normalize.parquet_normalizer.add_dlt_load_id"] = True


def capabilities_once(destination: Destination[Any, Any]) -> Destination[Any, Any]:
    """``destination`` (a dlt destination factory of one write), its capabilities worked out
    once per naming convention. dlt asks a factory for its capabilities about ten times a
    write, and each time resolves the destination's whole configuration again (a large share
    of a small write's CPU); they cannot change during the write. A caller's copy is its own:
    dlt adjusts the object it gets."""
    work_out = destination.capabilities
    known: dict[tuple[Any, ...], DestinationCapabilitiesContext] = {}

    def capabilities(
        config: Any = None, naming: NamingConvention | None = None
    ) -> DestinationCapabilitiesContext:
        if config is not None:  # a resolved configuration: nothing to resolve
            return work_out(config, naming)
        key = () if naming is None else (type(naming), naming.is_case_sensitive, naming.max_length)
        if key not in known:
            known[key] = work_out(None, naming)
        return known[key].copy()

    destination.capabilities = capabilities  # type: ignore[method-assign]
    return destination


def make_pipeline(duckdb_path: Path, slot: str) -> dlt.Pipeline:
    """The dlt pipeline of staging slot ``slot`` ("load", "webhooks", "documents", "load_2"):
    its own working folder and state beside the warehouse, loading into
    :func:`incoming_dataset`."""
    quiet_dlt_and_tag_loads()
    credentials = DuckDbCredentials(str(duckdb_path), global_config=WRITER_CONFIG)
    return dlt.pipeline(
        pipeline_name=f"freetime_{slot}",
        destination=capabilities_once(dlt.destinations.duckdb(credentials)),
        dataset_name=incoming_dataset(slot),
        pipelines_dir=str(working_folder(duckdb_path)),
    )


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


def drop_loaded_packages(pipeline: dlt.Pipeline) -> None:
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
