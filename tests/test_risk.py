"""Hand-computed demurrage risk cases. as_of = Fri 2025-11-14 16:00Z (08:00 PST, 10:00 CST,
11:00 EST). US DST ended Sun 2025-11-02; Veterans Day (federal holiday) is Tue 2025-11-11."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import duckdb
import polars as pl
import pytest
from risk_fixtures import container as _c
from risk_fixtures import make_warehouse

from pipelines.analytics import compute_risk, load_tariffs, publish_risk, read_warehouse
from pipelines.analytics.calendars import WorkingCalendar, us_federal_holidays
from pipelines.analytics.risk import UnconvertedLfds
from pipelines.warehouse import reading

pytestmark = pytest.mark.fast

AS_OF = datetime(2025, 11, 14, 16, 0, tzinfo=UTC)
LA, NY, CHI = "America/Los_Angeles", "America/New_York", "America/Chicago"
FRESH = "2025-11-14T15:00:00Z"


def _s(cid: str, scac: str = "HLCU", pod: str = "USLAX", **kw: object) -> dict[str, object]:
    row: dict[str, object] = {
        "id": "s-" + cid,
        "bill_of_lading_number": "BL" + cid,
        "shipping_line_scac": scac,
        "port_of_discharge_locode": pod,
        "customer_name": "ACME",
        "port_of_discharge_id": "p-" + pod,
    }
    row.update(kw)
    return row


CONTAINERS = [
    # A: LA after the DST change; terminal LFD 2025-11-17T08:00Z = Mon 17 Nov 00:00 PST; line LFD
    # 18 Nov -> binding terminal, disagreement 1 day. days 17-14 = 3 (imminent); working days in
    # (14, 17] = Mon 17 = 1. Appointment 2025-11-15T07:30Z = Fri 14 Nov 23:30 PST (under PDT it
    # would be 15 Nov) = today -> projected pickup 14 Nov, projected 0. USDA pending: still ready.
    _c(
        "a",
        pickup_lfd_terminal="2025-11-17T08:00:00Z",
        pickup_lfd_line="2025-11-18T08:00:00Z",
        pickup_appointment_at="2025-11-15T07:30:00Z",
    ),
    # B: NY, terminal LFD 2025-11-10T05:00Z = Mon 10 Nov (EST). days -4 (overdue); working days
    # (10, 14] minus Veterans Day = 12, 13, 14 -> -3. USNYC tariff 1-5:250; 6+:280.
    # accrued: 4 chargeable days (11..14) x 250 = 1000. Customs hold -> not ready -> pickup on the
    # 3rd working day after Fri 14: Mon 17, Tue 18, Wed 19 -> 19 Nov; 9 days = 5x250 + 4x280 = 2370.
    # Fees demurrage 1000 + exam 350 (+ total 1350 dropped) = 1350.
    _c(
        "b",
        pod_timezone=NY,
        pickup_lfd_terminal="2025-11-10T05:00:00Z",
        pod_terminal_id="t-maher",
        fees_at_pod_terminal_known=True,
    ),
    # B2: NY line LFD 2025-11-01T04:00Z = Sat 1 Nov 00:00 EDT (EST would read 31 Oct).
    # 13 days overdue: 5x250 + 8x280 = 3490 accrued; ready -> pickup today -> projected 3490.
    _c("b2", pod_timezone=NY, pickup_lfd_line="2025-11-01T04:00:00Z", pod_terminal_id="t-maher"),
    # C: Houston, picked up. Terminal LFD 2025-11-02T05:00Z = 2 Nov 00:00 CDT (CST would read
    # 1 Nov). Full-out 2025-11-03T16:00Z = 3 Nov. Done. Detention default: 4 calendar free days ->
    # detention LFD 7 Nov; still out: 14-7 = 7 chargeable days = 4x150 + 3x200 = 1200; days_out 11.
    _c(
        "c",
        pod_timezone=CHI,
        pickup_lfd_terminal="2025-11-02T05:00:00Z",
        pod_full_out_at="2025-11-03T16:00:00Z",
        current_status="picked_up",
    ),
    # D: LA, discharged Fri 7 Nov 10:00 PST, no LFD posted -> unknown. Tariff estimate, 4 working
    # days from the day after discharge: Sat 8, Sun 9 skip, Mon 10 (1), Tue 11 holiday skip,
    # Wed 12 (2), Thu 13 (3), Fri 14 (4) -> 14 Nov. Not available, no hold -> pickup next working
    # day Mon 17 -> 3 days x 220 = 660. Accrued 0 (today is the estimated LFD).
    _c("d", available_for_pickup=False),
    # E: inland rail LA -> Chicago. Left the port by rail, terminal LFD (5 Nov) no longer binds;
    # rail LFD 2025-11-15T06:00Z = Sat 15 Nov 00:00 CST -> days 1 (imminent), working days (14, 15]
    # = 0. Tariff port = destination USCHI (no row) -> default dry 1-5:220. Availability unknown ->
    # next working day Mon 17 -> 2 days x 220 = 440.
    _c(
        "e",
        pickup_lfd_terminal="2025-11-05T08:00:00Z",
        pickup_lfd_rail="2025-11-15T06:00:00Z",
        final_destination_timezone=CHI,
        pod_rail_departed_at="2025-11-09T12:00:00Z",
        pod_rail_carrier_scac="UPRR",
        available_for_pickup=None,
        current_status="on_rail",
    ),
    # F: reefer with CMA CGM at LA: no reefer tariff matches -> uncosted. Terminal LFD 20 Nov ->
    # 6 days (watch). Stale: terminal last checked 1 Nov (13 days > 7).
    _c(
        "f",
        equipment_type="reefer",
        pickup_lfd_terminal="2025-11-20T08:00:00Z",
        terminal_checked_at="2025-11-01T00:00:00Z",
    ),
    # G: Maersk at LA: carrier row beats the USLAX port row. LFD 12 Nov -> 2 days overdue ->
    # accrued 2 x 235 = 470; ready -> projected 470.
    _c("g", pickup_lfd_terminal="2025-11-12T08:00:00Z"),
    # H: not discharged yet, no LFD -> ok; stale because line tracking stopped.
    _c("h", pod_discharged_at=None, available_for_pickup=False),
    # I: LA, picked up Mon 10 Nov 12:00 PST (2025-11-10T20:00Z), empty returned
    # 2025-11-14T03:00Z with no empty_terminated_timezone: the port's zone applies, so the return
    # is Thu 13 Nov 19:00 PST -> 13 Nov (UTC would say 14 Nov). days_out = 13 - 10 = 3.
    _c(
        "i",
        pod_full_out_at="2025-11-10T20:00:00Z",
        empty_terminated_at="2025-11-14T03:00:00Z",
        current_status="empty_returned",
    ),
]
SHIPMENTS = [
    _s("a"),
    _s("b", pod="USNYC"),
    _s("b2", pod="USNYC"),
    _s("c", pod="USHOU"),
    _s("d"),
    _s("e", destination_locode="USCHI", destination_timezone=CHI),
    _s("f", scac="CMDU"),
    _s("g", scac="MAEU"),
    _s("h", line_tracking_stopped_at="2025-11-10T00:00:00Z"),
    _s("i"),
]
HOLDS = [
    {"container_id": "a", "name": "USDA", "status": "pending"},
    {"container_id": "b", "name": "customs", "status": "hold"},
    {"container_id": "b", "name": "TMF", "status": "pending"},
]
FEES = [
    {"container_id": "b", "type": "demurrage", "amount": 1000.0, "currency_code": "USD"},
    {"container_id": "b", "type": "exam", "amount": 350.0, "currency_code": "USD"},
    {"container_id": "b", "type": "total", "amount": 1350.0, "currency_code": "USD"},
]
TERMINALS = [
    {
        "id": "t-fenix",
        "type": "terminal",
        "name": "Fenix Marine",
        "nickname": "Fenix",
        "firms_code": "Y257",
    },
    {
        "id": "t-maher",
        "type": "terminal",
        "name": "Maher Terminals",
        "nickname": "Maher",
        "firms_code": "E416",
    },
]
PORTS = [
    {
        "id": "p-USLAX",
        "code": "USLAX",
        "city": "Los Angeles",
        "country_code": "US",
        "time_zone": LA,
    },
]
DATA = {
    "containers": CONTAINERS,
    "shipments": SHIPMENTS,
    "container_holds": HOLDS,
    "container_fees": FEES,
    "terminals": TERMINALS,
    "ports": PORTS,
}


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_warehouse(tmp_path_factory.mktemp("wh") / "t.duckdb", DATA)


@pytest.fixture(scope="module")
def risk(warehouse: Path) -> dict[str, dict[str, object]]:
    with reading(warehouse) as con:
        frames = read_warehouse(con)
        df = compute_risk(frames, AS_OF, load_tariffs()).collect()
    assert df.height == len(CONTAINERS)
    return {r["container_id"]: r for r in df.iter_rows(named=True)}


def test_la_dst_terminal_lfd_disagreeing_line_and_pending(risk: dict) -> None:
    a = risk["a"]
    assert (a["lfd_terminal"], a["lfd_line"]) == (date(2025, 11, 17), date(2025, 11, 18))
    assert (a["lfd_date"], a["lfd_source"], a["lfd_disagreement_days"]) == (
        date(2025, 11, 17),
        "terminal",
        1,
    )
    assert (a["days_to_lfd"], a["working_days_to_lfd"], a["risk_level"]) == (3, 1, "imminent")
    assert a["ready_for_pickup"] is True
    assert (a["blocking_holds"], a["pending_holds"]) == ([], ["USDA"])
    assert a["projected_pickup_date"] == date(2025, 11, 14)
    assert (a["accrued_demurrage"], a["projected_demurrage"], a["costed"]) == (0.0, 0.0, True)
    assert a["risk_reason"] == (
        "LFD in 3 days at Fenix (terminal); USDA pending; appointment 2025-11-14"
    )
    assert a["stale"] is False and a["fees_reported"] is None


def test_ny_overdue_holiday_hold_and_total_fee(risk: dict) -> None:
    b = risk["b"]
    assert (b["lfd_date"], b["days_to_lfd"], b["working_days_to_lfd"]) == (
        date(2025, 11, 10),
        -4,
        -3,
    )
    assert b["risk_level"] == "overdue"
    assert (b["ready_for_pickup"], b["blocking_holds"], b["pending_holds"]) == (
        False,
        ["customs"],
        ["TMF"],
    )
    assert b["accrued_demurrage"] == 1000.0
    assert b["projected_pickup_date"] == date(2025, 11, 19)
    assert b["projected_demurrage"] == 2370.0
    assert (b["fees_reported"], b["demurrage_fee_reported"]) == (1350.0, 1000.0)
    assert b["risk_reason"] == (
        "LFD passed 4 days ago at Maher (terminal); customs hold; TMF pending; no appointment"
    )


def test_ny_line_lfd_encoded_in_edt(risk: dict) -> None:
    b2 = risk["b2"]
    assert (b2["lfd_line"], b2["lfd_source"], b2["days_to_lfd"]) == (date(2025, 11, 1), "line", -13)
    assert b2["accrued_demurrage"] == 3490.0 and b2["projected_demurrage"] == 3490.0


def test_chicago_picked_up_with_detention(risk: dict) -> None:
    c = risk["c"]
    assert c["lfd_terminal"] == date(2025, 11, 2)
    assert (c["risk_level"], c["lfd_date"], c["lfd_source"]) == ("done", None, None)
    assert (c["accrued_demurrage"], c["projected_demurrage"]) == (0.0, 0.0)
    assert (c["detention_lfd"], c["days_out"], c["projected_detention"]) == (
        date(2025, 11, 7),
        11,
        1200.0,
    )
    assert c["risk_reason"] == "picked up 2025-11-03"


def test_weekend_and_holiday_inside_free_time(risk: dict) -> None:
    d = risk["d"]
    assert (d["risk_level"], d["lfd_date"], d["lfd_estimated"]) == (
        "unknown",
        None,
        date(2025, 11, 14),
    )
    assert (d["accrued_demurrage"], d["projected_demurrage"]) == (0.0, 660.0)
    assert d["projected_pickup_date"] == date(2025, 11, 17)
    assert d["risk_reason"].startswith("discharged, no LFD posted (tariff estimate 2025-11-14)")


def test_inland_rail_move(risk: dict) -> None:
    e = risk["e"]
    assert e["is_inland"] is True
    assert (e["lfd_date"], e["lfd_source"], e["days_to_lfd"], e["working_days_to_lfd"]) == (
        date(2025, 11, 15),
        "rail",
        1,
        0,
    )
    assert e["lfd_disagreement_days"] == 10
    assert (e["risk_level"], e["projected_demurrage"]) == ("imminent", 440.0)
    assert e["risk_reason"] == "LFD tomorrow (rail); not available; no appointment"


def test_no_tariff_is_uncosted_and_stale(risk: dict) -> None:
    f = risk["f"]
    assert (f["risk_level"], f["days_to_lfd"]) == ("watch", 6)
    assert (f["costed"], f["uncosted_reason"]) == (False, "no tariff")
    assert f["accrued_demurrage"] is None and f["projected_demurrage"] is None
    assert f["stale"] is True and f["risk_reason"].endswith("stale data")


def test_carrier_tariff_beats_port(risk: dict) -> None:
    g = risk["g"]
    assert (g["risk_level"], g["accrued_demurrage"], g["projected_demurrage"]) == (
        "overdue",
        470.0,
        470.0,
    )


def test_not_discharged_is_ok_and_stale_when_tracking_stopped(risk: dict) -> None:
    h = risk["h"]
    assert (h["risk_level"], h["stale"], h["costed"]) == ("ok", True, False)


def test_empty_return_date_falls_back_to_the_port_zone(risk: dict) -> None:
    i = risk["i"]
    assert (i["risk_level"], i["days_out"]) == ("done", 3)
    assert i["risk_reason"] == "empty returned 2025-11-13"


def _chicago(lfd: object) -> dict[str, pl.LazyFrame]:
    return {
        "containers": pl.LazyFrame(
            {
                "id": ["x"],
                "number": ["X"],
                "shipment_id": ["s"],
                "pod_timezone": [CHI],
                "pickup_lfd_terminal": [lfd],
                "pod_discharged_at": [datetime(2026, 3, 2, 12, tzinfo=UTC)],
            }
        ),
        "shipments": pl.LazyFrame({"id": ["s"], "port_of_discharge_locode": ["USHOU"]}),
    }


@pytest.mark.fast
def test_chicago_march_dst() -> None:
    # Houston/Chicago zone after DST starts Sun 2026-03-08: LFD Mon 9 Mar. as_of Fri 6 Mar
    # 18:00Z (12:00 CST): 3 days, 1 working day.
    frames = _chicago(date(2026, 3, 9))
    r = compute_risk(frames, datetime(2026, 3, 6, 18, tzinfo=UTC), load_tariffs()).collect()
    assert r.row(0, named=True)["lfd_date"] == date(2026, 3, 9)
    assert (r["days_to_lfd"][0], r["working_days_to_lfd"][0]) == (3, 1)


@pytest.mark.fast
def test_an_lfd_still_held_as_an_instant_is_refused_with_one_line() -> None:
    """LFDs are DATEs (a load converts an older warehouse): an instant is not guessed at."""
    with pytest.raises(UnconvertedLfds) as err:
        compute_risk(_chicago(datetime(2026, 3, 9, 5, tzinfo=UTC)), AS_OF, load_tariffs())
    assert "run `freetime load` once" in str(err.value) and "\n" not in str(err.value)


def test_federal_holidays_observed_rules() -> None:
    h2021 = us_federal_holidays(2021)
    assert date(2021, 12, 31) in h2021  # New Year 2022 is a Saturday -> Fri 31 Dec 2021
    assert date(2021, 6, 18) in h2021  # Juneteenth on Saturday -> Friday
    assert date(2021, 12, 24) in h2021  # Christmas on Saturday -> Friday
    assert date(2022, 1, 1) not in us_federal_holidays(2022)
    h2026 = us_federal_holidays(2026)
    assert date(2026, 7, 3) in h2026 and date(2026, 11, 26) in h2026  # Jul 4 Sat; Thanksgiving
    assert len(us_federal_holidays(2025)) == 11
    assert date(2020, 6, 19) not in us_federal_holidays(2020)
    cal = WorkingCalendar()
    assert not cal.is_working(date(2025, 11, 11)) and cal.is_working(date(2025, 11, 12))


def test_publish_views_and_example_sql(warehouse: Path, tmp_path: Path) -> None:
    import shutil

    db = tmp_path / "w.duckdb"
    shutil.copy(warehouse, db)
    s1 = publish_risk(db, as_of=AS_OF)
    assert s1.rows == 10 and s1.levels["overdue"] == 3 and s1.levels["done"] == 2
    assert s1.uncosted == 2  # f (no tariff) and h (no LFD)
    assert s1.accrued_demurrage == 1000 + 3490 + 470
    publish_risk(db, as_of=datetime(2025, 11, 17, 16, tzinfo=UTC))
    text = (Path(__file__).parents[1] / "README.md").read_text()
    rules = text.split("## Demurrage risk: the rules")[1]
    sql = rules.split("```sql")[1].split("```")[0]
    queries = [q.strip() for q in sql.split(";") if q.strip()]
    assert len(queries) == 8
    with duckdb.connect(str(db), read_only=True) as con:
        for q in queries:
            con.sql(q).fetchall()
        top = con.sql("SELECT container_number FROM analytics.at_risk_containers").fetchall()
        assert top[0][0] == "B2"  # most overdue first
        cal = con.sql("SELECT count(*), min(lfd_date) FROM analytics.lfd_calendar").fetchall()[0]
        assert cal == (14, date(2025, 11, 17))
        wide = con.sql(
            "SELECT pod_last_free_day_on_local, customs_hold_at_pod_terminal, "
            "pod_discharged_at_local FROM analytics.containers_wide "
            "WHERE container_id = 'b'"
        ).fetchall()[0]
        assert wide == ("2025-11-10", "hold", "2025-11-07 13:00:00")
        prev = con.sql("SELECT count(*) FROM analytics.demurrage_risk_previous").fetchall()[0]
        assert prev == (10,)


def test_the_tool_servers_rules_resource_is_the_list_of_rules() -> None:
    from pipelines.analytics import risk
    from pipelines.toolserver.server import risk_rules_text

    text = risk_rules_text()
    assert text.startswith("Demurrage risk per container, as of an instant")
    for rule in ("* LFDs are local calendar dates", "* Holds do not stop the clock", "* ``stale``"):
        assert rule in text
    assert text.strip().endswith("not change the level.")
    assert text.strip() in (risk.__doc__ or "") and "How:" not in text
