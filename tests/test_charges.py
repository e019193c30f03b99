"""One charge engine: the risk table, the charge views and the evidence agree day by day.

as_of = Fri 2025-11-14 16:00Z (08:00 in Los Angeles, 10:00 in Chicago). Boxes whose sources
disagree, each computed by hand below, with a tariff sheet of round numbers (``TARIFFS``):
dry 1-2: 100, 3+: 200; reefer 1-2: 300, 3+: 400; inland to Chicago (USCHI) 1+: 50; detention
4 calendar days free, then 1-2: 75, 3+: 125.
"""

from __future__ import annotations

import datetime as dt
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from risk_fixtures import container as _c
from risk_fixtures import make_warehouse

from pipelines.analytics import load_tariffs, publish_risk
from pipelines.analytics.charges import compute_charges
from pipelines.history import ensure_table
from pipelines.history.evidence import PARTY_LABELS, gather

AS_OF = datetime(2025, 11, 14, 16, tzinfo=UTC)
LA, CHI = "America/Los_Angeles", "America/Chicago"
TARIFFS = (
    "charge,carrier_scac,port_locode,equipment,free_days,free_basis,tiers,currency,source,as_of\n"
    "demurrage,,,,4,calendar,1-2:100;3+:200,USD,test,2025-11-01\n"
    "demurrage,,,reefer,4,calendar,1-2:300;3+:400,USD,test,2025-11-01\n"
    "demurrage,,USCHI,,4,calendar,1+:50,USD,test,2025-11-01\n"
    "detention,,,,4,calendar,1-2:75;3+:125,USD,test,2025-11-01\n"
)

CONTAINERS = [
    # line LFD Mon 10 Nov before the terminal's Wed 12: the line binds (pick up before 10 Nov).
    # line days 11..14 = 100+100+200+200 = 600 (= accrued); terminal days 13, 14 = 200.
    _c("line_first", pickup_lfd_line=date(2025, 11, 10), pickup_lfd_terminal=date(2025, 11, 12)),
    # gone by rail on Sun 9 Nov (LA) to Chicago: the terminal charges 6..9 only (its LFD 5 Nov),
    # not the days after departure; the rail LFD Sat 15 Nov binds; Chicago tariff 50/day.
    _c(
        "rail_gone",
        pickup_lfd_terminal=date(2025, 11, 5),
        pickup_lfd_rail=date(2025, 11, 15),
        final_destination_timezone=CHI,
        pod_rail_departed_at="2025-11-09T20:00:00Z",
        pod_rail_carrier_scac="UPRR",
        current_status="on_rail",
    ),
    # POD deadlines: unified 11 Nov from the facility replaces the legacy terminal 17 Nov; the
    # line's own date 13 Nov. Terminal days 12..14 = 100+100+200; line day 14 = 100.
    _c(
        "pod",
        pickup_lfd_terminal=date(2025, 11, 17),
        has_pod_deadlines=True,
        pod_lfd_unified=date(2025, 11, 11),
        pod_lfd_unified_selection="facility",
        pod_lfd_facility_current=date(2025, 11, 11),
        pod_lfd_line_current=date(2025, 11, 13),
    ),
    # LFD moved later, 10 -> 13 Nov (history below): only day 14 is chargeable now.
    _c("moved", pickup_lfd_terminal=date(2025, 11, 13)),
    # reefer: terminal LFD 11 Nov, days 12..14 = 300+300+400.
    _c("reefer", equipment_type="reefer", pickup_lfd_terminal=date(2025, 11, 11)),
    # picked up Wed 5 Nov (LA), not returned: detention free 6..9, days 10..14 =
    # 75+75+125+125+125 = 525; terminal LFD 3 Nov: days 4, 5 = 200.
    _c(
        "out",
        pickup_lfd_terminal=date(2025, 11, 3),
        pod_full_out_at="2025-11-05T20:00:00Z",
        current_status="picked_up",
        pod_discharged_at="2025-10-30T18:00:00Z",
    ),
]
SHIPMENTS = [
    {
        "id": "s-" + c["id"],  # type: ignore[operator]
        "bill_of_lading_number": "BL" + str(c["id"]),
        "shipping_line_scac": "HLCU",
        "port_of_discharge_locode": "USLAX",
        **(
            {"destination_locode": "USCHI", "destination_timezone": CHI}
            if c["id"] == "rail_gone"
            else {}
        ),
    }
    for c in CONTAINERS
]
TERMINALS = [{"id": "t-fenix", "type": "terminal", "name": "Fenix Marine", "nickname": "Fenix"}]
POD_DDL = {
    "has_pod_deadlines": "BOOLEAN",
    "pod_lfd_unified": "DATE",
    "pod_lfd_unified_selection": "VARCHAR",
    "pod_lfd_facility_current": "DATE",
    "pod_lfd_line_current": "DATE",
}
#: history: first seen 1 Nov; line_first under a customs hold until 12 Nov 18:00Z (10:00 LA);
#: moved's LFD posted 10 Nov then moved to 13 Nov
HISTORY = [
    *[(c["id"], "current_status", None, "available", "2025-11-01 00:00:00+00") for c in CONTAINERS],
    ("line_first", "hold:customs", None, "hold", "2025-11-01 00:00:00+00"),
    ("line_first", "hold:customs", "hold", None, "2025-11-12 18:00:00+00"),
    ("moved", "pickup_lfd_terminal", None, "2025-11-10", "2025-11-03 00:00:00+00"),
    ("moved", "pickup_lfd_terminal", "2025-11-10", "2025-11-13", "2025-11-09 00:00:00+00"),
]


