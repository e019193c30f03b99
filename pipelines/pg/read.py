"""Readers of a PostgreSQL warehouse (the report, the notebooks): brief read-only transactions,
results straight into polars by ADBC.

A reader's transaction is ``REPEATABLE READ, READ ONLY``: every query of one :func:`reading`
sees the same committed state (a publish is in it whole or not at all), it never takes a lock
a writer waits for, and it can write nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import duckdb
import polars as pl

from pipelines.config import Warehouse
from pipelines.pg.risk import adbc_connection

_PLACEHOLDER = re.compile(r"'(?:[^']|'')*'|\?")


@contextmanager
def reading(warehouse: Warehouse, snapshot: str | None = None) -> Iterator[Any]:
    """An ADBC cursor in a read-only snapshot of the warehouse, rolled back on exit;
    ``snapshot``: the id another open transaction exported (``pg_export_snapshot()``), whose
    state this one then sees."""
    with adbc_connection(warehouse) as con:
        con.rollback()  # the snapshot starts with the next statement, read-only
        with con.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            if snapshot is not None:
                cur.execute(f"SET TRANSACTION SNAPSHOT '{snapshot.replace(chr(39), '')}'")
            cur.execute("SET TIME ZONE 'UTC'")  # the rollback above undid the session's
            try:
                yield cur
            finally:
                con.rollback()


def frame(cur: Any, sql: str, params: Sequence[object] | None = None) -> pl.DataFrame:
    """``sql`` (DuckDB's ``?`` placeholders accepted) as a polars frame."""
    if params:
        n = iter(range(1, len(params) + 1))
        sql = _PLACEHOLDER.sub(lambda m: m.group(0) if m.group(0) != "?" else f"${next(n)}", sql)
        cur.execute(sql, list(params))
    else:
        cur.execute(sql)
    df = pl.from_arrow(cur.fetch_arrow_table())
    assert isinstance(df, pl.DataFrame)
    return df


def has_table(cur: Any, schema: str, table: str) -> bool:
    """Whether ``schema.table`` (a table or a view) exists."""
    cur.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 "
        "AND table_name = $2",
        [schema, table],
    )
    row = cur.fetchone()
    return bool(row and row[0])


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def container_copy(cur: Any, containers: Sequence[str]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB holding what the evidence of ``containers`` (numbers or ids) reads,
    copied from the snapshot of ``cur``: their rows of ``terminal49`` (containers, shipments,
    holds, fees, history), the terminals and ports, and the published risk run's instant. The
    evidence's own SQL then runs on it unchanged (:func:`pipelines.history.evidence.gather`)."""
    from pipelines.config import ANALYTICS_SCHEMA as A
    from pipelines.config import DATASET as T
    from pipelines.history import HISTORY_TABLE

    given = ", ".join(_literal(c) for c in containers) or "NULL"
    upper = ", ".join(_literal(c.upper()) for c in containers) or "NULL"
    ids = "SELECT NULL::text WHERE false"
    if has_table(cur, T, "containers"):
        ids = f"SELECT id FROM {T}.containers WHERE id IN ({given}) OR upper(number) IN ({upper})"
    only = {
        "containers": f"id IN ({ids})",
        "container_holds": f"container_id IN ({ids})",
        "container_fees": f"container_id IN ({ids})",
        "shipments": f"id IN (SELECT shipment_id FROM {T}.containers WHERE id IN ({ids}))",
        HISTORY_TABLE: f"entity = 'container' AND entity_id IN ({ids})",
        "terminals": "true",
        "ports": "true",
    }
    mem = duckdb.connect()
    mem.execute("SET TimeZone = 'UTC'")
    mem.execute(f"CREATE SCHEMA {T}")
    mem.execute(f"CREATE SCHEMA {A}")
    for table, where in only.items():
        if has_table(cur, T, table):
            rows = frame(cur, f'SELECT * FROM {T}."{table}" WHERE {where}')
            mem.register("_rows", rows.to_arrow())
            mem.execute(f'CREATE TABLE {T}."{table}" AS SELECT * FROM _rows')
            mem.unregister("_rows")
    if has_table(cur, A, "demurrage_risk"):
        stamp = frame(cur, f"SELECT max(as_of) AS as_of FROM {A}.demurrage_risk")
        mem.register("_rows", stamp.to_arrow())
        mem.execute(f"CREATE TABLE {A}.demurrage_risk AS SELECT * FROM _rows")
        mem.unregister("_rows")
    return mem
