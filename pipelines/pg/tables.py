"""Whole tables and row counts of a PostgreSQL warehouse, read in one read-only snapshot.

The PostgreSQL side of :func:`pipelines.warehouse.read_table` and
:func:`pipelines.warehouse.row_counts`: several tables read by one call come from the same
committed state (:func:`pipelines.pg.read.reading`), so a summary never mixes two publishes.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from pipelines.config import Warehouse
from pipelines.pg.read import frame, has_table, reading
from pipelines.warehouse import quote


def read_tables(
    warehouse: Warehouse, names: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], pl.DataFrame | None]:
    """Each ``(schema, table)`` (a table or a view) whole as a polars frame (instants in
    UTC), None for one that does not exist; all from one snapshot."""
    out: dict[tuple[str, str], pl.DataFrame | None] = {}
    with reading(warehouse) as cur:
        for schema, table in names:
            out[schema, table] = (
                frame(cur, f"SELECT * FROM {quote(schema)}.{quote(table)}")
                if has_table(cur, schema, table)
                else None
            )
    return out


def row_counts(warehouse: Warehouse, schema: str, tables: Sequence[str]) -> dict[str, int]:
    """Row counts of ``tables`` in ``schema`` (0 for one that does not exist), one snapshot."""
    out: dict[str, int] = {}
    with reading(warehouse) as cur:
        for table in tables:
            if not has_table(cur, schema, table):
                out[table] = 0
                continue
            cur.execute(f"SELECT count(*) FROM {quote(schema)}.{quote(table)}")
            row = cur.fetchone()
            out[table] = int(row[0]) if row else 0
    return out