def _rows(con: duckdb.DuckDBPyConnection, sql: str, *params: Any) -> list[dict[str, Any]]:
    cur = con.execute(sql, list(params))
    names = [d[0] for d in cur.description or []]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


@pytest.fixture(scope="module")
def tariffs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tariffs") / "tariffs.csv"
    path.write_text(TARIFFS)
    return path


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory, tariffs: Path) -> Path:
    pod = {k: v for k, v in CONTAINERS[2].items() if k in POD_DDL}
    rows = [{k: v for k, v in c.items() if k not in POD_DDL} for c in CONTAINERS]
    path = make_warehouse(
        tmp_path_factory.mktemp("charges") / "w.duckdb",
        {"containers": rows, "shipments": SHIPMENTS, "terminals": TERMINALS},
    )
    with duckdb.connect(str(path)) as con:
        for name, typ in POD_DDL.items():
            con.execute(f"ALTER TABLE terminal49.containers ADD COLUMN {name} {typ}")
        sets = ", ".join(f"{k} = ?" for k in pod)
        con.execute(f"UPDATE terminal49.containers SET {sets} WHERE id = 'pod'", list(pod.values()))
        ensure_table(con)
        for cid, field, old, new, at in HISTORY:
            con.execute(
                "INSERT INTO terminal49.history VALUES ('container', ?, ?, ?, ?, ?, NULL, "
                "'full', NULL, 'l1')",
                [cid, field, old, new, at],
            )
    publish_risk(path, as_of=AS_OF, tariffs_path=tariffs)
    return path


def _days(rows: list[dict[str, Any]], cid: str, party: str, charge: str = "demurrage") -> list:
    return [
        (r["day"].day, r["rate"])
        for r in rows
        if (r["container_id"], r["party"], r["charge"]) == (cid, party, charge)
    ]


