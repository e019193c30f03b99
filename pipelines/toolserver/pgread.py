"""The tool server on a PostgreSQL warehouse: the live database, read-only, no copies.

PostgreSQL lets readers and writers work side by side, so the tool server reads the warehouse
itself rather than snapshot copies (:mod:`.snapshot` is the DuckDB file's answer):

- each call is **one read-only transaction** (``REPEATABLE READ, READ ONLY``): every statement
  of an answer sees the same committed state, so a call during a load's or a risk run's publish
  sees the warehouse before it or after it, whole, and never waits for it;
- every statement of a call stops at ``statement_timeout`` (:class:`PgReader`'s
  ``timeout_seconds``); the SQL tool (:meth:`PgView.run_query`) runs exactly one statement
  and fetches at most its row cap (a server-side cursor: the rest is never sent);
- the server reads **as a role that can only read**: :func:`check_reader` refuses a role that
  may create, insert, update, delete or truncate anything in the warehouse's schemas, or that
  is a superuser; ``freetime warehouse grant-reader`` (:mod:`pipelines.pg.reader`) makes one;
- connections are pooled; after each call the transaction is rolled back and the session reset
  (``DISCARD ALL``: settings, advisory locks, cursors), so no call leaves anything behind.

:class:`PgView` is what a tool's query function gets (the DuckDB side's
:class:`~.snapshot.Snapshot`): ``con.cursor()`` gives a :class:`PgCursor`, which takes the
queries' DuckDB calling convention (``?`` placeholders, ``execute`` returning the cursor,
types by their DuckDB names) so that one set of queries serves both warehouses.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import psycopg2
from psycopg2.extensions import connection as Connection

from pipelines.config import Warehouse
from pipelines.pg.connection import connect, one_line
from pipelines.pg.cursor import TYPE_NAMES, PgCursor
from pipelines.pg.reader import SCHEMAS
from pipelines.toolserver.sqlsafe import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_SECONDS,
    SqlRefused,
    SqlResult,
)
from pipelines.warehouse import WarehouseError, WarehouseUnusable

#: the name the server's sessions show in ``pg_stat_activity``
APPLICATION = "freetime tool server"
#: connections kept open between calls
POOL_SIZE = 8
#: first words of a statement that returns rows and may run in a cursor of the server
QUERY_WORDS = ("SELECT", "WITH", "VALUES", "TABLE")
#: what a statement's text holds that a ``;`` inside does not end: quoted strings and names,
#: dollar-quoted bodies, comments
_SKIPPED = re.compile(
    # a backslash escapes only in E'...' strings (standard_conforming_strings)
    r"(?<![A-Za-z0-9_])[Ee]'(?:[^'\\]|''|\\.)*'|'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\""
    r"|(\$[A-Za-z_0-9]*\$)[\s\S]*?\1"
    r"|--[^\n]*|/\*[\s\S]*?\*/|;"
)


def split_statements(sql: str) -> list[str]:
    """The statements of ``sql`` (PostgreSQL's lexical rules for strings, dollar quotes and
    comments), each stripped, empty ones (and comment-only ones) left out."""
    out: list[str] = []
    start = 0
    for m in _SKIPPED.finditer(sql):
        if m.group(0) == ";":
            out.append(sql[start : m.start()])
            start = m.end()
    out.append(sql[start:])
    return [s.strip() for s in out if _COMMENTS.sub("", s).strip()]


_COMMENTS = re.compile(r"--[^\n]*|/\*[\s\S]*?\*/")


class _Cursors:
    """``view.con``: hands out :class:`PgCursor` on the call's connection."""

    def __init__(self, con: Connection) -> None:
        self._con = con

    def cursor(self) -> PgCursor:
        return PgCursor(self._con)


