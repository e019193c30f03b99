"""Reading ``analytics.alert_outbox`` (written by :mod:`pipelines.alerts.rules`) of a DuckDB or
PostgreSQL warehouse: short read-only connections (on PostgreSQL a read-only snapshot), never
held while a channel is being talked to."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

from pipelines.alerts.rules import OUTBOX
from pipelines.config import ANALYTICS_SCHEMA as A
from pipelines.config import Warehouse, resolve_warehouse
from pipelines.warehouse import WarehouseMissing, reading, table_names

#: A destination seen for the first time receives the alerts raised this long before.
BACKLOG = timedelta(hours=24)

WarehouseArg = str | os.PathLike[str] | Warehouse | None


def _rows(cur: Any) -> list[dict[str, Any]]:
    names = [d[0] for d in cur.description or []]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _query(warehouse: WarehouseArg, sql: str) -> list[dict[str, Any]]:
    """The rows of ``sql`` (the same SQL on both) over the outbox; ``[]`` when nothing was
    raised yet (no outbox table). Raises WarehouseMissing / WarehouseLocked /
    WarehouseUnusable."""
    wh = resolve_warehouse(warehouse)
    if wh.is_postgres:
        from pipelines.pg.read import frame, has_table
        from pipelines.pg.read import reading as pg_reading

        with pg_reading(wh) as cur:
            if not has_table(cur, A, "alert_outbox"):
                return []
            return frame(cur, sql).to_dicts()
    assert wh.path is not None
    with reading(wh.path) as con:
        if "alert_outbox" not in table_names(con, A):
            return []
        con.execute("SET TimeZone = 'UTC'")
        return _rows(con.execute(sql))


def read_alerts(
    warehouse: WarehouseArg, after_seq: int = 0, limit: int = 5000
) -> list[dict[str, Any]]:
    """Outbox rows with ``seq > after_seq``, oldest first (at most ``limit``); ``[]`` when
    nothing was raised yet. Raises WarehouseMissing / WarehouseLocked / WarehouseUnusable."""
    return _query(
        warehouse,
        f"SELECT * FROM {OUTBOX} WHERE seq > {int(after_seq)} ORDER BY seq LIMIT {int(limit)}",
    )


def recent_alerts(warehouse: WarehouseArg, limit: int = 50) -> list[dict[str, Any]]:
    """The ``limit`` most recent outbox rows, newest first."""
    return _query(warehouse, f"SELECT * FROM {OUTBOX} ORDER BY seq DESC LIMIT {int(limit)}")


def start_cursor(warehouse: WarehouseArg, now: datetime | None = None) -> int:
    """Where a new destination starts: after the alerts raised more than :data:`BACKLOG` ago
    (a destination added today does not get last month's alerts)."""
    before = ((now or datetime.now(UTC)) - BACKLOG).astimezone(UTC).isoformat()
    try:
        rows = _query(
            warehouse,
            f"SELECT coalesce(max(seq), 0) AS seq FROM {OUTBOX} "
            f"WHERE raised_at < CAST('{before}' AS TIMESTAMPTZ)",
        )
    except WarehouseMissing:
        return 0
    return int(rows[0]["seq"]) if rows else 0