def test_each_party_charges_its_own_days(warehouse: Path) -> None:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        days = _rows(con, "SELECT * FROM terminal49.charged_days ORDER BY container_id, day")
    assert _days(days, "line_first", "line") == [(11, 100), (12, 100), (13, 200), (14, 200)]
    assert _days(days, "line_first", "terminal") == [(13, 100), (14, 100)]
    # gone by rail: no port day after the departure
    assert _days(days, "rail_gone", "terminal") == [(6, 50), (7, 50), (8, 50), (9, 50)]
    assert _days(days, "rail_gone", "rail", "storage") == []
    assert _days(days, "pod", "terminal") == [(12, 100), (13, 100), (14, 200)]
    assert _days(days, "pod", "line") == [(14, 100)]
    assert _days(days, "moved", "terminal") == [(14, 100)]
    assert _days(days, "reefer", "terminal") == [(12, 300), (13, 300), (14, 400)]
    assert _days(days, "out", "terminal") == [(4, 100), (5, 100)]
    assert _days(days, "out", "line", "detention") == [
        (10, 75),
        (11, 75),
        (12, 125),
        (13, 125),
        (14, 125),
    ]
    # history flags: the customs hold until 12 Nov 10:00 in Los Angeles
    held = {
        (r["party"], r["day"].day)
        for r in days
        if r["container_id"] == "line_first" and r["not_available_or_held"]
    }
    assert held == {("line", 11), ("line", 12)}


def test_the_risk_table_reads_the_same_clock(warehouse: Path) -> None:
    """The binding LFD is the binding party's own LFD; accrued demurrage is the sum of that
    party's day rates, projected detention the sum of the detention days'."""
    with duckdb.connect(str(warehouse), read_only=True) as con:
        risk = {r["container_id"]: r for r in _rows(con, "SELECT * FROM analytics.demurrage_risk")}
        parties = _rows(con, "SELECT * FROM analytics.charges")
        days = _rows(con, "SELECT * FROM terminal49.charged_days")
    binding = {p["container_id"]: p for p in parties if p["binds"]}
    expected = {
        "line_first": (date(2025, 11, 10), "line"),
        "rail_gone": (date(2025, 11, 15), "rail"),
        "pod": (date(2025, 11, 11), "pod_facility"),
        "moved": (date(2025, 11, 13), "terminal"),
        "reefer": (date(2025, 11, 11), "terminal"),
    }
    assert {k: (v["lfd_date"], v["lfd_source"]) for k, v in binding.items()} == expected
    for cid, r in risk.items():
        assert sum(p["binds"] for p in parties if p["container_id"] == cid) == (cid in expected)
        if cid in binding:
            b = binding[cid]
            assert (r["lfd_date"], r["lfd_source"]) == (b["lfd_date"], b["lfd_source"])
            rates = [
                d["rate"] for d in days if (d["container_id"], d["party"]) == (cid, b["party"])
            ]
            assert r["accrued_demurrage"] == sum(rates) == b["amount"], cid
        detention = [
            d["rate"] for d in days if d["container_id"] == cid and d["charge"] == "detention"
        ]
        if r["projected_detention"] is not None:
            assert r["projected_detention"] == sum(detention), cid
    assert risk["line_first"]["accrued_demurrage"] == 600
    assert risk["out"]["projected_detention"] == 525


def test_free_time_used_counts_the_charged_days(warehouse: Path) -> None:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        used = _rows(con, "SELECT * FROM terminal49.free_time_used")
        days = _rows(con, "SELECT * FROM analytics.charge_days")
    for u in used:
        mine = [
            d
            for d in days
            if (d["container_id"], d["party"], d["charge"])
            == (u["container_id"], u["party"], u["charge"])
        ]
        assert u["days_charged"] == len(mine)
    line_first = {(u["party"], u["charge"]): u for u in used if u["container_id"] == "line_first"}
    assert line_first[("line", "demurrage")]["days_charged_not_available"] == 2
    assert line_first[("terminal", "demurrage")]["lfd_date"] == date(2025, 11, 12)
    rail = {(u["party"], u["charge"]): u for u in used if u["container_id"] == "rail_gone"}
    assert (
        rail[("terminal", "demurrage")]["chargeable_until"],
        rail[("terminal", "demurrage")]["end_reason"],
    ) == (date(2025, 11, 9), "rail departure")


