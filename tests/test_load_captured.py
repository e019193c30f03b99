"""The captured real responses load through the same code path, every field landing."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import reference_json

from pipelines.config import ApiSettings
from pipelines.load import run_load
from pipelines.terminal49 import settings

pytestmark = pytest.mark.fast

KEY = "captured-secret-key-0001"


def _page(data: list[Any], included: list[Any], kind: str) -> bytes:
    meta: dict[str, int] = {"total": len(data)}
    if kind == "shipments":
        meta["size"] = 100
    return json.dumps(
        {"data": data, "included": included, "meta": meta, "links": {"self": "x", "current": "x"}}
    ).encode()


def _serve(container_doc: dict[str, Any], shipment_doc: dict[str, Any]):
    def handler(path: str, query: dict[str, str], headers: dict[str, str]):
        if headers.get("Authorization") != f"Token {KEY}":
            return (
                401,
                {"Content-Type": "application/vnd.api+json"},
                b'{"errors":[{"status":"401","title":"Unauthorized"}]}',
            )
        ctype = {"Content-Type": "application/vnd.api+json"}
        if path == "/v2/containers":
            return (
                200,
                ctype,
                _page([container_doc["data"]], container_doc["included"], "containers"),
            )
        if path == "/v2/shipments":
            ship = shipment_doc["data"]
            inc = [r for r in shipment_doc["included"] if r["type"] != "container"]
            return 200, ctype, _page([ship], inc, "shipments")
        return 404, {"Content-Type": "text/html"}, b"<html>not found</html>"

    return handler


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    rows = con.execute(
        "SELECT column_name, data_type FROM duckdb_columns() "
        "WHERE schema_name = 'terminal49' AND table_name = ?",
        [table],
    ).fetchall()
    return dict(rows)


def test_captured_responses_land_with_every_field(loopback, tmp_path: Path) -> None:
    container = reference_json("responses/container-with-shipment.json")
    shipment = reference_json("responses/shipment-with-containers.json")
    server = loopback(_serve(container, shipment))
    db = tmp_path / "w.duckdb"
    summary = run_load(db, ApiSettings(base_url=server.base_url, api_key=KEY))
    assert summary.rows["containers"] == 1

    con = duckdb.connect(str(db), read_only=True)
    cols = _columns(con, "containers")
    attrs = container["data"]["attributes"]
    for key, value in attrs.items():
        if key == "import_deadlines":  # whole, and each LFD as its local date
            assert cols[key] == "JSON"
            for sub in settings.IMPORT_DEADLINES:
                assert cols[sub] == "DATE"
            assert cols["has_pod_deadlines"] == "BOOLEAN"
        elif key in settings.LFD_ATTRIBUTES:
            assert (cols[key], cols[f"{key}_wire"]) == ("DATE", "VARCHAR")
        elif key in settings.CONTAINER_CHILD_ARRAYS:
            assert cols[f"{key}_known"] == "BOOLEAN"
        elif value is None and key not in settings.CONTAINER_ATTRIBUTES:
            continue  # an unknown all-null attribute has no type yet
        else:
            assert key in cols, key
    for rel in ("shipment_id", "pod_terminal_id", "pickup_facility_id"):
        assert rel in cols
    assert cols["pod_discharged_at"] == "TIMESTAMP WITH TIME ZONE"
    assert cols["availability_known"] == "BOOLEAN"
    assert cols["equipment_length"] == "BIGINT"

    row = con.execute(
        "SELECT number, shipment_id, pod_terminal_id, pickup_facility_id, equipment_length, "
        "pod_discharged_at AT TIME ZONE 'UTC', current_status FROM terminal49.containers"
    ).fetchall()[0]
    assert row[:5] == ("RMCU74210c6", "shipment-1", "terminal-1", None, 20)
    assert str(row[5]) == "2025-12-29 14:24:00"
    assert row[6] == "picked_up"

    ship_cols = _columns(con, "shipments")
    for key in shipment["data"]["attributes"]:
        assert key in ship_cols, key
    for rel in settings.SHIPMENT_RELATIONSHIPS:
        assert f"{rel}_id" in ship_cols
    # shipment-1 arrives twice (a container's `included` and /shipments): it merges into one row
    ids = [r[0] for r in con.execute("SELECT id FROM terminal49.shipments").fetchall()]
    assert ids == ["shipment-1"]

    terminal = con.execute(
        "SELECT name, firms_code, port_id, attr_id FROM terminal49.terminals WHERE id='terminal-1'"
    ).fetchall()
    assert terminal == [
        ("Wando Welch Terminal", "N598", "port-2", "a59b3bd1-d497-4a48-bfb6-5cf2c4824a60")
    ]
    ports = con.execute(
        "SELECT code, latitude, time_zone FROM terminal49.ports ORDER BY code"
    ).fetchall()
    assert ("USCHS", pytest.approx(32.831492181), "America/New_York") in ports
    con.close()


def test_new_attribute_becomes_a_column_and_holds_follow_upstream(loopback, tmp_path: Path) -> None:
    container = reference_json("responses/container-with-shipment.json")
    shipment = reference_json("responses/shipment-with-containers.json")
    doc = copy.deepcopy(container)
    attrs = doc["data"]["attributes"]
    attrs["holds_at_pod_terminal"] = [
        {"name": "customs", "status": "hold", "description": None},
        {"name": "freight", "status": "pending", "description": "line release"},
    ]
    attrs["fees_at_pod_terminal"] = [
        {"type": "demurrage", "amount": 300.0, "currency_code": "USD"},
        {"type": "total", "amount": 300.0, "currency_code": "USD"},
    ]
    server = loopback(_serve(doc, shipment))
    db = tmp_path / "w.duckdb"
    api = ApiSettings(base_url=server.base_url, api_key=KEY)
    run_load(db, api)
    with duckdb.connect(str(db), read_only=True) as con:
        holds = con.execute(
            "SELECT name, status FROM terminal49.container_holds ORDER BY name"
        ).fetchall()
        assert holds == [("customs", "hold"), ("freight", "pending")]
        assert con.execute("SELECT count(*) FROM terminal49.container_fees").fetchall() == [(2,)]

    # Upstream: customs clears, fees vanish, and the API grows an attribute.
    attrs["holds_at_pod_terminal"] = [{"name": "freight", "status": "hold", "description": None}]
    attrs["fees_at_pod_terminal"] = []
    attrs["berth_window_at"] = "2026-01-02T03:04:05Z"
    attrs["gate_stats"] = {"moves": 3}
    run_load(db, api)
    with duckdb.connect(str(db), read_only=True) as con:
        holds = con.execute("SELECT name, status FROM terminal49.container_holds").fetchall()
        assert holds == [("freight", "hold")]
        assert con.execute("SELECT count(*) FROM terminal49.container_fees").fetchall() == [(0,)]
        new = con.execute(
            "SELECT berth_window_at, gate_stats FROM terminal49.containers"
        ).fetchall()
        assert new == [("2026-01-02T03:04:05Z", '{"moves":3}')]
        assert con.execute("SELECT count(*) FROM terminal49.containers").fetchall() == [(1,)]

    # Holds become [] entirely: no hold rows remain.
    attrs["holds_at_pod_terminal"] = []
    run_load(db, api)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM terminal49.container_holds").fetchall() == [(0,)]


def test_odd_fee_values_keep_the_load_and_the_column_types(loopback, tmp_path: Path) -> None:
    """An amount sent as text is parsed, a value that is no amount lands in ``amount__raw``;
    neither fails the load (an amount of "12.50" once turned the column into JSON text, and the
    load failed on it)."""
    container = reference_json("responses/container-with-shipment.json")
    shipment = reference_json("responses/shipment-with-containers.json")
    doc = copy.deepcopy(container)
    attrs = doc["data"]["attributes"]
    attrs["fees_at_pod_terminal"] = [{"type": "demurrage", "amount": 100.0, "currency_code": "USD"}]
    server = loopback(_serve(doc, shipment))
    db = tmp_path / "w.duckdb"
    api = ApiSettings(base_url=server.base_url, api_key=KEY)
    run_load(db, api)

    attrs["fees_at_pod_terminal"] = [
        {"type": "demurrage", "amount": "12.50", "currency_code": "USD"},
        {"type": "exam", "amount": "n/a", "currency_code": 840},
        {"type": "total", "amount": 30, "currency_code": "USD"},
    ]
    run_load(db, api)
    with duckdb.connect(str(db), read_only=True) as con:
        cols = _columns(con, "container_fees")
        assert cols["amount"] == "DOUBLE"
        assert cols["currency_code"] == "VARCHAR"
        rows = con.execute(
            "SELECT type, amount, amount__raw, currency_code, currency_code__raw "
            "FROM terminal49.container_fees ORDER BY position"
        ).fetchall()
    assert rows == [
        ("demurrage", 12.5, None, "USD", None),
        ("exam", None, '"n/a"', None, "840"),
        ("total", 30.0, None, "USD", None),
    ]


def test_a_new_attribute_that_changes_type_keeps_loading(loopback, tmp_path: Path) -> None:
    """A new attribute typed BIGINT by its first values, then sent as text: the next load
    completes, the text lands in ``<column>__raw`` (it once failed that load and every later
    one: DuckDB cannot store "A7" in a BIGINT column)."""
    container = reference_json("responses/container-with-shipment.json")
    shipment = reference_json("responses/shipment-with-containers.json")
    doc = copy.deepcopy(container)
    attrs = doc["data"]["attributes"]
    attrs["gate_code"] = 12
    server = loopback(_serve(doc, shipment))
    db = tmp_path / "w.duckdb"
    api = ApiSettings(base_url=server.base_url, api_key=KEY)
    run_load(db, api)
    attrs["gate_code"] = "A7"
    run_load(db, api)
    with duckdb.connect(str(db), read_only=True) as con:
        assert _columns(con, "containers")["gate_code"] == "BIGINT"
        rows = con.execute("SELECT gate_code, gate_code__raw FROM terminal49.containers").fetchall()
    assert rows == [(None, '"A7"')]
    attrs["gate_code"] = "13"  # a number sent as text reads as one
    run_load(db, api)
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT gate_code, gate_code__raw FROM terminal49.containers").fetchall()
    assert rows == [(13, None)]


def test_attributes_whose_names_collide_after_normalisation_keep_loading(
    loopback, tmp_path: Path
) -> None:
    """ "Number" would become a second ``number`` column once dlt normalises it, and dlt fails the
    whole load on that; an attribute named like a derived column would overwrite it. Both get
    the ``attr_`` prefix instead, whatever order the API sends them in."""
    container = reference_json("responses/container-with-shipment.json")
    shipment = reference_json("responses/shipment-with-containers.json")
    doc = copy.deepcopy(container)
    attrs = doc["data"]["attributes"]
    attrs["Number"] = "shadow"
    attrs["pod_terminal_id"] = "not-the-relationship"
    attrs["gateCode"] = 1
    attrs["gate_code"] = 2
    server = loopback(_serve(doc, shipment))
    db = tmp_path / "w.duckdb"
    run_load(db, ApiSettings(base_url=server.base_url, api_key=KEY))
    with duckdb.connect(str(db), read_only=True) as con:
        row = con.execute(
            "SELECT number, attr_number, pod_terminal_id, attr_pod_terminal_id, gate_code, "
            "attr_gate_code FROM terminal49.containers"
        ).fetchall()
    assert row == [("RMCU74210c6", "shadow", "terminal-1", "not-the-relationship", 2, 1)]


def test_a_field_the_api_adds_to_fees_lands_as_a_column(loopback, tmp_path: Path) -> None:
    container = reference_json("responses/container-with-shipment.json")
    shipment = reference_json("responses/shipment-with-containers.json")
    doc = copy.deepcopy(container)
    doc["data"]["attributes"]["fees_at_pod_terminal"] = [
        {"type": "demurrage", "amount": 150.0, "currency_code": "USD", "waived": True},
        {"type": "total", "amount": 150.0, "currency_code": "USD"},
    ]
    server = loopback(_serve(doc, shipment))
    db = tmp_path / "w.duckdb"
    run_load(db, ApiSettings(base_url=server.base_url, api_key=KEY))
    with duckdb.connect(str(db), read_only=True) as con:
        assert _columns(con, "container_fees")["waived"] == "BOOLEAN"
        rows = con.execute(
            "SELECT type, waived FROM terminal49.container_fees ORDER BY position"
        ).fetchall()
    assert rows == [("demurrage", True), ("total", None)]
