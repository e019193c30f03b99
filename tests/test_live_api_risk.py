"""The risk table over a load of the sandbox of today's API (real HTTP, DuckDB, dlt).

The sandbox sends LFDs as instants (local midnight in UTC) or as bare dates, and carries
``import_deadlines.pod`` on its newer containers in every combination. After a load and a risk
run, every LFD in ``analytics.demurrage_risk`` is the calendar date the API meant, whatever its
wire form, and a container with the ``pod`` object is bound by the API's own choice.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import duckdb
import pytest

from pipelines.analytics.publish import publish_risk
from pipelines.config import ApiSettings
from pipelines.load import run_load
from sandbox.thread import SandboxThread

pytestmark = pytest.mark.sandbox

CLOCK = "2026-11-20T12:00:00Z"
AS_OF = dt.datetime(2026, 11, 20, 12, tzinfo=dt.UTC)


def _day(value: str | None, zone: str | None) -> dt.date | None:
    """What the API means by an LFD value: a bare date is that day, an instant its local day."""
    if not value:
        return None
    if len(value) == 10:
        return dt.date.fromisoformat(value)
    instant = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return instant.astimezone(ZoneInfo(zone or "UTC")).date()


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A load of the sandbox and a risk run: the warehouse, and the sandbox's containers."""
    db = tmp_path_factory.mktemp("live") / "w.duckdb"
    with SandboxThread(containers=600, seed=31, clock=CLOCK) as sb:
        run_load(
            db, ApiSettings(base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100_000)
        )
        truth = {c["id"]: c for c in sb.ground_truth()["containers"]}
    publish_risk(db, as_of=AS_OF)
    return db, truth


@pytest.fixture(scope="module")
def loaded(published: tuple[Path, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    db, truth = published
    with duckdb.connect(str(db), read_only=True) as con:
        cur = con.execute(
            "SELECT container_id, lfd_terminal, lfd_line, lfd_pod, lfd_date, lfd_source, "
            "risk_level FROM analytics.demurrage_risk"
        )
        names = [d[0] for d in cur.description]
        risk = {row[0]: dict(zip(names, row, strict=True)) for row in cur.fetchall()}
    return truth, risk


def test_bare_dates_and_instants_give_the_dates_the_api_meant(
    loaded: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    truth, risk = loaded
    forms: set[str] = set()
    for cid, c in truth.items():
        a = c["attributes"]
        deadlines = a.get("import_deadlines") or {}
        for column, value in (
            ("lfd_terminal", deadlines.get("pickup_lfd_terminal")),
            ("lfd_line", deadlines.get("pickup_lfd_line")),
        ):
            if value:
                forms.add("date" if len(value) == 10 else "instant")
            if value and column == "lfd_terminal":
                assert risk[cid][column] == _day(value, a.get("pod_timezone")), (cid, value)
    assert forms == {"date", "instant"}, "the sandbox sent one wire form only: proves nothing"


def test_the_pod_object_binds_the_apis_choice(
    loaded: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    truth, risk = loaded
    seen: set[str] = set()
    for cid, c in truth.items():
        a = c["attributes"]
        pod = (a.get("import_deadlines") or {}).get("pod")
        if not isinstance(pod, dict):
            continue
        row = risk[cid]
        unified = pod.get("unified") or {}
        want = _day(unified.get("current_value"), a.get("pod_timezone"))
        assert row["lfd_pod"] == want, cid
        left_port = any(
            a.get(k) for k in ("pod_full_out_at", "pod_rail_loaded_at", "pod_rail_departed_at")
        )
        if row["risk_level"] == "done" or left_port:  # a POD deadline binds at the port only
            assert not (row["lfd_source"] or "").startswith(("line", "terminal")), row
            continue
        if want is None:  # withheld: the POD deadline is unknown, no fallback to older fields
            seen.add("withheld")
            assert not (row["lfd_source"] or "").startswith(("line", "terminal")), row
            assert row["lfd_source"] in (None, "rail"), row
        elif row["lfd_source"] != "rail":
            seen.add(str(unified.get("current_selection")))
            assert row["lfd_source"] == f"pod_{unified.get('current_selection')}", row
            assert row["lfd_date"] == want, row
    assert {"withheld", "facility", "line"} <= seen, seen


def test_the_charge_engine_agrees_with_the_risk_table_on_every_box(
    published: tuple[Path, dict[str, Any]],
) -> None:
    """Over every combination the sandbox serves: each box with a binding LFD has exactly one
    binding party with that LFD, and its accrued demurrage is that party's days summed."""
    db, _ = published
    with duckdb.connect(str(db), read_only=True) as con:
        (row,) = con.execute("""
            WITH b AS (SELECT * FROM analytics.charges WHERE binds),
            d AS (SELECT container_id, party, charge, sum(rate) AS amount
                  FROM analytics.charge_days GROUP BY ALL)
            SELECT count(*) FILTER (WHERE r.lfd_date IS NOT NULL),
                   count(*) FILTER (WHERE r.lfd_date IS DISTINCT FROM b.lfd_date
                                       OR r.lfd_source IS DISTINCT FROM b.lfd_source),
                   count(*) FILTER (WHERE r.costed AND r.lfd_date IS NOT NULL
                                      AND r.accrued_demurrage <> coalesce(d.amount, 0))
            FROM analytics.demurrage_risk r LEFT JOIN b USING (container_id)
            LEFT JOIN d ON (d.container_id, d.party, d.charge) = (b.container_id, b.party, b.charge)
        """).fetchall()
        (twice,) = con.execute(
            "SELECT count(*) FROM (SELECT container_id FROM analytics.charges WHERE binds "
            "GROUP BY ALL HAVING count(*) > 1)"
        ).fetchone() or (None,)
    bound, disagree, priced_apart = row
    assert bound > 50 and (disagree, priced_apart, twice) == (0, 0, 0)