@pytest.mark.parametrize("cid", [c["id"] for c in CONTAINERS])
def test_the_evidence_agrees_with_the_views(warehouse: Path, tariffs: Path, cid: str) -> None:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        ev = gather(con, str(cid), load_tariffs(tariffs))
        view = _rows(
            con,
            "SELECT * FROM terminal49.charged_days WHERE container_id = ?",
            cid,
        )
        parties = _rows(con, "SELECT * FROM analytics.charges WHERE container_id = ?", cid)
    assert ev.as_of == AS_OF  # the published risk run's instant
    assert sorted(
        (d.party, d.charge, d.day, d.day_number, d.tier, d.rate, d.not_available_or_held)
        for d in ev.days
    ) == sorted(
        (
            r["party"],
            r["charge"],
            r["day"],
            r["day_number"],
            r["tier"],
            r["rate"],
            r["not_available_or_held"],
        )
        for r in view
    )
    # the parties in the engine's order, each with its days in order
    labels = [p.label for p in ev.parties]
    assert labels == sorted(labels, key=list(PARTY_LABELS.values()).index)
    assert all(p.days == sorted(p.days, key=lambda d: d.day) for p in ev.parties)
    assert {(p.row["party"], p.row["charge"], p.row["lfd_date"]) for p in ev.parties} == {
        (p["party"], p["charge"], p["lfd_date"]) for p in parties
    }


def test_the_evidence_shows_each_party_s_own_dates(warehouse: Path, tariffs: Path) -> None:
    from pipelines.history.evidence import key_facts

    with duckdb.connect(str(warehouse), read_only=True) as con:
        facts = dict(key_facts(gather(con, "RAIL_GONE", load_tariffs(tariffs))))
    assert facts["Pick up before (binding LFD)"] == "2025-11-15 (rail: Rail storage)"
    assert facts["Terminal demurrage: last free day"].startswith("2025-11-05 (reported as")
    assert facts["Terminal demurrage: chargeable until"] == "2025-11-09 (rail departure)"
    assert facts["Terminal demurrage: total"] == "200.00 USD"
    assert facts["Rail storage: last free day"].startswith("2025-11-15")


@pytest.mark.fast
def test_a_box_gone_by_rail_stops_the_terminal_clock_in_memory() -> None:
    """The engine on in-memory frames: no port day after the rail departure; the rail LFD
    binds; tiers as the sheet writes them."""
    frames = {
        "containers": pl.LazyFrame(
            {
                "id": ["x"],
                "number": ["X"],
                "shipment_id": ["s"],
                "pod_timezone": [LA],
                "final_destination_timezone": [CHI],
                "pickup_lfd_terminal": [date(2025, 11, 5)],
                "pickup_lfd_rail": [date(2025, 11, 15)],
                "pod_discharged_at": [datetime(2025, 11, 1, 18, tzinfo=UTC)],
                "pod_rail_departed_at": [datetime(2025, 11, 10, 6, tzinfo=UTC)],  # 9 Nov in LA
            }
        ),
        "shipments": pl.LazyFrame({"id": ["s"], "port_of_discharge_locode": ["USLAX"]}),
    }
    tariffs = pl.DataFrame(
        [
            {
                "tariff_line": 2,
                "charge": "demurrage",
                "free_days": 4,
                "free_basis": "calendar",
                "tiers": [
                    {"start": 1, "end": 2, "rate": 100.0},
                    {"start": 3, "end": None, "rate": 200.0},
                ],
                "currency": "USD",
                "as_of": dt.date(2025, 11, 1),
            }
        ],
        schema=load_tariffs().schema,
    )
    parties, days = compute_charges(frames, AS_OF, tariffs).collect()
    terminal = days.filter(pl.col("party") == "terminal")
    assert terminal["day"].to_list() == [date(2025, 11, d) for d in (6, 7, 8, 9)]
    assert terminal["tier"].to_list() == ["1-2", "1-2", "3+", "3+"]
    assert terminal["rate"].to_list() == [100, 100, 200, 200]
    binds = parties.filter("binds")
    assert binds.select("party", "lfd_date").rows() == [("rail", date(2025, 11, 15))]
