"""Reading ``analytics.alert_outbox`` (written by :mod:`pipelines.alerts.rules`): short
read-only connections, never held while a channel is being talked to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pipelines.alerts.rules import OUTBOX
from pipelines.config import ANALYTICS_SCHEMA as A
from pipelines.config import resolve_duckdb_path
from pipelines.warehouse import WarehouseMissing, reading, table_names

#: A destination seen for the first time receives the alerts raised this long before.
BACKLOG = timedelta(hours=24)


def _rows(cur: Any) -> list[dict[str, Any]]:
    names = [d[0] for d in cur.description or []]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def read_alerts(
    duckdb_path: str | Path | None, after_seq: int = 0, limit: int = 5000
) -> list[dict[str, Any]]:
    """Outbox rows with ``seq > after_seq``, oldest first (at most ``limit``); ``[]`` when
    nothing was raised yet. Raises WarehouseMissing / WarehouseLocked."""
    path = resolve_duckdb_path(duckdb_path)
    with reading(path) as con:
        if "alert_outbox" not in table_names(con, A):
            return []
        con.execute("SET TimeZone = 'UTC'")
        cur = con.execute(
            f"SELECT * FROM {OUTBOX} WHERE seq > ? ORDER BY seq LIMIT ?", [after_seq, limit]
        )
        return _rows(cur)


def recent_alerts(duckdb_path: str | Path | None, limit: int = 50) -> list[dict[str, Any]]:
    """The ``limit`` most recent outbox rows, newest first."""
    path = resolve_duckdb_path(duckdb_path)
    with reading(path) as con:
        if "alert_outbox" not in table_names(con, A):
            return []
        con.execute("SET TimeZone = 'UTC'")
        return _rows(con.execute(f"SELECT * FROM {OUTBOX} ORDER BY seq DESC LIMIT ?", [limit]))


def start_cursor(duckdb_path: str | Path | None, now: datetime | None = None) -> int:
    """Where a new destination starts: after the alerts raised more than :data:`BACKLOG` ago
    (a destination added today does not get last month's alerts)."""
    now = now or datetime.now(UTC)
    path = resolve_duckdb_path(duckdb_path)
    try:
        with reading(path) as con:
            if "alert_outbox" not in table_names(con, A):
                return 0
            row = con.execute(
                f"SELECT coalesce(max(seq), 0) FROM {OUTBOX} WHERE raised_at < ?",
                [now - BACKLOG],
            ).fetchone()
    except WarehouseMissing:
        return 0
    return int(row[0]) if row else 0
