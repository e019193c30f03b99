"""The invoices' way into either warehouse: one connection object, the same SQL on both.

A DuckDB file is read and written through its DuckDB connection; a PostgreSQL warehouse
through a :class:`~pipelines.pg.cursor.PgCursor` over a psycopg2 connection, which takes the
same calls (``execute(sql, [params])`` with ``?`` placeholders). The SQL of
:mod:`.store` and :mod:`.audit` is written once for both, with :mod:`pipelines.dialect` where
the two spell a phrase differently.

- :func:`writer`: the writers' lock of the warehouse (a lock file, or the database's advisory
  lock), then a connection; :func:`transaction` makes a block one transaction on either;
- :func:`reader`: a read-only view of one committed state (``REPEATABLE READ, READ ONLY`` on
  PostgreSQL);
- a PostgreSQL error becomes one line (``WarehouseUnusable``, the password masked).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeAlias

import psycopg2

from pipelines.config import Warehouse
from pipelines.dialect import DUCKDB, POSTGRES, Dialect
from pipelines.pg.cursor import PgCursor, is_postgres
from pipelines.warehouse import WarehouseUnusable, existing_warehouse

#: what the warehouse is given as: a DuckDB path, a ``postgresql://`` URL, a Warehouse
Target: TypeAlias = "Path | str | os.PathLike[str] | Warehouse"
#: a DuckDB connection, or a :class:`~pipelines.pg.cursor.PgCursor` (the same calls)
Con: TypeAlias = Any


def dialect(con: Con) -> Dialect:
    """The SQL dialect of ``con``."""
    return POSTGRES if is_postgres(con) else DUCKDB


@contextlib.contextmanager
def _pg_errors(warehouse: Warehouse, doing: str) -> Iterator[None]:
    """A PostgreSQL error in the block as one line (the server's reason, password masked)."""
    from pipelines.pg.connection import one_line

    try:
        yield
    except psycopg2.Error as exc:
        raise WarehouseUnusable(
            f"{doing} {warehouse.display} failed: {one_line(exc, warehouse)}"
        ) from None


@contextlib.contextmanager
def writer(target: Target, what: str) -> Iterator[Con]:
    """A connection to write the warehouse, under its writers' lock (held for the block)."""
    warehouse = existing_warehouse(target)
    if warehouse.path is not None:
        from pipelines.publish.lock import writer_lock
        from pipelines.warehouse import writing

        with writer_lock(warehouse.path, what), writing(warehouse.path) as con:
            yield con
        return
    from pipelines.pg.connection import connection
    from pipelines.pg.lock import writer_lock as pg_writer_lock

    with (
        pg_writer_lock(warehouse, what),
        connection(warehouse, application=f"freetime {what}") as raw,
        _pg_errors(warehouse, f"the {what} on"),
    ):
        cur = PgCursor(raw)
        try:
            yield cur
        finally:
            raw.rollback()  # whatever the block did not commit
            cur.close()


@contextlib.contextmanager
def reader(target: Target) -> Iterator[Con]:
    """A read-only connection that sees one committed state of the warehouse."""
    warehouse = existing_warehouse(target)
    if warehouse.path is not None:
        from pipelines.warehouse import reading

        with reading(warehouse.path) as con:
            yield con
        return
    from pipelines.pg.connection import connection

    with (
        connection(warehouse, application="freetime invoices") as raw,
        _pg_errors(warehouse, "reading"),
    ):
        cur = PgCursor(raw)
        try:
            cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield cur
        finally:
            raw.rollback()
            cur.close()


@contextlib.contextmanager
def transaction(con: Con) -> Iterator[None]:
    """The block as one transaction of ``con``: committed at its end, rolled back on error.
    (On PostgreSQL the transaction began with the connection's first statement: the reads
    before the block and its writes commit together.)"""
    if is_postgres(con):
        try:
            yield
            con.commit()
        except BaseException:
            con.rollback()
            raise
        return
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def insert_rows(con: Con, table: str, names: list[str], rows: list[list[Any]]) -> None:
    """Insert ``rows`` (values in the order of ``names``) into ``table`` (qualified)."""
    if not rows:
        return
    if is_postgres(con):
        from psycopg2.extras import execute_values

        cols = ", ".join(f'"{n}"' for n in names)
        execute_values(con.raw, f"INSERT INTO {table} ({cols}) VALUES %s", rows, page_size=1000)
        return
    import uuid

    import pyarrow as pa

    name = f"_rows_{uuid.uuid4().hex}"
    con.register(name, pa.table({n: [row[k] for row in rows] for k, n in enumerate(names)}))
    try:
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {name}")
    finally:
        con.unregister(name)


@contextlib.contextmanager
def evidence_connection(
    warehouse: Warehouse,
    containers: list[str],
    timeout_seconds: float | None = None,
    within: Con | None = None,
) -> Iterator[Any]:
    """A DuckDB connection the evidence's SQL (:func:`pipelines.history.evidence.gather`)
    reads for ``containers``: on PostgreSQL an in-memory copy of their rows, taken in one
    read-only snapshot (:func:`pipelines.pg.read.container_copy`; every statement stopped after
    ``timeout_seconds`` when given), the snapshot of ``within`` (an open PostgreSQL
    transaction) when given, so that the copy and what ``within`` read are one state. A DuckDB
    warehouse is read directly."""
    if warehouse.path is not None:
        from pipelines.warehouse import reading

        with reading(warehouse.path) as con:
            yield con
        return
    from pipelines.pg import read

    shared = None
    if within is not None:
        row = within.execute("SELECT pg_export_snapshot()").fetchone()
        shared = str(row[0]) if row else None
    with read.reading(warehouse, shared) as cur:
        if timeout_seconds is not None:
            cur.execute(
                f"SELECT set_config('statement_timeout', '{int(timeout_seconds * 1000)}ms', true)"
            )
            cur.fetchall()
        copy = read.container_copy(cur, containers)
    try:
        yield copy
    finally:
        copy.close()
