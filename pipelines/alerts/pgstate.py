"""The delivery state of a PostgreSQL warehouse: in the database, shared by every machine.

The same rows as the state file of a DuckDB warehouse (:mod:`pipelines.alerts.state`), in three
tables of ``analytics`` beside the outbox: ``alert_destinations`` (cursor, failures, back-off,
last error), ``alert_deliveries`` (destination, alert, when sent) and ``alert_digests``
(destination, local date, what it showed). They are created when missing (the sender's role
needs ``CREATE`` on ``analytics``, as the writer that publishes risk has).

Each mark is committed at once (autocommit), right after the channel accepted the message.
:meth:`PgDeliveryState.exclusive` is a session-level advisory lock of the database per
destination: the senders of every machine (the flows' step, ``freetime alerts send``, a
receiver's applier) take it before reading a destination's cursor and hold it while they send,
so an alert goes to a destination once even when two senders run at the same time; the server
releases it when a sender's session ends, so a sender that dies never leaves it held.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import date, datetime
from typing import Any

import psycopg2
from psycopg2.extensions import cursor as Cursor

from pipelines.alerts.state import iso
from pipelines.config import ANALYTICS_SCHEMA as A
from pipelines.config import Warehouse
from pipelines.pg.connection import connect, one_line
from pipelines.warehouse import WarehouseUnusable

DESTINATIONS = f"{A}.alert_destinations"
DELIVERIES = f"{A}.alert_deliveries"
DIGESTS = f"{A}.alert_digests"
DDL = f"""
CREATE SCHEMA IF NOT EXISTS {A};
CREATE TABLE IF NOT EXISTS {DESTINATIONS} (
    key text PRIMARY KEY,
    label text,
    cursor bigint NOT NULL,
    failures integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    last_error text,
    last_error_at timestamptz
);
CREATE TABLE IF NOT EXISTS {DELIVERIES} (
    dest_key text NOT NULL,
    seq bigint NOT NULL,
    alert_key text NOT NULL,
    sent_at timestamptz NOT NULL,
    PRIMARY KEY (dest_key, seq)
);
CREATE TABLE IF NOT EXISTS {DIGESTS} (
    dest_key text NOT NULL,
    local_date date NOT NULL,
    sent_at timestamptz NOT NULL,
    snapshot text NOT NULL,
    PRIMARY KEY (dest_key, local_date)
);
"""
#: the first of the two keys of every alerts lock (the second: the hash of what is locked)
LOCK_SPACE = "freetime.alerts"


def _text(value: Any) -> Any:
    """The state file's form of a value: instants and dates as ISO text."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, date):
        return value.isoformat()
    return value