class PgView:
    """One call's read-only transaction on the warehouse (the DuckDB side's Snapshot)."""

    dialect = "postgres"
    path = None

    def __init__(self, con: Connection, timeout_seconds: float) -> None:
        self._raw = con
        self.con = _Cursors(con)
        self.taken_at = time.time()
        self.timeout_seconds = timeout_seconds
        self._answers: dict[Hashable, Any] = {}

    def cached(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()``, remembered for this call only: the live database changes between
        calls."""
        if key not in self._answers:
            self._answers[key] = compute()
        return self._answers[key]

    def run_query(self, sql: str, *, max_rows: int = DEFAULT_MAX_ROWS) -> SqlResult:
        """Run one statement of the caller's SQL in this read-only transaction, at most
        ``max_rows`` rows; SqlRefused (with PostgreSQL's reason) when it is not one statement,
        fails, tries to write, or runs past the time limit."""
        statements = split_statements(sql)
        if not statements:
            raise SqlRefused("empty statement: give one SELECT query")
        if len(statements) != 1:
            raise SqlRefused(f"one statement per call, got {len(statements)}")
        text = statements[0]
        first = _COMMENTS.sub(" ", text).split(None, 1)[0].lstrip("(").upper()
        query = first in QUERY_WORDS
        cur = self._raw.cursor()
        try:
            if query:  # through a cursor of the server: only the rows returned are sent
                cur.execute(f"DECLARE freetime_sql NO SCROLL CURSOR FOR {text}")
                cur.execute(f"FETCH FORWARD {int(max_rows) + 1} FROM freetime_sql")
            else:  # the read-only transaction and the role's rights answer it
                cur.execute(text)
            rows = cur.fetchall() if cur.description else []
            desc = cur.description or []
        except psycopg2.errors.QueryCanceled:
            raise SqlRefused(
                f"the query ran longer than {self.timeout_seconds:g}s and was stopped; "
                "narrow it or aggregate"
            ) from None
        except psycopg2.Error as exc:
            reason = " ".join(str(exc.pgerror or exc).split()).removeprefix("ERROR: ")
            raise SqlRefused(f"the query failed: {reason}") from None
        finally:
            with contextlib.suppress(psycopg2.Error):
                cur.close()
        return SqlResult(
            columns=[d.name for d in desc],
            types=[TYPE_NAMES.get(d.type_code, "VARCHAR") for d in desc],
            rows=[tuple(r) for r in rows[:max_rows]],
            truncated=len(rows) > max_rows,
        )


def check_reader(con: Connection, warehouse: Warehouse) -> None:
    """WarehouseUnusable unless the connection's role can only read the warehouse: no
    superuser, no CREATE on the database or its schemas, no INSERT, UPDATE, DELETE or
    TRUNCATE on any of their tables."""
    with con.cursor() as cur:
        cur.execute(
            "SELECT current_user, rolsuper, has_database_privilege(current_database(), 'CREATE'),"
            " ARRAY(SELECT nspname::text FROM pg_namespace WHERE nspname = ANY(%s) "
            "      AND has_schema_privilege(oid, 'CREATE') ORDER BY 1),"
            " ARRAY(SELECT n.nspname || '.' || c.relname FROM pg_class c "
            "      JOIN pg_namespace n ON n.oid = c.relnamespace "
            "      WHERE n.nspname = ANY(%s) AND c.relkind IN ('r', 'p') "
            "      AND has_table_privilege(c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE') "
            "      ORDER BY 1 LIMIT 3) "
            "FROM pg_roles WHERE rolname = current_user",
            [list(SCHEMAS), list(SCHEMAS)],
        )
        row = cur.fetchone()
    con.rollback()
    assert row is not None
    user, superuser, create_db, schemas, tables = row
    can = (
        ["is a superuser"] * bool(superuser)
        + ["may create schemas"] * bool(create_db)
        + [f"may create in {', '.join(schemas)}"] * bool(schemas)
        + [f"may write {', '.join(tables)}"] * bool(tables)
    )
    if can:
        raise WarehouseUnusable(
            f"the tool server reads {warehouse.display} as a role that can only read, and "
            f"{user} {'; '.join(can)}: make a reader with `freetime warehouse grant-reader "
            "ROLE` and give its URL (see docs/postgres.md)"
        )


class PgReader:
    """Read-only transactions on the live PostgreSQL warehouse, one per call (see the module
    docstring). ``check_role``: refuse a role that can write (:func:`check_reader`)."""

    dialect = "postgres"

    def __init__(
        self,
        warehouse: Warehouse,
        *,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        pool_size: int = POOL_SIZE,
        check_role: bool = True,
    ) -> None:
        self.warehouse = warehouse
        self.timeout_seconds = timeout_seconds
        self.pool_size = pool_size
        self._idle: list[Connection] = []
        self._lock = threading.Lock()
        con = self._connect()
        try:
            if check_role:
                check_reader(con, warehouse)
        except BaseException:
            con.close()
            raise
        self._idle.append(con)

    def _connect(self) -> Connection:
        con = connect(self.warehouse, autocommit=True, application=APPLICATION)
        with con.cursor() as cur:  # whatever the role's defaults, the server's sessions read
            cur.execute("SET default_transaction_read_only = on")
        return con

    def _take(self) -> Connection:
        with self._lock:
            while self._idle:
                con = self._idle.pop()
                if not con.closed:
                    return con
        return self._connect()

    def _give_back(self, con: Connection) -> None:
        try:
            with con.cursor() as cur:  # settings, advisory locks, cursors: nothing lingers
                cur.execute("DISCARD ALL")
                cur.execute("SET default_transaction_read_only = on")
        except psycopg2.Error:
            con.close()
            return
        with self._lock:
            if len(self._idle) < self.pool_size:
                self._idle.append(con)
                return
        con.close()

    def _begin(self, con: Connection) -> Connection:
        """Start the call's read-only transaction with its time limit on ``con`` (closed when
        that fails)."""
        try:
            with con.cursor() as cur:
                cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                cur.execute(
                    "SELECT set_config('statement_timeout', %s, true)",
                    [f"{int(self.timeout_seconds * 1000)}ms"],
                )
        except psycopg2.Error:
            con.close()
            raise
        return con

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[PgView]:
        """A read-only transaction for the block: every statement sees one committed state
        and stops after the time limit. WarehouseError when the server cannot be read."""
        try:
            con = self._begin(self._take())
        except psycopg2.Error:  # a pooled session the server dropped (a restart): a new one
            try:
                con = self._begin(self._connect())
            except psycopg2.Error as exc:
                raise WarehouseError(
                    f"the warehouse {self.warehouse.display} cannot be read now: "
                    f"{one_line(exc, self.warehouse)}"
                ) from None
        healthy = True
        try:
            yield PgView(con, self.timeout_seconds)
        except psycopg2.errors.QueryCanceled:
            raise WarehouseError(
                f"reading the warehouse took longer than {self.timeout_seconds:g}s; retry, or "
                "narrow the question"
            ) from None
        except psycopg2.Error as exc:
            healthy = not isinstance(exc, psycopg2.OperationalError | psycopg2.InterfaceError)
            raise WarehouseError(
                f"the warehouse {self.warehouse.display} cannot be read now: "
                f"{one_line(exc, self.warehouse)}"
            ) from None
        finally:
            try:
                with con.cursor() as cur:
                    cur.execute("ROLLBACK")
            except psycopg2.Error:
                healthy = False
            if healthy:
                self._give_back(con)
            else:
                con.close()

    def close(self) -> None:
        """Close the pooled connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for con in idle:
            con.close()
