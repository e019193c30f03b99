"""A partial risk run on PostgreSQL publishes the rows a full DuckDB run publishes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import duckdb
import psycopg2
import pytest

from pipelines.analytics import LEVELS, at_risk, publish_risk, publish_risk_of

pytestmark = pytest.mark.postgres

CLOCK = "2026-11-20T12:00:00Z"
AS_OF = datetime.fromisoformat(CLOCK.replace("Z", "+00:00"))

#: A batch's changes, in SQL both warehouses run: LFDs moved, availability and an
#: appointment, a hold released, a box gone, a shipment renamed.
CHANGES = (
    "UPDATE terminal49.containers SET pickup_lfd_terminal = coalesce(pickup_lfd_terminal, "
    "DATE '2026-11-25') - 3 WHERE id IN ({a}, {b})",
    "UPDATE terminal49.containers SET available_for_pickup = NOT coalesce(available_for_pickup, "
    "false), pickup_appointment_at = TIMESTAMPTZ '2026-11-21 15:00:00+00' WHERE id = {c}",
    "DELETE FROM terminal49.container_holds WHERE container_id = {held}",
    "DELETE FROM terminal49.containers WHERE id = {gone}",
    "UPDATE terminal49.shipments SET customer_name = 'Renamed Ltd' WHERE id = {ship}",
)

FIRST = (
    "UPDATE terminal49.containers SET pickup_lfd_line = coalesce(pickup_lfd_line, "
    "DATE '2026-11-28') - 1 WHERE id IN ({}, {})"
)
PREVIOUS = (
    "SELECT container_id, risk_level, lfd_date, lfd_line, days_to_lfd, customer_name "
    "FROM analytics.demurrage_risk_previous ORDER BY container_id"
)


def _on_postgres(url: str, statements: list[str]) -> None:
    pg = psycopg2.connect(url)
    try:
        with pg, pg.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
    finally:
        pg.close()


def test_a_partial_run_on_postgresql_publishes_what_a_full_run_publishes(
    pg_loaded: Callable[..., str], tmp_path: Path
) -> None:
    path = tmp_path / "w.duckdb"  # loaded from the same sandbox as the database
    pg_database = pg_loaded(120, 49, CLOCK, duckdb=path)
    publish_risk(path, as_of=AS_OF)
    publish_risk(pg_database, as_of=AS_OF)

    # an earlier batch each way, so the previous table really catches up below
    with duckdb.connect(str(path)) as con:
        first = [
            r[0]
            for r in con.execute(
                "SELECT container_id FROM analytics.demurrage_risk WHERE lfd_date IS NOT NULL "
                "ORDER BY container_id DESC LIMIT 2"
            ).fetchall()
        ]
        con.execute(FIRST.format(*[f"'{c}'" for c in first]))
    _on_postgres(pg_database, [FIRST.format(*[f"'{c}'" for c in first])])
    assert publish_risk_of(pg_database, first, as_of=AS_OF).recomputed == 2
    publish_risk(path, as_of=AS_OF)

    with duckdb.connect(str(path)) as con:
        boxes = [
            r[0]
            for r in con.execute(
                "SELECT container_id FROM analytics.demurrage_risk WHERE lfd_date IS NOT NULL "
                "ORDER BY container_id LIMIT 5"
            ).fetchall()
        ]
        held = con.execute("SELECT min(container_id) FROM terminal49.container_holds").fetchone()
        ship = con.execute(
            "SELECT shipment_id FROM terminal49.containers WHERE id = ?", [boxes[3]]
        ).fetchone()
        assert len(boxes) == 5 and held and held[0] and ship
        names = dict(zip("abc", boxes, strict=False))
        names.update(gone=boxes[4], held=held[0], ship=ship[0])
        quoted = {k: f"'{v}'" for k, v in names.items()}
        for sql in CHANGES:
            con.execute(sql.format(**quoted))
    _on_postgres(pg_database, [sql.format(**quoted) for sql in CHANGES])

    changed = [*boxes[:3], boxes[4], held[0]]
    run = publish_risk_of(pg_database, changed, [ship[0]], as_of=AS_OF)
    publish_risk(path, as_of=AS_OF)
    assert run.recomputed is not None and run.recomputed >= len(changed)

    with duckdb.connect(str(path), read_only=True) as con:
        con.execute("SET TimeZone = 'UTC'")
        expected = con.sql("SELECT * FROM analytics.demurrage_risk ORDER BY container_id").pl()
        charges = con.execute("SELECT count(*) FROM analytics.charge_days").fetchone()
        previous = con.execute(PREVIOUS).fetchall()
    got = at_risk(pg_database, list(LEVELS)).sort("container_id")
    assert got.height == 119
    assert got.equals(expected)
    pg = psycopg2.connect(pg_database)
    try:
        with pg.cursor() as cur:
            cur.execute("SELECT count(*) FROM analytics.charge_days")
            assert cur.fetchone() == charges
            cur.execute(PREVIOUS)
            assert cur.fetchall() == previous
            assert len(previous) == 120
    finally:
        pg.close()
