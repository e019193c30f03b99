"""Delivery state: which destination got which alert and digest.

On a DuckDB warehouse it is an SQLite file beside the warehouse (env ``FREETIME_ALERTS_STATE``,
default ``alerts.sqlite``): the outbox lives in the warehouse (``analytics.alert_outbox``,
written with the risk), what the sender writes lives here, so that marking a message sent never
waits for the warehouse's single writer and a load never waits for a slow channel. On a
PostgreSQL warehouse it is kept in the database itself (:mod:`pipelines.alerts.pgstate`), shared
by the senders of every machine. :func:`open_state` picks the one of a warehouse.

Every mark is its own committed transaction, written right after the channel accepted the
message: a sender killed between the two sends that one message again on restart, nothing more.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from pipelines.config import ConfigError, Warehouse, resolve_duckdb_path, resolve_warehouse
from pipelines.publish.lock import flock_within

STATE_ENV = "FREETIME_ALERTS_STATE"

SCHEMA = """
CREATE TABLE IF NOT EXISTS destinations (
    key TEXT PRIMARY KEY,
    label TEXT,
    cursor INTEGER NOT NULL,          -- every alert with seq <= cursor is sent or not wanted
    failures INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT,             -- back-off: no attempt before (UTC ISO)
    last_error TEXT,
    last_error_at TEXT
);
CREATE TABLE IF NOT EXISTS deliveries (
    dest_key TEXT NOT NULL,
    seq INTEGER NOT NULL,
    alert_key TEXT NOT NULL,
    sent_at TEXT NOT NULL,
    PRIMARY KEY (dest_key, seq)
);
CREATE TABLE IF NOT EXISTS digests (
    dest_key TEXT NOT NULL,
    local_date TEXT NOT NULL,
    sent_at TEXT NOT NULL,
    snapshot TEXT NOT NULL,           -- JSON: the at-risk boxes the digest showed
    PRIMARY KEY (dest_key, local_date)
);
"""


def default_state_path(duckdb_path: str | os.PathLike[str] | None = None) -> Path:
    """Env ``FREETIME_ALERTS_STATE``, else ``alerts.sqlite`` beside the warehouse file."""
    env = os.environ.get(STATE_ENV)
    if env:
        return Path(env)
    return resolve_duckdb_path(duckdb_path).parent / "alerts.sqlite"


def iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="seconds")


class StateStore(Protocol):
    """What the sender, the digest and ``alerts list`` need of a delivery state (the rows are
    dicts with the columns of :data:`SCHEMA`, instants and dates as ISO text)."""

    def close(self) -> None: ...
    def __enter__(self) -> StateStore: ...
    def __exit__(self, *exc: object) -> None: ...
    def exclusive(self, name: str, wait_seconds: float) -> AbstractContextManager[bool]: ...
    def destination(self, key: str) -> dict[str, Any] | None: ...
    def destinations(self) -> dict[str, dict[str, Any]]: ...
    def register(self, key: str, label: str, cursor: int) -> dict[str, Any]: ...
    def advance(self, key: str, cursor: int) -> None: ...
    def failed(self, key: str, error: str, retry_at: datetime, now: datetime) -> int: ...
    def recovered(self, key: str) -> None: ...
    def mark_sent(self, key: str, seq: int, alert_key: str, at: datetime) -> None: ...
    def sent_seqs(self, key: str, after: int) -> set[int]: ...
    def deliveries(self, seqs: list[int]) -> dict[int, dict[str, str]]: ...
    def last_digest(self, key: str) -> dict[str, Any] | None: ...
    def digest_sent(self, key: str, local_date: str, at: datetime, snapshot: str) -> None: ...


def _no_file(state_path: str | os.PathLike[str] | None) -> None:
    """A PostgreSQL warehouse keeps its state in the database, shared by every machine: a
    state file named for it is a mistake (ConfigError), not something to ignore."""
    if state_path is not None:
        raise ConfigError(
            "--state names the delivery state file of a DuckDB warehouse; a PostgreSQL "
            "warehouse keeps its delivery state in the database"
        )


def _state_file(warehouse: Warehouse, state_path: str | os.PathLike[str] | None) -> Path:
    return Path(state_path) if state_path else default_state_path(warehouse.path)


def open_state(
    warehouse: str | os.PathLike[str] | Warehouse | None,
    state_path: str | os.PathLike[str] | None = None,
    *,
    create: bool = True,
) -> StateStore:
    """The delivery state of ``warehouse`` (a path, a URL or a :class:`Warehouse`; None: the
    configured one): the SQLite file (``state_path``, else :func:`default_state_path`), or
    the state tables of a PostgreSQL warehouse (``create=False``: not created when missing,
    read as empty: a role that may only read lists alerts). One per thread. ConfigError when it
    cannot be used (``state_path`` given for PostgreSQL included); WarehouseUnusable when the server
    refuses."""
    wh = resolve_warehouse(warehouse)
    if wh.is_postgres:
        _no_file(state_path)
        from pipelines.alerts.pgstate import PgDeliveryState

        return PgDeliveryState(wh, create=create)
    return DeliveryState(_state_file(wh, state_path))


def last_snapshots(
    warehouse: str | os.PathLike[str] | Warehouse | None,
    state_path: str | os.PathLike[str] | None,
    keys: Iterable[str],
) -> dict[str, str]:
    """``{destination key: what its last digest showed}``, writing nothing (no state file or
    table is created): for ``freetime alerts digest --dry-run``."""
    wh = resolve_warehouse(warehouse)
    if wh.is_postgres:
        _no_file(state_path)
        from pipelines.alerts.pgstate import PgDeliveryState

        store: StateStore | None = PgDeliveryState(wh, create=False)
    else:
        path = _state_file(wh, state_path)
        store = DeliveryState(path) if path.exists() else None
    if store is None:
        return {}
    with store:
        return {k: str(row["snapshot"]) for k in keys if (row := store.last_digest(k))}


class DeliveryState:
    """One connection to the state file (one per thread: SQLite connections are not shared)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.con = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self.con.execute("PRAGMA journal_mode=WAL")
            self.con.executescript(SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cannot use the alert state file {self.path}: {exc}") from exc
        self.con.row_factory = sqlite3.Row

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> DeliveryState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def exclusive(self, name: str, wait_seconds: float) -> Iterator[bool]:
        """Hold the lock of ``name`` (a destination's key) for the block, against every other
        sender of this state file (the receiver's and a scheduled one on the same machine, or
        two threads): True once held (waiting up to ``wait_seconds``), False when another
        sender still held it after that. A lock file per destination, in a folder beside the
        state file, so that a slow destination never holds up another; released if the
        process dies."""
        folder = self.path.with_name(self.path.name + ".locks")
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        try:
            folder.mkdir(exist_ok=True)
            fd = os.open(folder / f"{digest}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(f"cannot lock the alert state file {self.path}: {exc}") from exc
        try:
            yield flock_within(fd, wait_seconds)
        finally:
            os.close(fd)  # closing releases the lock

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self.con.execute("BEGIN IMMEDIATE")
        try:
            yield self.con
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    # ---- destinations ----------------------------------------------------------------------
    def destination(self, key: str) -> dict[str, Any] | None:
        row = self.con.execute("SELECT * FROM destinations WHERE key = ?", [key]).fetchone()
        return dict(row) if row else None

    def destinations(self) -> dict[str, dict[str, Any]]:
        return {r["key"]: dict(r) for r in self.con.execute("SELECT * FROM destinations")}

    def register(self, key: str, label: str, cursor: int) -> dict[str, Any]:
        """The destination's row, created with ``cursor`` the first time it is seen."""
        with self._tx() as con:
            con.execute(
                "INSERT INTO destinations (key, label, cursor) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET label = excluded.label",
                [key, label, cursor],
            )
        found = self.destination(key)
        assert found is not None
        return found

    def advance(self, key: str, cursor: int) -> None:
        with self._tx() as con:
            con.execute(
                "UPDATE destinations SET cursor = max(cursor, ?) WHERE key = ?", [cursor, key]
            )

    def failed(self, key: str, error: str, retry_at: datetime, now: datetime) -> int:
        """Record a failed attempt; return the number of failures in a row."""
        with self._tx() as con:
            con.execute(
                "UPDATE destinations SET failures = failures + 1, next_attempt_at = ?, "
                "last_error = ?, last_error_at = ? WHERE key = ?",
                [iso(retry_at), error, iso(now), key],
            )
        row = self.destination(key)
        return int(row["failures"]) if row else 1

    def recovered(self, key: str) -> None:
        with self._tx() as con:
            con.execute(
                "UPDATE destinations SET failures = 0, next_attempt_at = NULL WHERE key = ?", [key]
            )

    # ---- deliveries ------------------------------------------------------------------------
    def mark_sent(self, key: str, seq: int, alert_key: str, at: datetime) -> None:
        """Committed before it returns: called right after the channel accepted the alert."""
        with self._tx() as con:
            con.execute(
                "INSERT OR IGNORE INTO deliveries VALUES (?, ?, ?, ?)",
                [key, seq, alert_key, iso(at)],
            )

    def sent_seqs(self, key: str, after: int) -> set[int]:
        return {
            r[0]
            for r in self.con.execute(
                "SELECT seq FROM deliveries WHERE dest_key = ? AND seq > ?", [key, after]
            )
        }

    def deliveries(self, seqs: list[int]) -> dict[int, dict[str, str]]:
        """``{seq: {dest_key: sent_at}}`` for the given alerts."""
        out: dict[int, dict[str, str]] = {}
        for i in range(0, len(seqs), 500):
            chunk = seqs[i : i + 500]
            marks = ",".join("?" for _ in chunk)
            for r in self.con.execute(
                f"SELECT seq, dest_key, sent_at FROM deliveries WHERE seq IN ({marks})", chunk
            ):
                out.setdefault(r[0], {})[r[1]] = r[2]
        return out

    # ---- digests ---------------------------------------------------------------------------
    def last_digest(self, key: str) -> dict[str, Any] | None:
        row = self.con.execute(
            "SELECT * FROM digests WHERE dest_key = ? ORDER BY local_date DESC LIMIT 1", [key]
        ).fetchone()
        return dict(row) if row else None

    def digest_sent(self, key: str, local_date: str, at: datetime, snapshot: str) -> None:
        with self._tx() as con:
            con.execute(
                "INSERT OR REPLACE INTO digests VALUES (?, ?, ?, ?)",
                [key, local_date, iso(at), snapshot],
            )
