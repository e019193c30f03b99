"""The POD deadline (``import_deadlines.pod``) and LFD columns stored as DATEs.

as_of = Fri 2025-11-14 16:00Z (08:00 PST). A warehouse still holding LFDs as instants (written
before LFDs became dates, not loaded since) gets one line telling to run a load.
"""

from __future__ import annotations

import shutil
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest
from risk_fixtures import container as _c
from risk_fixtures import make_warehouse
from typer.testing import CliRunner

from pipelines.analytics import compute_risk, load_tariffs, publish_risk, read_warehouse
from pipelines.warehouse import reading

pytestmark = pytest.mark.fast

AS_OF = datetime(2025, 11, 14, 16, 0, tzinfo=UTC)
LA, CHI = "America/Los_Angeles", "America/Chicago"
FRESH = "2025-11-14T15:00:00Z"


def _la(day: str) -> str:
    """Local midnight of ``day`` in Los Angeles (PST in November) as the API's instant."""
    return f"{day}T08:00:00Z"


def _pod(
    unified: str | None, selection: str | None, line: str | None = None, facility: str | None = None
) -> dict[str, object]:
    return {
        "has_pod_deadlines": True,
        "pod_lfd_unified": unified,
        "pod_lfd_unified_selection": selection,
        "pod_lfd_line_current": line,
        "pod_lfd_facility_current": facility,
    }


CONTAINERS = [
    # unified from the facility: 17 Nov (3 days, imminent); legacy terminal 20 Nov disagrees
    _c("fac", pickup_lfd_terminal=_la("2025-11-20")),
    # unified from the line: 19 Nov (5 days, watch)
    _c("line"),
    # unified from a calculated line value: 18 Nov (4 days, watch)
    _c("calc"),
    # unified NULL: unknown, the legacy terminal LFD (12 Nov, overdue) must not be used
    _c("none", pickup_lfd_terminal=_la("2025-11-12"), pickup_lfd_line=_la("2025-11-11")),
    # legacy fields 10 and 11 Nov, unified 21 Nov (7 days): unified binds; they disagree by 11
    _c("legacy", pickup_lfd_terminal=_la("2025-11-10"), pickup_lfd_line=_la("2025-11-11")),
    # inland by rail to Chicago with a pod object: left the port, the facility date (20 Nov) no
    # longer binds; the rail LFD 2025-11-15T06:00Z = Sat 15 Nov 00:00 CST (1 day) does
    _c(
        "rail",
        pickup_lfd_rail="2025-11-15T06:00:00Z",
        final_destination_timezone=CHI,
        pod_rail_departed_at="2025-11-09T12:00:00Z",
        pod_rail_carrier_scac="UPRR",
        current_status="on_rail",
    ),
    # no pod object: the legacy rules (terminal 17 Nov)
    _c("old", pickup_lfd_terminal=_la("2025-11-17")),
]
POD = {
    "fac": _pod("2025-11-17", "facility", line="2025-11-19", facility="2025-11-17"),
    "line": _pod("2025-11-19", "line", line="2025-11-19", facility="2025-11-21"),
    "calc": _pod("2025-11-18", "line_calculated"),
    "none": _pod(None, None),
    "legacy": _pod("2025-11-21", "facility", facility="2025-11-21"),
    "rail": _pod("2025-11-20", "facility", facility="2025-11-20"),
    "old": {"has_pod_deadlines": False},
}
DATA: dict[str, list[dict[str, Any]]] = {
    "containers": CONTAINERS,
    "shipments": [
        {
            "id": "s-" + str(c["id"]),
            "shipping_line_scac": "HLCU",
            "port_of_discharge_locode": "USLAX",
            "destination_locode": ("USCHI" if c["id"] == "rail" else None),
        }
        for c in CONTAINERS
    ],
    "terminals": [
        {"id": "t-fenix", "name": "Fenix Marine", "nickname": "Fenix", "firms_code": "Y257"}
    ],
}
POD_DDL = {
    "has_pod_deadlines": "BOOLEAN",
    "pod_lfd_unified": "DATE",
    "pod_lfd_unified_selection": "VARCHAR",
    "pod_lfd_line_current": "DATE",
    "pod_lfd_facility_current": "DATE",
}
LFDS = (
    "pickup_lfd_terminal",
    "pickup_lfd_line",
    "pickup_lfd_rail",
    "ind_facility_lfd_on",
    "pickup_lfd",
    "ssl_lfd",
)


def _warehouse(path: Path) -> Path:
    """The containers above, with the pod columns (LFDs are local DATEs, as a load writes)."""
    make_warehouse(path, DATA)
    with duckdb.connect(str(path)) as con:
        con.execute("SET TimeZone = 'UTC'")
        for name, typ in POD_DDL.items():
            con.execute(f"ALTER TABLE terminal49.containers ADD COLUMN {name} {typ}")
        for cid, values in POD.items():
            sets = ", ".join(f"{k} = ?" for k in values)
            con.execute(
                f"UPDATE terminal49.containers SET {sets} WHERE id = ?", [*values.values(), cid]
            )
    return path


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _warehouse(tmp_path_factory.mktemp("pod") / "w.duckdb")


