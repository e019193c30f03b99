"""The read-only SQL tool: one SELECT, a row cap, a time limit.

Safety does not rest on parsing alone: the statement runs on a read-only snapshot whose
connection has file, network and extension access disabled and its configuration locked
(:data:`pipelines.toolserver.snapshot.SAFE_CONFIG`). The statement check adds a plain refusal
for everything that is not a query (``COPY``, ``ATTACH``, ``INSTALL``, ``LOAD``, ``PRAGMA``,
``SET``, ``CALL``, ...) before DuckDB sees it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import duckdb

DEFAULT_MAX_ROWS = 1000
DEFAULT_TIMEOUT_SECONDS = 10.0


class SqlRefused(ValueError):
    """The statement is not one read-only query, or it failed; the message says why."""


@dataclass
class SqlResult:
    columns: list[str]
    types: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool


def check_statement(con: duckdb.DuckDBPyConnection, sql: str) -> str:
    """The text of the single query in ``sql``; SqlRefused for anything else."""
    if not sql.strip():
        raise SqlRefused("empty statement: give one SELECT query")
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise SqlRefused(f"the SQL does not parse: {_plain(exc)}") from None
    if len(statements) != 1:
        raise SqlRefused(f"one statement per call, got {len(statements)}")
    st = statements[0]
    if st.type != duckdb.StatementType.SELECT:
        kind = st.type.name
        raise SqlRefused(
            f"only read-only queries (SELECT, WITH, DESCRIBE, SHOW) are allowed, not {kind}"
        )
    return str(st.query)


def run_query(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
) -> SqlResult:
    """Run one read-only query on ``con`` (a cursor of its own: it may be interrupted),
    returning at most ``max_rows`` rows; SqlRefused when it is refused, fails or runs out of
    time."""
    query = check_statement(con, sql)
    timed_out = threading.Event()

    def stop() -> None:
        timed_out.set()
        con.interrupt()

    timer = threading.Timer(timeout_seconds, stop)
    timer.daemon = True
    timer.start()
    try:
        rel = con.execute(query)
        rows = rel.fetchmany(max_rows + 1)
        desc = rel.description or []
    except duckdb.Error as exc:
        if timed_out.is_set():
            raise SqlRefused(
                f"the query ran longer than {timeout_seconds:g}s and was stopped; "
                "narrow it or aggregate"
            ) from None
        raise SqlRefused(f"the query failed: {_plain(exc)}") from None
    finally:
        timer.cancel()
    return SqlResult(
        columns=[d[0] for d in desc],
        types=[str(d[1]) for d in desc],
        rows=rows[:max_rows],
        truncated=len(rows) > max_rows,
    )


def _plain(exc: BaseException) -> str:
    """DuckDB's message on one line."""
    return " ".join(str(exc).split())
