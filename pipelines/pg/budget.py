"""The API key's budget shared by the writers of a PostgreSQL warehouse on every machine.

A file in the working folder (:class:`~pipelines.terminal49._ratelimit.SharedWindowLimiter`)
shares the key's window between the processes of one machine; writers of one PostgreSQL
warehouse may run on several. :class:`DatabaseBudget` keeps the window in the warehouse
instead: one row per key in ``terminal49.freetime_budget`` (the key's digest, never the key),
read and rewritten in a transaction under an advisory lock of the database, with send times
by the database server's clock, which every machine shares. The pacing rules are the shared
limiter's (the full scan yields to the other writers).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from psycopg2.extensions import connection as Connection

from pipelines.config import DATASET, Warehouse
from pipelines.pg.connection import connect
from pipelines.terminal49._ratelimit import SharedWindowLimiter
from pipelines.warehouse import quote

TABLE = "freetime_budget"
#: the advisory lock that serialises every read and rewrite of the windows
BUDGET_KEY = int.from_bytes(hashlib.sha256(b"freetime.budget").digest()[:8], "big") >> 1


class DatabaseBudget:
    """:class:`~pipelines.terminal49._ratelimit.BudgetStore` of a PostgreSQL warehouse."""

    def __init__(self, warehouse: Warehouse) -> None:
        self.warehouse = warehouse

    def limiter(
        self,
        key: str,
        limit: int | None,
        window: float,
        margin: float,
        *,
        yielding: bool,
        sleep: Callable[[float], None],
    ) -> DatabaseWindowLimiter:
        return DatabaseWindowLimiter(
            self.warehouse, key, limit, window, margin, yielding=yielding, sleep=sleep
        )


class DatabaseWindowLimiter(SharedWindowLimiter):
    """The shared window of ``key`` in the warehouse's ``terminal49.freetime_budget``; its
    clock is this machine's monotonic clock set to the server's (at each read of the window),
    so the send times of every machine compare."""

    def __init__(
        self,
        warehouse: Warehouse,
        key: str,
        limit: int | None,
        window: float = 60.0,
        margin: float = 0.5,
        *,
        yielding: bool = False,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._offset = 0.0  # the server's epoch seconds minus this machine's monotonic clock
        super().__init__(
            None, limit, window, margin, yielding=yielding, clock=self._now, sleep=sleep
        )
        self.warehouse = warehouse
        self.key = key
        self._con: Connection | None = None
        self._con_guard = threading.Lock()
        self._ready = False  # its table exists

    def _now(self) -> float:
        return time.monotonic() + self._offset

    @contextlib.contextmanager
    def _shared(self) -> Iterator[dict[str, Any]]:
        with self._con_guard:
            if self._con is None or self._con.closed:
                self._con = connect(self.warehouse, application="freetime budget")
            con = self._con
            name = f"{quote(DATASET)}.{TABLE}"
            try:
                with con.cursor() as cur:
                    cur.execute("SELECT pg_advisory_xact_lock(%s)", [BUDGET_KEY])
                    if not self._ready:
                        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(DATASET)}")
                        cur.execute(
                            f"CREATE TABLE IF NOT EXISTS {name} "
                            "(key VARCHAR PRIMARY KEY, state TEXT NOT NULL)"
                        )
                    cur.execute("SELECT extract(epoch FROM clock_timestamp())")
                    row = cur.fetchone()
                    assert row is not None
                    self._offset = float(row[0]) - time.monotonic()
                    cur.execute(f"SELECT state FROM {name} WHERE key = %s", [self.key])
                    found = cur.fetchone()
                    try:
                        state = json.loads(found[0]) if found else {}
                    except ValueError:
                        state = {}
                    if not isinstance(state, dict):
                        state = {}
                    yield state
                    cur.execute(
                        f"INSERT INTO {name} VALUES (%s, %s) "
                        "ON CONFLICT (key) DO UPDATE SET state = excluded.state",
                        [self.key, json.dumps(state)],
                    )
                con.commit()
                self._ready = True
            except BaseException:
                with contextlib.suppress(Exception):
                    con.rollback()
                raise

    def close(self) -> None:
        """Close its connection (the client's close calls it)."""
        with self._con_guard:
            if self._con is not None:
                self._con.close()
                self._con = None
