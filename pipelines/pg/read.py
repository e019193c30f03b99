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

import polars as pl

from pipelines.config import Warehouse
from pipelines.pg.risk import adbc_connection

_PLACEHOLDER = re.compile(r"'(?:[^']|'')*'|\?")


@contextmanager
def reading(warehouse: Warehouse) -> Iterator[Any]:
    """An ADBC cursor in a read-only snapshot of the warehouse, rolled back on exit."""
    with adbc_connection(warehouse) as con:
        con.rollback()  # the snapshot starts with the next statement, read-only
        with con.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
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
