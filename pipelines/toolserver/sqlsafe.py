"""The read-only SQL tool: one SELECT, a row cap, a time limit.

Safety does not rest on parsing alone: the statement runs on a read-only snapshot whose
connection has file, network and extension access disabled and its configuration locked
(:data:`pipelines.toolserver.snapshot.SAFE_CONFIG`). The statement check adds a plain refusal
for everything that is not a query (``COPY``, ``ATTACH``, ``INSTALL``, ``LOAD``, ``PRAGMA``,
``SET``, ``CALL``, ...) before DuckDB sees it.

A time limit must stop the work, not only the wait: DuckDB checks for an interrupt between
vectors, so one scalar call over a large string (``repeat``, ``regexp_replace``,
``levenshtein``) runs on long after :meth:`~duckdb.DuckDBPyConnection.interrupt`.
:func:`run_query` therefore runs the statement in a child process of its own on the
snapshot file, and kills it at the limit.
"""

from __future__ import annotations

import multiprocessing
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import duckdb

from pipelines.toolserver.snapshot import open_snapshot

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


def _fetch(con: duckdb.DuckDBPyConnection, query: str, max_rows: int) -> SqlResult:
    """At most ``max_rows`` rows of ``query`` (and whether there were more)."""
    try:
        rel = con.execute(query)
        rows = rel.fetchmany(max_rows + 1)
        desc = rel.description or []
    except duckdb.Error as exc:
        raise SqlRefused(f"the query failed: {_plain(exc)}") from None
    return SqlResult(
        columns=[d[0] for d in desc],
        types=[str(d[1]) for d in desc],
        rows=rows[:max_rows],
        truncated=len(rows) > max_rows,
    )


def run_query(
    path: Path,
    sql: str,
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
) -> SqlResult:
    """Run one read-only query on the snapshot at ``path``, returning at most ``max_rows``
    rows; SqlRefused when it is refused, fails or runs out of time. It runs in a child process
    killed once ``timeout_seconds`` have passed: whatever the statement does, nothing of it
    runs on after the answer. The statement is checked here first (a refusal costs no
    process)."""
    with duckdb.connect() as con:
        query = check_statement(con, sql)
    ctx = _context()
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(
        target=_run_in_child,
        args=(send, str(path), query, max_rows),
        name="freetime-mcp-sql",
        daemon=True,
    )
    child.start()
    send.close()
    try:
        if not receive.poll(timeout_seconds):
            child.kill()
            raise SqlRefused(
                f"the query ran longer than {timeout_seconds:g}s and was stopped; "
                "narrow it or aggregate"
            )
        try:
            outcome: SqlResult | str = receive.recv()
        except EOFError:  # the child died (out of memory, say) before it answered
            raise SqlRefused("the query failed: it stopped without an answer") from None
    finally:
        receive.close()
        child.join()
    if isinstance(outcome, str):
        raise SqlRefused(outcome)
    return outcome


def _context() -> Any:
    """Children forked from a clean server process (never from this threaded one), which
    has imported DuckDB once: a statement starts in milliseconds."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["__main__", __name__])
    return ctx


def _run_in_child(send: Connection, path: str, query: str, max_rows: int) -> None:
    outcome: SqlResult | str
    try:
        with open_snapshot(Path(path)) as con:
            outcome = _fetch(con, query, max_rows)
    except SqlRefused as exc:
        outcome = str(exc)
    except duckdb.Error as exc:  # the snapshot could not be opened
        outcome = f"the query failed: {_plain(exc)}"
    send.send(outcome)
    send.close()


def _plain(exc: BaseException) -> str:
    """DuckDB's message on one line."""
    return " ".join(str(exc).split())
