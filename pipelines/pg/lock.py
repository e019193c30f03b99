"""One writer at a time on a PostgreSQL warehouse, across processes and machines.

The writer's lock is a session-level advisory lock of the database (``pg_advisory_lock``) held
by a connection of its own for as long as the writer runs: the server releases it when that
session ends, so a writer that dies (a kill, a machine lost) never leaves it held. The waiting
line names the holder from ``pg_stat_activity`` (its ``application_name`` says what it is, its
pid and when it started), as the DuckDB writer lock names it from its lock file.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator

from psycopg2.extensions import connection as Connection
from psycopg2.extensions import cursor as Cursor

from pipelines.config import Warehouse, resolve_writer_wait
from pipelines.pg.connection import connect
from pipelines.publish.lock import HeldLocks

log = logging.getLogger("freetime.pg.lock")

#: the advisory lock key of the writers (advisory locks are per database): a fixed 63-bit
#: number derived from a name, so no other application's small keys collide with it
WRITER_KEY = int.from_bytes(hashlib.sha256(b"freetime.writer").digest()[:8], "big") >> 1
PREFIX = "freetime writer: "

_held = HeldLocks()  # by the warehouse's display form: nested steps of one process


def _busy() -> type[Exception]:
    from pipelines.write import WriterBusy  # the one WriterBusy of every warehouse

    return WriterBusy


@contextlib.contextmanager
def writer_lock(
    warehouse: Warehouse,
    what: str,
    wait_seconds: float | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold the writers' advisory lock of ``warehouse``; the contract of
    :func:`pipelines.write.writer_lock` (say once whom we wait for, ``WriterBusy`` after
    ``wait_seconds``, re-entrant within a process)."""
    key = warehouse.display
    with _held.nested(key) as nested:
        if nested:
            yield
            return
        started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        name = f"{PREFIX}{what} pid {os.getpid()} on {socket.gethostname()[:16]} at {started}"
        con = connect(warehouse, autocommit=True, application=name)
        try:
            wait = resolve_writer_wait(wait_seconds)
            _acquire(con, wait, on_wait or (lambda line: log.warning("%s", line)))
            try:
                with _held.holding(key):
                    yield
            finally:
                # a lost session has released it already
                with contextlib.suppress(Exception), con.cursor() as cur:
                    cur.execute("SELECT pg_advisory_unlock(%s)", [WRITER_KEY])
        finally:
            con.close()


@contextlib.contextmanager
def staging_slot(warehouse: Warehouse, writer: str) -> Iterator[str]:
    """A staging slot of ``writer`` (:func:`pipelines.publish.staging.staging_slot`'s
    contract) that no other process uses, on any machine: its incoming schema is in the
    database, so the slot is an advisory lock of the database held by a session of its own
    for the block (released by the server if the writer dies)."""
    from pipelines.publish.staging import MAX_SLOTS

    con = connect(warehouse, autocommit=True, application=f"freetime staging {writer}")
    try:
        with con.cursor() as cur:
            for n in range(1, MAX_SLOTS + 1):
                slot = writer if n == 1 else f"{writer}_{n}"
                key = _key(f"freetime.slot.{slot}")
                cur.execute("SELECT pg_try_advisory_lock(%s)", [key])
                row = cur.fetchone()
                if not (row and row[0]):
                    continue
                try:
                    yield slot
                finally:
                    with contextlib.suppress(Exception):
                        cur.execute("SELECT pg_advisory_unlock(%s)", [key])
                return
        raise RuntimeError(f"more than {MAX_SLOTS} {writer} writers of {warehouse.display}")
    finally:
        con.close()


def _key(name: str) -> int:
    """A 63-bit advisory lock key derived from ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") >> 1


def _acquire(con: Connection, wait_seconds: float, on_wait: Callable[[str], None]) -> None:
    deadline = time.monotonic() + wait_seconds
    said = False
    with con.cursor() as cur:
        while True:
            cur.execute("SELECT pg_try_advisory_lock(%s)", [WRITER_KEY])
            row = cur.fetchone()
            if row and row[0]:
                return
            holder = _holder(cur)
            if time.monotonic() >= deadline:
                raise _busy()(
                    f"the warehouse is being written by {holder} and was not free after "
                    f"{wait_seconds:.0f}s; try again later"
                )
            if not said:
                on_wait(f"waiting for {holder} to finish writing the warehouse")
                said = True
            time.sleep(0.2)


def _holder(cur: Cursor) -> str:
    """Who holds the writers' lock, from its session's application name."""
    cur.execute(
        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.database = "
        "(SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND l.classid = (%s >> 32) AND l.objid = (%s & 4294967295) LIMIT 1",
        [WRITER_KEY, WRITER_KEY],
    )
    row = cur.fetchone()
    name = str(row[0]) if row and row[0] else ""
    if not name.startswith(PREFIX):
        return "another writer"
    what, _, rest = name.removeprefix(PREFIX).partition(" pid ")
    pid, _, rest = rest.partition(" on ")
    host, _, started = rest.partition(" at ")
    return f"the {what} (pid {pid} on {host}) that started at {started} UTC"
