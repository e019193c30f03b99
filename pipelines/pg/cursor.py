"""One calling convention for both warehouses: a psycopg2 cursor called as a DuckDB connection.

Code that reads (or writes) either warehouse with the same SQL (the tool server's queries, the
invoice audit) calls ``con.execute(sql, params).fetchall()`` with DuckDB's ``?`` placeholders;
on PostgreSQL ``con`` is a :class:`PgCursor` over the caller's psycopg2 connection (whose
transaction it runs in). :func:`is_postgres` tells which warehouse an object reads;
:func:`columns` lists a table's columns on either.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from psycopg2.extensions import connection as Connection

from pipelines.warehouse import column_types

#: PostgreSQL's type oids -> DuckDB's names, so a column's type reads the same on both
TYPE_NAMES = {
    16: "BOOLEAN",
    20: "BIGINT",
    21: "SMALLINT",
    23: "INTEGER",
    25: "VARCHAR",
    114: "JSON",
    700: "FLOAT",
    701: "DOUBLE",
    1009: "VARCHAR[]",
    1043: "VARCHAR",
    1082: "DATE",
    1114: "TIMESTAMP",
    1184: "TIMESTAMP WITH TIME ZONE",
    1700: "DECIMAL",
    3802: "JSON",
}

_QUOTED_OR_MARK = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\?|%")


def postgres_sql(sql: str) -> str:
    """``sql`` with DuckDB's ``?`` placeholders (outside quoted strings and names) as
    psycopg2's ``%s``, and every literal ``%`` as ``%%``."""

    def swap(m: re.Match[str]) -> str:
        token = m.group(0)  # psycopg2 formats the whole text: a quoted % is doubled too
        return "%s" if token == "?" else token.replace("%", "%%")

    return _QUOTED_OR_MARK.sub(swap, sql)


class PgCursor:
    """A psycopg2 cursor inside a call's transaction, called as a DuckDB connection is."""

    dialect = "postgres"

    def __init__(self, con: Connection) -> None:
        self._cur = con.cursor()

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> PgCursor:
        """Run ``sql``: ``?`` placeholders with a sequence, psycopg2's ``%(name)s`` with a
        mapping."""
        if isinstance(params, Mapping):
            self._cur.execute(sql, dict(params))
        elif params:
            self._cur.execute(postgres_sql(sql), list(params))
        else:
            self._cur.execute(sql)
        return self

    def fetchall(self) -> list[tuple[Any, ...]]:
        return list(self._cur.fetchall())

    def fetchone(self) -> tuple[Any, ...] | None:
        row = self._cur.fetchone()
        return tuple(row) if row is not None else None

    @property
    def description(self) -> list[tuple[str, str]] | None:
        desc = self._cur.description
        if desc is None:
            return None
        return [(d.name, TYPE_NAMES.get(d.type_code, "VARCHAR")) for d in desc]

    @property
    def raw(self) -> Any:
        """The psycopg2 cursor itself (for its own calls: ``execute_values``, ``COPY``)."""
        return self._cur

    def commit(self) -> None:
        """Commit the connection's transaction."""
        self._cur.connection.commit()

    def rollback(self) -> None:
        """Roll the connection's transaction back."""
        self._cur.connection.rollback()

    def close(self) -> None:
        self._cur.close()

    def __enter__(self) -> PgCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def is_postgres(x: object) -> bool:
    """Whether ``x`` (a connection, cursor or view with a ``dialect``) reads PostgreSQL."""
    return getattr(x, "dialect", "duckdb") == "postgres"


def columns(cur: Any, schema: str, table: str) -> list[str]:
    """The columns of ``schema.table`` (a table or a view) in order; empty when it does not
    exist. ``cur``: a DuckDB connection or cursor, or a :class:`PgCursor`."""
    if is_postgres(cur):
        rows = cur.execute(
            "SELECT a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = ? AND "
            "c.relname = ? AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            [schema, table],
        ).fetchall()
        return [str(r[0]) for r in rows]
    return list(column_types(cur, schema, table))
