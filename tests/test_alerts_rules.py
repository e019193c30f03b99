"""The alert rules on two risk tables in a real DuckDB file: each rule, once per key."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest

from pipelines.alerts.config import AlertSettings, load_settings
from pipelines.alerts.rules import raise_alerts
from pipelines.warehouse import column_types

pytestmark = pytest.mark.fast

AS_OF = datetime(2030, 1, 8, 12, tzinfo=UTC)
SCHEMA: dict[str, Any] = {
    "container_id": pl.String,
    "container_number": pl.String,
    "risk_level": pl.String,
    "lfd_date": pl.Date,
    "lfd_source": pl.String,
    "lfd_line": pl.Date,
    "lfd_terminal": pl.Date,
    "lfd_rail": pl.Date,
    "days_to_lfd": pl.Int64,
    "blocking_holds": pl.List(pl.String),
    "ready_for_pickup": pl.Boolean,
    "available_for_pickup": pl.Boolean,
    "current_status": pl.String,
    "projected_demurrage": pl.Float64,
    "currency": pl.String,
    "stale": pl.Boolean,
    "terminal_checked_at": pl.Datetime("us", "UTC"),
    "port_of_discharge_locode": pl.String,
    "pod_terminal_name": pl.String,
    "pod_terminal_firms_code": pl.String,
    "shipping_line_scac": pl.String,
    "bill_of_lading_number": pl.String,
    "risk_reason": pl.String,
}
BOX: dict[str, Any] = {
    "container_id": "c1",
    "container_number": "MSCU0000001",
    "risk_level": "watch",
    "lfd_date": date(2030, 1, 14),
    "lfd_source": "terminal",
    "lfd_line": None,
    "lfd_terminal": date(2030, 1, 14),
    "lfd_rail": None,
    "days_to_lfd": 6,
    "blocking_holds": [],
    "ready_for_pickup": False,
    "available_for_pickup": False,
    "current_status": "not_available",
    "projected_demurrage": 0.0,
    "currency": "USD",
    "stale": False,
    "terminal_checked_at": AS_OF,
    "port_of_discharge_locode": "USLAX",
    "pod_terminal_name": "Pier 400",
    "pod_terminal_firms_code": "W185",
    "shipping_line_scac": "MAEU",
    "bill_of_lading_number": "MAEU123",
    "risk_reason": "test",
}


class Warehouse:
    """A DuckDB file with a ``terminal49.containers`` table and risk tables published the way
    ``publish_risk`` does (the old table copied to ``_previous``, then the alert rules)."""

    def __init__(self, path: Path, settings: AlertSettings | None = None) -> None:
        self.con = duckdb.connect(str(path))
        self.settings = settings or AlertSettings()
        self.con.execute("CREATE SCHEMA terminal49; CREATE SCHEMA analytics")
        self.con.execute(
            "CREATE TABLE terminal49.containers AS SELECT 'c1' AS id, 's1' AS shipment_id, "
            "CAST('[\"PO-1\"]' AS JSON) AS ref_numbers"
        )
        self.con.execute(
            "CREATE TABLE terminal49.shipments AS SELECT 's1' AS id, "
            "CAST('[\"SO-9\"]' AS JSON) AS ref_numbers"
        )

    def publish(self, **changes: Any) -> list[tuple[str, str]]:
        """Publish one box with ``changes`` over :data:`BOX`; the (kind, value) raised."""
        df = pl.DataFrame([{**BOX, **changes}], schema=SCHEMA)
        self.con.register("_new", df.to_arrow())
        before = self.max_seq()
        self.con.execute("BEGIN")
        tables = set(column_types(self.con, "analytics", "demurrage_risk")) and {"demurrage_risk"}
        if "demurrage_risk" in tables:
            self.con.execute(
                "CREATE OR REPLACE TABLE analytics.demurrage_risk_previous AS "
                "SELECT * FROM analytics.demurrage_risk"
            )
        self.con.execute("CREATE OR REPLACE TABLE analytics.demurrage_risk AS SELECT * FROM _new")
        raise_alerts(self.con, AS_OF, self.settings)
        self.con.execute("COMMIT")
        return [
            (k, v)
            for k, v in self.con.execute(
                "SELECT kind, value FROM analytics.alert_outbox WHERE seq > ? ORDER BY seq",
                [before],
            ).fetchall()
        ]

    def max_seq(self) -> int:
        try:
            row = self.con.execute("SELECT coalesce(max(seq), 0) FROM analytics.alert_outbox")
        except duckdb.CatalogException:
            return 0
        got = row.fetchone()
        return int(got[0]) if got else 0


@pytest.fixture
def wh(tmp_path: Path) -> Warehouse:
    w = Warehouse(tmp_path / "w.duckdb")
    assert w.publish() == []  # the first publish has nothing to compare with
    return w


def test_entering_each_at_risk_level_once(wh: Warehouse) -> None:
    assert wh.publish(risk_level="imminent", days_to_lfd=3) == [("level", "imminent 2030-01-14")]
    assert wh.publish(risk_level="imminent", days_to_lfd=3) == []  # risk re-run: nothing new
    assert wh.publish(risk_level="imminent", days_to_lfd=1) == []
    assert wh.publish(risk_level="due_today", days_to_lfd=0) == [("level", "due_today 2030-01-14")]
    assert wh.publish(risk_level="overdue", days_to_lfd=-1) == [("level", "overdue 2030-01-14")]
    # back and forth: the same (container, kind, value) is never raised twice
    assert wh.publish(risk_level="watch") == []
    assert wh.publish(risk_level="overdue", days_to_lfd=-1) == []


def test_binding_lfd_earlier_and_source_moves(wh: Warehouse) -> None:
    got = wh.publish(lfd_date=date(2030, 1, 12), lfd_terminal=date(2030, 1, 12))
    assert got == [("lfd_earlier", "terminal 2030-01-12")]  # watch: an earlier LFD is news
    wh.publish(risk_level="imminent", lfd_date=date(2030, 1, 12), lfd_terminal=date(2030, 1, 12))
    # the line's LFD moves (later) while the terminal's binds: news for a box at risk
    got = wh.publish(
        risk_level="imminent",
        lfd_date=date(2030, 1, 12),
        lfd_terminal=date(2030, 1, 12),
        lfd_line=date(2030, 1, 20),
    )
    assert got == []  # a source that appears is not a move
    got = wh.publish(
        risk_level="imminent",
        lfd_date=date(2030, 1, 12),
        lfd_terminal=date(2030, 1, 12),
        lfd_line=date(2030, 1, 21),
    )
    assert got == [("lfd_moved", "line 2030-01-21")]
    # a later binding LFD while at risk: a source move, not an "earlier" alert
    got = wh.publish(
        risk_level="imminent",
        lfd_date=date(2030, 1, 13),
        lfd_terminal=date(2030, 1, 13),
        lfd_line=date(2030, 1, 21),
    )
    assert got == [("lfd_moved", "terminal 2030-01-13")]


def test_holds_availability_and_release(wh: Warehouse) -> None:
    at_risk = {"risk_level": "imminent", "days_to_lfd": 2}
    assert wh.publish(**at_risk) == [("level", "imminent 2030-01-14")]
    assert wh.publish(**at_risk, blocking_holds=["customs"]) == [("hold", "customs")]
    assert wh.publish(**at_risk, blocking_holds=["customs", "freight"]) == [("hold", "freight")]
    got = wh.publish(**at_risk, blocking_holds=["customs", "freight"], available_for_pickup=True)
    assert got == [("available", "available")]
    got = wh.publish(**at_risk, available_for_pickup=True, ready_for_pickup=True)
    assert got == [("hold_released", "customs,freight")]


def test_availability_from_the_status_when_the_terminal_does_not_report_it(
    wh: Warehouse,
) -> None:
    wh.publish(risk_level="due_today", available_for_pickup=None)
    got = wh.publish(risk_level="due_today", available_for_pickup=None, current_status="available")
    assert got == [("available", "available")]


def test_a_hold_on_a_box_entering_risk_is_news_once(wh: Warehouse) -> None:
    assert wh.publish(blocking_holds=["customs"]) == []  # watch: not at risk
    got = wh.publish(risk_level="imminent", blocking_holds=["customs"])
    assert got == [("level", "imminent 2030-01-14"), ("hold", "customs")]


def test_cost_crossing_the_highest_threshold_only(wh: Warehouse) -> None:
    assert wh.publish(projected_demurrage=400.0) == []
    assert wh.publish(projected_demurrage=1200.0) == [("cost", "1000")]
    assert wh.publish(projected_demurrage=1300.0) == []
    assert wh.publish(projected_demurrage=6000.0) == [("cost", "5000")]


def test_stale_data_on_a_box_at_risk(wh: Warehouse) -> None:
    wh.publish(risk_level="overdue")
    got = wh.publish(risk_level="overdue", stale=True)
    assert got == [("stale", AS_OF.strftime("%Y-%m-%dT%H:%MZ"))]
    assert wh.publish(risk_level="overdue", stale=True) == []


def test_done_boxes_raise_nothing(wh: Warehouse) -> None:
    wh.publish(risk_level="overdue", blocking_holds=["customs"])
    assert wh.publish(risk_level="done", blocking_holds=[], projected_demurrage=9000.0) == []


def test_outbox_rows_carry_what_filters_and_messages_need(wh: Warehouse) -> None:
    wh.publish(risk_level="imminent", blocking_holds=["customs"])
    row = wh.con.execute(
        "SELECT container_number, risk_level, previous_level, reference_numbers, "
        "blocking_holds, detail, alert_key, as_of FROM analytics.alert_outbox ORDER BY seq"
    ).fetchone()
    assert row is not None
    number, level, previous, refs, holds, detail, key, as_of = row
    assert (number, level, previous, holds) == ("MSCU0000001", "imminent", "watch", ["customs"])
    assert sorted(refs) == ["PO-1", "SO-9"]
    assert detail == "now imminent (was watch)" and len(key) == 32 and as_of == AS_OF


def test_thresholds_come_from_the_config_table(tmp_path: Path) -> None:
    cfg = tmp_path / "alerts.toml"
    cfg.write_text("[alerts]\ncost_thresholds = [100, 300]\nlfd_levels = ['overdue']\n")
    settings = load_settings(cfg, env={}, destinations=False)
    assert settings.cost_thresholds == (100.0, 300.0) and settings.lfd_levels == ("overdue",)
    w = Warehouse(tmp_path / "w.duckdb", settings)
    w.publish()
    assert w.publish(projected_demurrage=150.0, lfd_date=date(2030, 1, 12)) == [("cost", "100")]


def test_the_shipped_table_is_the_defaults() -> None:
    shipped = load_settings(env={}, destinations=False)
    defaults = AlertSettings()
    assert shipped.cost_thresholds == defaults.cost_thresholds
    assert shipped.lfd_levels == defaults.lfd_levels
    assert shipped.retry_seconds == defaults.retry_seconds
