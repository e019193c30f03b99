"""A partial risk run (:func:`publish_risk_of`, what the receiver runs after a batch) leaves
exactly the tables, views, history and alerts a full run at the same instant leaves."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from pipelines.analytics import publish_risk, publish_risk_of
from tests.conftest import PUBLISHED_AS_OF

AS_OF = datetime.fromisoformat(PUBLISHED_AS_OF.replace("Z", "+00:00"))

#: What is compared, without the columns that say when it was written.
COMPARED = {
    "analytics.demurrage_risk": "*",
    "analytics.demurrage_risk_previous": "*",
    "analytics.charges": "*",
    "analytics.charge_days": "*",
    "analytics.at_risk_containers": "*",
    "analytics.exposure_by_terminal": "*",
    "analytics.exposure_by_carrier": "*",
    "analytics.lfd_calendar": "*",
    "analytics.containers_wide": "*",
    "analytics.alert_outbox": "* EXCLUDE (raised_at)",
    "terminal49.history": "* EXCLUDE (fetched_at, load_id)",
}


def _change(db: Path) -> tuple[list[str], list[str]]:
    """What a batch of notifications does to some containers: an LFD moved earlier, a hold
    released, availability, an appointment, a container gone, a shipment's customer renamed.
    Returns (containers, shipments) it touched."""
    with duckdb.connect(str(db)) as con:
        at_risk = [
            r[0]
            for r in con.execute(
                "SELECT container_id FROM analytics.demurrage_risk WHERE lfd_date IS NOT NULL "
                "AND risk_level <> 'done' ORDER BY container_id LIMIT 6"
            ).fetchall()
        ]
        held = con.execute(
            "SELECT min(container_id) FROM terminal49.container_holds WHERE status = 'hold'"
        ).fetchone()
        assert len(at_risk) == 6 and held and held[0], "the fixture has no box to change"
        a, b, c, d, e, gone = at_risk
        con.execute(
            "UPDATE terminal49.containers SET pickup_lfd_terminal = coalesce("
            "pickup_lfd_terminal, DATE '2026-11-25') - 3 WHERE id IN (?, ?)",
            [a, b],
        )
        con.execute(
            "UPDATE terminal49.containers SET available_for_pickup = NOT "
            "coalesce(available_for_pickup, false), pickup_appointment_at = "
            "TIMESTAMPTZ '2026-11-21 15:00:00+00' WHERE id = ?",
            [c],
        )
        con.execute("DELETE FROM terminal49.container_holds WHERE container_id = ?", [held[0]])
        con.execute("DELETE FROM terminal49.containers WHERE id = ?", [gone])
        ship = con.execute("SELECT shipment_id FROM terminal49.containers WHERE id = ?", [d])
        shipment = ship.fetchone()
        assert shipment is not None
        con.execute(
            "UPDATE terminal49.shipments SET customer_name = 'Renamed Ltd' WHERE id = ?",
            [shipment[0]],
        )
    return [a, b, c, e, gone, held[0]], [str(shipment[0])]


def _tables(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    with duckdb.connect(str(db), read_only=True) as con:
        con.execute("SET TimeZone = 'UTC'")
        return {
            name: con.execute(f"SELECT {cols} FROM {name} ORDER BY ALL").fetchall()
            for name, cols in COMPARED.items()
        }


def _first_batch(db: Path) -> list[str]:
    """An earlier batch: the line LFD of two other boxes moved; returns them."""
    with duckdb.connect(str(db)) as con:
        ids = [
            r[0]
            for r in con.execute(
                "SELECT container_id FROM analytics.demurrage_risk WHERE lfd_date IS NOT NULL "
                "ORDER BY container_id DESC LIMIT 2"
            ).fetchall()
        ]
        con.execute(
            "UPDATE terminal49.containers SET pickup_lfd_line = coalesce(pickup_lfd_line, "
            "DATE '2026-11-28') - 1 WHERE id IN (SELECT unnest(?))",
            [ids],
        )
    return ids


def test_a_partial_run_leaves_what_a_full_run_leaves(
    published_warehouse: Path, tmp_path: Path
) -> None:
    partial, full = tmp_path / "partial.duckdb", tmp_path / "full.duckdb"
    shutil.copy(published_warehouse, partial)
    shutil.copy(published_warehouse, full)
    # an earlier batch each way: the previous table then differs from the risk table
    assert publish_risk_of(partial, _first_batch(partial), as_of=AS_OF).recomputed == 2
    _first_batch(full)
    publish_risk(full, as_of=AS_OF)
    assert _tables(partial) == _tables(full)
    with duckdb.connect(str(full), read_only=True) as con:
        before = con.execute("SELECT * FROM analytics.demurrage_risk ORDER BY ALL").fetchall()

    containers, shipments = _change(partial)
    assert _change(full) == (containers, shipments)
    run = publish_risk_of(partial, containers, shipments, as_of=AS_OF)
    publish_risk(full, as_of=AS_OF)

    assert run.recomputed is not None and run.recomputed >= len(containers)
    got, want = _tables(partial), _tables(full)
    assert got["analytics.demurrage_risk"] != before
    assert len(got["analytics.demurrage_risk"]) == len(before) - 1
    for name in COMPARED:
        assert got[name] == want[name], name

    # a large share of the account, or a table older than the allowed age: a full run
    db = full
    with duckdb.connect(str(db), read_only=True) as con:
        ids = [r[0] for r in con.execute("SELECT id FROM terminal49.containers").fetchall()]
    # a quarter of the account: a full run
    assert publish_risk_of(db, ids[: len(ids) // 4], as_of=AS_OF).recomputed is None
    # a few boxes, but the table is older than the allowed age: a full run
    later = AS_OF + timedelta(minutes=20)
    assert publish_risk_of(db, ids[:3], as_of=later).recomputed is None
    # and now a partial one: the three rows move to the new instant, the rest stay
    last = AS_OF + timedelta(minutes=25)
    assert publish_risk_of(db, ids[:3], as_of=last).recomputed == 3
    with duckdb.connect(str(db), read_only=True) as con:
        con.execute("SET TimeZone = 'UTC'")
        stamps = dict(
            con.execute(
                "SELECT as_of, count(*) FROM analytics.demurrage_risk GROUP BY as_of"
            ).fetchall()
        )
    assert stamps == {later: len(ids) - 3, last: 3}
