"""LFDs land as local calendar dates through a real load: a page of containers served over HTTP
on loopback, loaded by ``run_load`` into a DuckDB file. A bare date and the instant of the same
local midnight give the same DATE (west of UTC too, where UTC midnight is the day before), the
``import_deadlines.pod`` fields land typed, and only a malformed value ends in ``__raw``."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import duckdb
import pytest

from pipelines.config import ApiSettings
from pipelines.load import run_load

pytestmark = pytest.mark.fast

KEY = "lfd-dates-secret-key-0001"
DAY = dt.date(2026, 9, 24)
#: Zone -> the instant of DAY's local midnight in it.
MIDNIGHTS = {
    "America/New_York": "2026-09-24T04:00:00Z",
    "America/Los_Angeles": "2026-09-24T07:00:00Z",
    "Asia/Kolkata": "2026-09-23T18:30:00Z",  # east of UTC: the UTC date is the day before
}
DATE_COLUMNS = (
    "pickup_lfd",
    "ssl_lfd",
    "ind_facility_lfd_on",
    "pickup_lfd_terminal",
    "pickup_lfd_line",
    "pickup_lfd_rail",
    "pod_lfd_line_original",
    "pod_lfd_line_current",
    "pod_lfd_line_calculated",
    "pod_lfd_facility_original",
    "pod_lfd_facility_current",
    "pod_lfd_facility_calculated",
    "pod_lfd_unified",
    "pod_lfd_unified_original",
)


def _container(cid: str, zone: str | None, lfd: str | None, pod: Any = None) -> dict[str, Any]:
    deadlines: dict[str, Any] = {
        "pickup_lfd_terminal": lfd,
        "pickup_lfd_line": lfd,
        "pickup_lfd_rail": lfd,
    }
    if pod is not None:
        deadlines["pod"] = pod
    return {
        "id": cid,
        "type": "container",
        "attributes": {
            "number": cid.upper(),
            "pod_timezone": zone,
            "final_destination_timezone": zone,
            "pickup_lfd": lfd,
            "ssl_lfd": lfd,
            "ind_facility_lfd_on": lfd,
            "import_deadlines": deadlines,
            "holds_at_pod_terminal": [],
            "fees_at_pod_terminal": [],
        },
        "relationships": {},
    }


def _pod(value: str | None, selection: str | None = "facility") -> dict[str, Any]:
    """Every date of a ``pod`` object set to ``value``; ``unified.current_value`` with it."""
    source = {"original": value, "current": value, "calculated": value, "manual": False}
    return {
        "line": source,
        "facility": {**source, "manual": True},
        "unified": {
            "original_value": value,
            "original_selection": "line",
            "current_value": value,
            "current_selection": selection,
        },
    }


def _containers() -> list[dict[str, Any]]:
    out = []
    for n, (zone, instant) in enumerate(MIDNIGHTS.items()):
        out.append(_container(f"bare-{n}", zone, DAY.isoformat(), _pod(DAY.isoformat())))
        out.append(_container(f"instant-{n}", zone, instant, _pod(instant)))
    withheld = _pod(None, selection="line_calculated")
    withheld["line"] = {**withheld["line"], "current": "2026-09-26"}
    out += [
        _container("no-pod", "America/Los_Angeles", MIDNIGHTS["America/Los_Angeles"]),
        _container("withheld", "America/New_York", None, withheld),
        _container("odd-pod", "America/New_York", None, "not an object"),
        _container("malformed", "America/New_York", "soon", _pod("next week")),
    ]
    return out


def _serve(containers: list[dict[str, Any]]):
    def handler(path: str, query: dict[str, str], headers: dict[str, str]):
        ctype = {"Content-Type": "application/vnd.api+json"}
        if headers.get("Authorization") != f"Token {KEY}":
            return 401, ctype, b'{"errors":[{"status":"401","title":"Unauthorized"}]}'
        if path == "/v2/containers":
            data: list[dict[str, Any]] = containers
            meta: dict[str, int] = {"total": len(containers)}
        elif path == "/v2/shipments":
            data, meta = [], {"total": 0, "size": 100}
        else:
            return 404, {"Content-Type": "text/html"}, b"<html>not found</html>"
        body = {"data": data, "included": [], "meta": meta, "links": {"self": "x", "current": "x"}}
        return 200, ctype, json.dumps(body).encode()

    return handler


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from conftest import LoopbackServer

    db = tmp_path_factory.mktemp("lfd") / "w.duckdb"
    with LoopbackServer(_serve(_containers())) as server:
        run_load(db, ApiSettings(base_url=server.base_url, api_key=KEY))
    con = duckdb.connect(str(db), read_only=True)
    yield con
    con.close()


def _one(con: duckdb.DuckDBPyConnection, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    return con.execute(sql, list(params)).fetchall()


def _types(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    return dict(
        _one(
            con,
            "SELECT column_name, data_type FROM duckdb_columns() "
            "WHERE schema_name = 'terminal49' AND table_name = 'containers'",
        )
    )


def test_lfd_columns_have_the_contract_types(warehouse: duckdb.DuckDBPyConnection) -> None:
    types = _types(warehouse)
    assert {c: types[c] for c in DATE_COLUMNS} == dict.fromkeys(DATE_COLUMNS, "DATE")
    assert types["import_deadlines"] == "JSON"
    for wire in ("pickup_lfd_wire", "ssl_lfd_wire", "ind_facility_lfd_on_wire"):
        assert types[wire] == "VARCHAR"
    assert types["has_pod_deadlines"] == "BOOLEAN"
    assert types["pod_lfd_line_manual"] == types["pod_lfd_facility_manual"] == "BOOLEAN"
    assert types["pod_lfd_unified_selection"] == "VARCHAR"
    assert types["pod_lfd_unified_original_selection"] == "VARCHAR"


@pytest.mark.parametrize("zone", list(MIDNIGHTS))
def test_a_bare_date_and_its_instant_land_as_the_same_date(
    warehouse: duckdb.DuckDBPyConnection, zone: str
) -> None:
    n = list(MIDNIGHTS).index(zone)
    columns = ", ".join(DATE_COLUMNS)
    for cid in (f"bare-{n}", f"instant-{n}"):
        row = _one(warehouse, f"SELECT {columns} FROM terminal49.containers WHERE id = ?", cid)
        assert row == [(DAY,) * len(DATE_COLUMNS)], cid
    wires = _one(
        warehouse,
        "SELECT id, pickup_lfd_wire, import_deadlines->>'$.pickup_lfd_line' "
        "FROM terminal49.containers WHERE id IN (?, ?) ORDER BY id",
        f"bare-{n}",
        f"instant-{n}",
    )
    assert wires == [
        (f"bare-{n}", "2026-09-24", "2026-09-24"),
        (f"instant-{n}", MIDNIGHTS[zone], MIDNIGHTS[zone]),
    ]


def test_every_pod_field_lands_typed(warehouse: duckdb.DuckDBPyConnection) -> None:
    rows = _one(
        warehouse,
        "SELECT id, has_pod_deadlines, pod_lfd_unified, pod_lfd_unified_selection, "
        "pod_lfd_unified_original_selection, pod_lfd_line_manual, "
        "pod_lfd_facility_manual, pod_lfd_line_current, "
        "import_deadlines->>'$.pod.unified.current_selection' "
        "FROM terminal49.containers WHERE id IN ('instant-1', 'no-pod', 'withheld', "
        "'odd-pod') ORDER BY id",
    )
    assert rows == [
        ("instant-1", True, DAY, "facility", "line", False, True, DAY, "facility"),
        ("no-pod", False, None, None, None, None, None, None, None),
        ("odd-pod", False, None, None, None, None, None, None, None),
        (
            "withheld",
            True,
            None,
            "line_calculated",
            "line",
            False,
            True,
            dt.date(2026, 9, 26),
            "line_calculated",
        ),
    ]
    # without a pod object every pod column is NULL; the legacy LFDs still land
    pod_columns = [c for c in _types(warehouse) if c.startswith("pod_lfd_") and "__" not in c]
    assert len(pod_columns) == 12
    nulls = _one(
        warehouse,
        f"SELECT {', '.join(pod_columns)}, pickup_lfd_terminal "
        "FROM terminal49.containers WHERE id = 'no-pod'",
    )
    assert nulls == [(None,) * len(pod_columns) + (DAY,)]


def test_only_a_malformed_value_lands_in_raw(warehouse: duckdb.DuckDBPyConnection) -> None:
    raw = sorted(c for c in _types(warehouse) if c.endswith("__raw"))
    # "soon" in the legacy LFDs, "next week" in the pod's dates
    assert raw == sorted(f"{c}__raw" for c in DATE_COLUMNS)
    with_raw = _one(
        warehouse,
        "SELECT DISTINCT id FROM terminal49.containers WHERE "
        + " OR ".join(f"{c} IS NOT NULL" for c in raw),
    )
    assert with_raw == [("malformed",)]
    row = _one(
        warehouse,
        "SELECT pickup_lfd, pickup_lfd__raw, pickup_lfd_wire, pod_lfd_unified, "
        "pod_lfd_unified__raw, has_pod_deadlines FROM terminal49.containers "
        "WHERE id = 'malformed'",
    )
    assert row == [(None, "soon", "soon", None, "next week", True)]


def test_every_lfd_column_has_its_comment(warehouse: duckdb.DuckDBPyConnection) -> None:
    comments = dict(
        _one(
            warehouse,
            "SELECT column_name, comment FROM duckdb_columns() "
            "WHERE schema_name = 'terminal49' "
            "AND table_name = 'containers'",
        )
    )
    documented = [
        *DATE_COLUMNS,
        "import_deadlines",
        "has_pod_deadlines",
        "pickup_lfd_wire",
        "ssl_lfd_wire",
        "ind_facility_lfd_on_wire",
        "pod_lfd_line_manual",
        "pod_lfd_facility_manual",
        "pod_lfd_unified_selection",
        "pod_lfd_unified_original_selection",
        "pod_terminal_id",
        "fetched_at",  # and the columns documented before them
    ]
    assert [c for c in documented if not comments[c]] == []


def test_an_older_warehouse_keeps_its_lfds_as_the_same_local_dates(tmp_path: Any) -> None:
    """A warehouse from before LFDs were dates holds them as instants (local midnight in UTC).
    The load that migrates the columns gives every row its local date, the rows it does not
    list too, and history records no LFD change that never happened (east of UTC, local
    midnight falls on the UTC day before). A zone name no one knows does not stop it."""
    from conftest import LoopbackServer

    db = tmp_path / "w.duckdb"
    containers = [*_containers(), _container("odd-zone", "Mars/Olympus_Mons", None)]
    with LoopbackServer(_serve(containers)) as server:
        run_load(db, ApiSettings(base_url=server.base_url, api_key=KEY))
    select = f"SELECT id, {', '.join(DATE_COLUMNS)} FROM terminal49.containers ORDER BY id"
    with duckdb.connect(str(db)) as con:
        before = _one(con, select)
        for c in DATE_COLUMNS:  # as an older load wrote them (each fixture has one zone)
            con.execute(
                f"ALTER TABLE terminal49.containers ALTER {c} TYPE TIMESTAMPTZ USING "
                f"CASE WHEN {c} IS NOT NULL THEN timezone(coalesce(pod_timezone, 'UTC'), "
                f"CAST({c} AS TIMESTAMP)) END"
            )
        assert _one(con, "SELECT pickup_lfd FROM terminal49.containers WHERE id = 'bare-2'") == [
            (dt.datetime(2026, 9, 23, 18, 30, tzinfo=dt.UTC),)
        ]  # Kolkata's midnight
    listed = [c for c in containers if c["id"] == "instant-2"]  # the rest is not listed again
    with LoopbackServer(_serve(listed)) as server:
        migrating = run_load(db, ApiSettings(base_url=server.base_url, api_key=KEY))
    with duckdb.connect(str(db), read_only=True) as con:
        assert {c: t for c, t in _types(con).items() if c in DATE_COLUMNS} == dict.fromkeys(
            DATE_COLUMNS, "DATE"
        )
        assert _one(con, select) == before
        changes = _one(
            con,
            "SELECT entity_id, field, old_value, new_value "
            "FROM terminal49.history WHERE load_id = ? AND list_contains(?, field)",
            migrating.load_id,
            list(DATE_COLUMNS),
        )
    assert changes == []
