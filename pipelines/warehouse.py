"""Short, lock-aware DuckDB connections.

DuckDB allows one writer process or many readers, never both. Readers open read-only
connections briefly; anyone meeting a lock retries for a while and then gets
:class:`WarehouseLocked` with a message a user can act on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.config import Warehouse, resolve_warehouse, working_folder

if TYPE_CHECKING:
    import duckdb
    import polars as pl

log = logging.getLogger("freetime.warehouse")


class WarehouseError(Exception):
    """The warehouse file cannot be used now; the message says why and what to do."""


class WarehouseLocked(WarehouseError):
    """The DuckDB file stayed locked by another process for the whole retry window."""


class WarehouseMissing(WarehouseError):
    """A read was asked of a warehouse file that does not exist yet."""


class WarehouseUnusable(WarehouseError):
    """The path is not a DuckDB file that can be opened: a folder, another kind of file, a
    place that cannot be written. Retrying does not help."""


#: DuckDB's own words for a file another process holds (the last one is Windows').
_LOCK_PHRASES = ("could not set lock", "conflicting lock", "being used by another process")


def is_lock_error(exc: BaseException) -> bool:
    """Whether ``exc`` says another process holds the DuckDB file. Quoted paths are left out
    of the match: DuckDB quotes the file's path, and a path may hold any word ("blocker")."""
    text = re.sub(r'"[^"]*"', '""', str(exc)).lower()
    return any(phrase in text for phrase in _LOCK_PHRASES)


def connect(
    path: str | Path,
    *,
    read_only: bool = False,
    retry_seconds: float = 30.0,
    poll_seconds: float = 0.25,
    config: Mapping[str, Any] | None = None,
) -> duckdb.DuckDBPyConnection:
    """Open ``path`` (with DuckDB settings ``config``); retry while another process holds the
    lock, then raise WarehouseLocked."""
    import duckdb  # here: a command that only names the errors above starts without it

    path = Path(path)
    if read_only and not path.exists():
        raise WarehouseMissing(
            f"no warehouse at {path}: run `freetime load` (or `freetime run`) first"
        )
    if not read_only:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)  # a writer creates the warehouse
        except OSError as exc:
            raise WarehouseUnusable(
                f"cannot create the folder {path.parent} for the warehouse: {exc.strerror or exc}"
            ) from exc
    deadline = time.monotonic() + retry_seconds
    waiting = False
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config=dict(config or {}))
        except duckdb.IOException as exc:
            if not is_lock_error(exc):
                reason = str(exc).removeprefix("IO Error: ")
                raise WarehouseUnusable(
                    f"cannot open the warehouse {path}: {reason} (--duckdb and FREETIME_DUCKDB "
                    "take the path of a DuckDB file, created if missing)"
                ) from exc
            if time.monotonic() >= deadline:
                raise WarehouseLocked(
                    f"the warehouse {path} is locked by another process (a load or an open "
                    f"notebook) and stayed locked for {retry_seconds:.0f}s; close it and retry"
                ) from exc
            if not waiting:
                waiting = True
                log.warning(
                    "the warehouse %s is locked by another process; waiting up to %.0fs",
                    path,
                    retry_seconds,
                )
            time.sleep(poll_seconds)


def existing_warehouse(value: str | os.PathLike[str] | Warehouse | None) -> Warehouse:
    """The warehouse a reader reads: ``value`` (None: ``FREETIME_WAREHOUSE``,
    ``FREETIME_DUCKDB``, the default), ConfigError for a bad path or URL, WarehouseMissing for
    a DuckDB file that does not exist (a reader never creates one). Nothing is opened."""
    warehouse = resolve_warehouse(value)
    if warehouse.path is not None and not warehouse.path.exists():
        raise WarehouseMissing(f"no warehouse at {warehouse.path}: run `freetime load` first")
    return warehouse


def check_usable(path: str | Path) -> None:
    """What a writer checks before it starts anything: WarehouseUnusable if ``path`` exists and
    is not a DuckDB file (a missing file is created by the first write; a file another process
    holds is fine: writers wait for it), then ConfigError if the writers' working folder beside
    it cannot be used (:func:`pipelines.config.working_folder`)."""
    if Path(path).exists():
        with contextlib.suppress(WarehouseLocked):
            connect(path, read_only=True, retry_seconds=0).close()
    working_folder(Path(path))


@contextlib.contextmanager
def reading(
    path: str | Path, *, retry_seconds: float = 30.0
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A brief read-only connection, closed on exit so a load is never blocked for long."""
    con = connect(path, read_only=True, retry_seconds=retry_seconds)
    try:
        yield con
    finally:
        con.close()


@contextlib.contextmanager
def writing(
    path: str | Path, *, retry_seconds: float = 30.0, config: Mapping[str, Any] | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection (with DuckDB settings ``config``), closed on exit."""
    con = connect(path, read_only=False, retry_seconds=retry_seconds, config=config)
    try:
        yield con
    finally:
        con.close()


def quote(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def column_types(con: duckdb.DuckDBPyConnection, schema: str, table: str) -> dict[str, str]:
    """The columns of ``schema.table`` in order, with their DuckDB types (empty when the table
    does not exist)."""
    rows = con.execute(
        "SELECT column_name, data_type FROM duckdb_columns() "
        "WHERE schema_name = ? AND table_name = ? ORDER BY column_index",
        [schema, table],
    ).fetchall()
    return {name: typ for name, typ in rows}


def table_names(con: duckdb.DuckDBPyConnection, schema: str) -> set[str]:
    """The tables and views of ``schema`` (empty when the schema does not exist)."""
    rows = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = ?", [schema]
    ).fetchall()
    return {r[0] for r in rows}


def read_table(
    path: str | Path, schema: str, name: str, *, retry_seconds: float = 30.0
) -> pl.DataFrame | None:
    """A whole table or view as a polars frame (instants in UTC), None when it does not exist."""
    import polars as pl  # here: the CLI imports this module and should start fast

    with reading(path, retry_seconds=retry_seconds) as con:
        if name not in table_names(con, schema):
            return None
        con.execute("SET TimeZone = 'UTC'")
        df = pl.from_arrow(con.sql(f'SELECT * FROM "{schema}"."{name}"').arrow())
    assert isinstance(df, pl.DataFrame)
    return df


def row_counts(
    path: str | Path, schema: str, tables: list[str], *, retry_seconds: float = 30.0
) -> dict[str, int]:
    """Row counts of ``tables`` in ``schema`` (0 for one that does not exist)."""
    out: dict[str, int] = {}
    with reading(path, retry_seconds=retry_seconds) as con:
        have = table_names(con, schema)
        for t in tables:
            rows = (
                con.execute(f'SELECT count(*) FROM "{schema}"."{t}"').fetchall()
                if t in have
                else [(0,)]
            )
            out[t] = int(rows[0][0])
    return out