class PgDeliveryState:
    """One session of the warehouse (one per thread, as for the state file). ``create=False``:
    tables that are missing are not created and read as empty (a dry run writes nothing)."""

    def __init__(self, warehouse: Warehouse, *, create: bool = True) -> None:
        self.warehouse = warehouse
        self.con = connect(warehouse, autocommit=True, application="freetime alerts")
        try:
            with self.con.cursor() as cur:
                cur.execute(
                    "SELECT to_regclass(%s) IS NOT NULL AND to_regclass(%s) IS NOT NULL "
                    "AND to_regclass(%s) IS NOT NULL",
                    [DESTINATIONS, DELIVERIES, DIGESTS],
                )
                row = cur.fetchone()
                self.ready = bool(row and row[0])
                if not self.ready and create:
                    # one creator at a time: CREATE ... IF NOT EXISTS races with itself
                    cur.execute(
                        f"BEGIN; SELECT pg_advisory_xact_lock(hashtext('{LOCK_SPACE}')); "
                        f"{DDL} COMMIT;"
                    )
                    self.ready = True
        except psycopg2.Error as exc:
            self.con.close()
            raise WarehouseUnusable(
                f"cannot keep the alerts' delivery state in {warehouse.display}: "
                f"{one_line(exc, warehouse)}"
            ) from None

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> PgDeliveryState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _cursor(self) -> Iterator[Cursor]:
        try:
            with self.con.cursor() as cur:
                yield cur
        except psycopg2.Error as exc:
            raise WarehouseUnusable(
                f"the alerts' delivery state in {self.warehouse.display}: "
                f"{one_line(exc, self.warehouse)}"
            ) from None

    def _rows(self, sql: str, params: list[Any]) -> list[dict[str, Any]]:
        if not self.ready:
            return []
        with self._cursor() as cur:
            cur.execute(sql, params)
            names = [d[0] for d in cur.description or []]
            return [{n: _text(v) for n, v in zip(names, r, strict=True)} for r in cur.fetchall()]

    def _run(self, sql: str, params: list[Any]) -> None:
        with self._cursor() as cur:
            cur.execute(sql, params)

    @contextlib.contextmanager
    def exclusive(self, name: str, wait_seconds: float) -> Iterator[bool]:
        """Hold the lock of ``name`` (a destination's key) across machines for the block:
        True once held (waiting up to ``wait_seconds`` for another sender to finish), False
        when it was still held by another sender after that."""
        deadline = time.monotonic() + wait_seconds
        with self._cursor() as cur:
            while True:
                cur.execute(
                    "SELECT pg_try_advisory_lock(hashtext(%s), hashtext(%s))", [LOCK_SPACE, name]
                )
                row = cur.fetchone()
                if row and row[0]:
                    break
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.2)
        try:
            yield True
        finally:
            with contextlib.suppress(psycopg2.Error), self.con.cursor() as cur:
                cur.execute(
                    "SELECT pg_advisory_unlock(hashtext(%s), hashtext(%s))", [LOCK_SPACE, name]
                )

    # ---- destinations ----------------------------------------------------------------------
    def destination(self, key: str) -> dict[str, Any] | None:
        rows = self._rows(f"SELECT * FROM {DESTINATIONS} WHERE key = %s", [key])
        return rows[0] if rows else None

    def destinations(self) -> dict[str, dict[str, Any]]:
        return {r["key"]: r for r in self._rows(f"SELECT * FROM {DESTINATIONS}", [])}

    def register(self, key: str, label: str, cursor: int) -> dict[str, Any]:
        """The destination's row, created with ``cursor`` the first time it is seen."""
        (row,) = self._rows(
            f"INSERT INTO {DESTINATIONS} (key, label, cursor) VALUES (%s, %s, %s) "
            "ON CONFLICT (key) DO UPDATE SET label = excluded.label RETURNING *",
            [key, label, cursor],
        )
        return row

    def advance(self, key: str, cursor: int) -> None:
        self._run(
            f"UPDATE {DESTINATIONS} SET cursor = greatest(cursor, %s) WHERE key = %s",
            [cursor, key],
        )

    def failed(self, key: str, error: str, retry_at: datetime, now: datetime) -> int:
        """Record a failed attempt; return the number of failures in a row."""
        rows = self._rows(
            f"UPDATE {DESTINATIONS} SET failures = failures + 1, next_attempt_at = %s, "
            "last_error = %s, last_error_at = %s WHERE key = %s RETURNING failures",
            [retry_at, error, now, key],
        )
        return int(rows[0]["failures"]) if rows else 1

    def recovered(self, key: str) -> None:
        self._run(
            f"UPDATE {DESTINATIONS} SET failures = 0, next_attempt_at = NULL WHERE key = %s",
            [key],
        )

    # ---- deliveries ------------------------------------------------------------------------
    def mark_sent(self, key: str, seq: int, alert_key: str, at: datetime) -> None:
        """Committed before it returns: called right after the channel accepted the alert."""
        self._run(
            f"INSERT INTO {DELIVERIES} VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
            [key, seq, alert_key, at],
        )

    def sent_seqs(self, key: str, after: int) -> set[int]:
        rows = self._rows(
            f"SELECT seq FROM {DELIVERIES} WHERE dest_key = %s AND seq > %s", [key, after]
        )
        return {int(r["seq"]) for r in rows}

    def deliveries(self, seqs: list[int]) -> dict[int, dict[str, str]]:
        """``{seq: {dest_key: sent_at}}`` for the given alerts."""
        out: dict[int, dict[str, str]] = {}
        for r in self._rows(
            f"SELECT seq, dest_key, sent_at FROM {DELIVERIES} WHERE seq = ANY(%s)", [seqs]
        ):
            out.setdefault(int(r["seq"]), {})[r["dest_key"]] = r["sent_at"]
        return out

    # ---- digests ---------------------------------------------------------------------------
    def last_digest(self, key: str) -> dict[str, Any] | None:
        rows = self._rows(
            f"SELECT * FROM {DIGESTS} WHERE dest_key = %s ORDER BY local_date DESC LIMIT 1", [key]
        )
        return rows[0] if rows else None

    def digest_sent(self, key: str, local_date: str, at: datetime, snapshot: str) -> None:
        self._run(
            f"INSERT INTO {DIGESTS} VALUES (%s, %s, %s, %s) ON CONFLICT (dest_key, local_date) "
            "DO UPDATE SET sent_at = excluded.sent_at, snapshot = excluded.snapshot",
            [key, local_date, at, snapshot],
        )