@pytest.fixture(scope="module")
def risk(warehouse: Path) -> dict[str, dict[str, object]]:
    with reading(warehouse) as con:
        df = compute_risk(read_warehouse(con), AS_OF, load_tariffs()).collect()
    return {r["container_id"]: r for r in df.iter_rows(named=True)}


def _binding(r: dict[str, object]) -> tuple[object, ...]:
    return r["lfd_date"], r["lfd_source"], r["days_to_lfd"], r["risk_level"]


def test_unified_from_facility(risk: dict) -> None:
    r = risk["fac"]
    assert _binding(r) == (date(2025, 11, 17), "pod_facility", 3, "imminent")
    assert r["lfd_pod"] == date(2025, 11, 17)
    assert r["lfd_terminal"] == date(2025, 11, 20)  # still reported, no longer binding
    assert r["lfd_disagreement_days"] == 3  # 17 (unified, facility) .. 20 (legacy terminal)
    assert r["risk_reason"].startswith("LFD in 3 days at Fenix (pod_facility)")


def test_unified_from_line(risk: dict) -> None:
    assert _binding(risk["line"]) == (date(2025, 11, 19), "pod_line", 5, "watch")
    assert risk["line"]["lfd_disagreement_days"] == 2  # line 19, facility 21


def test_unified_from_a_calculated_value(risk: dict) -> None:
    assert _binding(risk["calc"]) == (date(2025, 11, 18), "pod_line_calculated", 4, "watch")


def test_unified_null_is_unknown_without_fallback(risk: dict) -> None:
    r = risk["none"]
    assert _binding(r) == (None, None, None, "unknown")
    assert (r["lfd_terminal"], r["lfd_line"]) == (date(2025, 11, 12), date(2025, 11, 11))
    assert r["risk_reason"].startswith("discharged, no LFD posted")


def test_legacy_fields_that_disagree_with_unified(risk: dict) -> None:
    r = risk["legacy"]
    assert _binding(r) == (date(2025, 11, 21), "pod_facility", 7, "watch")
    assert r["lfd_disagreement_days"] == 11  # legacy terminal 10 Nov .. unified 21 Nov


def test_rail_lfd_on_an_inland_move_with_a_pod_object(risk: dict) -> None:
    r = risk["rail"]
    assert r["is_inland"] is True
    assert _binding(r) == (date(2025, 11, 15), "rail", 1, "imminent")
    assert r["lfd_rail"] == date(2025, 11, 15)


def test_no_pod_object_keeps_the_legacy_rules(risk: dict) -> None:
    assert _binding(risk["old"]) == (date(2025, 11, 17), "terminal", 3, "imminent")


def _risk_cli_error(db: Path) -> str:
    """``freetime risk --duckdb DB``'s one-line error (exit 2, no traceback)."""
    import typer

    from freetime_cli.risk_cmd import risk as risk_command

    app = typer.Typer()
    app.command()(risk_command)
    r = CliRunner().invoke(app, ["--duckdb", str(db)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert len(r.stderr.strip().splitlines()) <= 2  # one line (the console may wrap it)
    return r.stderr


def test_cli_one_line_when_lfds_are_still_instants(tmp_path: Path) -> None:
    db = _warehouse(tmp_path / "old.duckdb")
    with duckdb.connect(str(db)) as con:
        con.execute(
            "ALTER TABLE terminal49.containers ALTER pickup_lfd_terminal TYPE TIMESTAMPTZ "
            "USING CAST(pickup_lfd_terminal AS TIMESTAMPTZ)"
        )
    err = _risk_cli_error(db)
    assert "pickup_lfd_terminal" in err and "run `freetime load` once" in err


def test_containers_wide_with_date_lfd_columns(warehouse: Path, tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    shutil.copy(warehouse, db)
    publish_risk(db, as_of=AS_OF)
    with duckdb.connect(str(db), read_only=True) as con:
        row = con.sql(
            "SELECT pod_last_free_day_on_local, ind_last_free_day_on_local "
            "FROM analytics.containers_wide WHERE container_id IN ('fac', 'rail') "
            "ORDER BY container_id"
        ).fetchall()
    assert row == [("2025-11-20", None), (None, "2025-11-15")]


def test_cli_one_line_when_containers_lack_columns(tmp_path: Path) -> None:
    db = tmp_path / "old.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE SCHEMA terminal49")
        con.execute(
            "CREATE TABLE terminal49.containers (number VARCHAR, pickup_lfd_terminal VARCHAR)"
        )
        con.execute("INSERT INTO terminal49.containers VALUES ('A', 'soon')")
    err = _risk_cli_error(db)
    assert "no column id" in err and "pickup_lfd_terminal is VARCHAR" in err
