"""The flattener: JSON:API resources to typed Arrow tables, on captured responses and on pages
with values of unexpected types (which land beside their columns, in ``__raw``)."""

from __future__ import annotations

import copy
import datetime as dt
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pyarrow as pa
import pytest
from conftest import reference_json

from pipelines.terminal49 import flatten, pages

FETCHED = dt.datetime(2026, 11, 20, 12, tzinfo=dt.UTC)


def _captured() -> dict[str, list[dict[str, Any]]]:
    c = reference_json("responses/container-with-shipment.json")
    s = reference_json("responses/shipment-with-containers.json")
    included = c["included"] + s["included"]
    return {
        "containers": [c["data"]],
        "shipments": [s["data"], *flatten.of_types(included, ["shipment"])],
        "terminals": flatten.of_types(included, ["terminal", "rail_terminal"]),
        "ports": flatten.of_types(included, ["port", "metro_area"]),
    }


TABLES = {
    "containers": flatten.containers_table,
    "shipments": flatten.shipments_table,
    "terminals": flatten.terminals_table,
    "ports": flatten.ports_table,
}


@pytest.mark.parametrize("table", list(TABLES))
def test_captured_responses_flatten_to_one_row_each(table: str) -> None:
    records = _captured()[table]
    assert records, f"no captured {table}"
    out = TABLES[table](records, FETCHED)
    assert out.num_rows == len(records)
    assert not [n for n in out.column_names if n.endswith("__raw")]


def test_odd_values_land() -> None:
    base = _captured()["containers"][0]
    odd = copy.deepcopy(base)
    odd["id"] = "odd-1"
    odd["attributes"].update(
        equipment_length="40",  # a number sent as text: parsed
        seal_number=12345,  # a number where text is declared: kept as text in __raw
        pod_discharged_at="yesterday",  # not an instant: NULL plus __raw
        brand_new_attribute={"nested": [1, 2]},  # unknown: lands as JSON text
    )
    out = flatten.containers_table([base, odd], FETCHED)
    rows = out.to_pylist()
    assert rows[1]["equipment_length"] == 40
    assert rows[1]["seal_number__raw"] == "12345"
    assert rows[1]["pod_discharged_at"] is None
    assert rows[1]["pod_discharged_at__raw"] == "yesterday"
    assert rows[1]["brand_new_attribute"] == '{"nested":[1,2]}'
    captured = base["attributes"]["pod_discharged_at"]
    assert captured and rows[0]["pod_discharged_at"] == dt.datetime.fromisoformat(captured)
    assert rows[0]["pod_discharged_at__raw"] is None


def test_timestamps_and_numbers_as_text_are_read() -> None:
    ports = copy.deepcopy(_captured()["ports"])
    for p in ports:
        p["attributes"]["latitude"] = "32.83"  # production sends coordinates as strings
    out = flatten.ports_table(ports, FETCHED)
    assert set(out.column("latitude").to_pylist()) == {32.83}
    base = copy.deepcopy(_captured()["containers"][0])
    base["attributes"]["terminal_checked_at"] = "2025-11-14T03:00:00+00:00"
    out = flatten.containers_table([base], FETCHED)
    assert out.column("terminal_checked_at").to_pylist() == [
        dt.datetime(2025, 11, 14, 3, tzinfo=dt.UTC)
    ]


def test_an_unparseable_instant_lands_beside_its_column() -> None:
    """Only the odd columns get a ``__raw`` column, right after them."""
    base = _captured()["containers"][0]
    odd = copy.deepcopy(base)
    odd["id"] = "odd-2"
    odd["attributes"]["pod_discharged_at"] = "yesterday"
    odd["attributes"]["import_deadlines"] = {"pickup_lfd_line": "soon"}
    out = flatten.containers_table([base, odd], FETCHED)
    names = out.column_names
    for column, text in (("pod_discharged_at", "yesterday"), ("pickup_lfd_line", "soon")):
        assert names[names.index(column) + 1] == f"{column}__raw"
        assert out.column(column).to_pylist()[1] is None
        assert out.column(f"{column}__raw").to_pylist() == [None, text]
    assert out.column("pickup_lfd_terminal").to_pylist()[1] is None
    assert "pickup_lfd_terminal__raw" not in names
    assert "terminal_checked_at__raw" not in names


def test_numbers_an_integer_column_cannot_hold_land_as_text() -> None:
    """pyarrow truncates 40.5 into an int64 column and overflows on 2**63: both are kept whole
    in ``__raw`` instead (a whole float such as 40.0 is read as the integer), and only the odd
    value leaves the typed column."""
    base = _captured()["containers"][0]
    pages = []
    for n, value in enumerate([40.5, 2**63, 40.0]):  # 2**63: one past int64, as orjson reads it
        odd = copy.deepcopy(base)
        odd["id"] = f"odd-{n}"
        odd["attributes"]["equipment_length"] = value
        odd["attributes"]["brand_new_count"] = value  # an unknown attribute: never lost either
        pages.append(flatten.containers_table([base, odd], FETCHED).to_pylist())
    fraction, huge, whole = (page[1] for page in pages)
    for page in pages:  # the other container of the page keeps its value, typed
        assert page[0]["equipment_length"] == base["attributes"]["equipment_length"]
        assert page[0].get("equipment_length__raw") is None
    assert fraction["equipment_length"] is None
    assert fraction["equipment_length__raw"] == "40.5"
    assert fraction["brand_new_count"] == 40.5
    assert huge["equipment_length"] is None
    assert huge["equipment_length__raw"] == str(2**63)
    assert huge["brand_new_count"] == str(2**63)
    assert whole["equipment_length"] == 40
    assert "equipment_length__raw" not in whole


def test_pages_are_conformed_to_the_types_their_columns_already_have() -> None:
    """A column keeps the type the warehouse (or this load's first page) gave it; a value that
    does not read as that type lands in ``<column>__raw`` (merged with any raw value there)."""
    types = flatten.ColumnTypes.from_duckdb([
        ("containers", "gate_code", "BIGINT"),
        ("containers", "berth", "VARCHAR"),
        ("containers", "ratio", "DOUBLE"),
        ("containers", "odd", "STRUCT(a INTEGER)"),  # a type it does not map: left alone
    ])
    page = pa.table({
        "id": ["a", "b", "c"],
        "gate_code": ["12", "A7", None],  # text now: numbers read, the rest kept raw
        "gate_code__raw": [None, None, "kept"],
        "berth": [7, 8, None],  # numbers where text is stored
        "ratio": [1, 2, 3],  # integers where doubles are stored
        "new_flag": [True, None, False],  # new: its type is remembered
    })
    out = types.conform("containers", page).to_pydict()
    assert out["gate_code"] == [12, None, None]
    assert out["gate_code__raw"] == [None, '"A7"', "kept"]
    assert out["berth"] == ["7", "8", None]
    assert out["ratio"] == [1.0, 2.0, 3.0]
    assert out["new_flag"] == [True, None, False]

    later = types.conform("containers", pa.table({"id": ["d"], "new_flag": ["maybe"]}))
    assert later.schema.field("new_flag").type == pa.bool_()
    assert later.to_pydict() == {"id": ["d"], "new_flag": [None], "new_flag__raw": ['"maybe"']}
    same = pa.table({"id": ["e"], "gate_code": pa.array([5], pa.int64())})
    assert types.conform("containers", same) is not None
    assert types.conform("containers", same).equals(same)  # the usual page: unchanged


def test_fields_the_api_adds_to_holds_and_fees_land_as_columns() -> None:
    records = [
        {"id": "c1", "attributes": {"holds_at_pod_terminal": [
            {"name": "customs", "status": "hold", "placed_at": "2026-01-02T03:04:05Z",
             "type": "x"},
            {"name": "freight", "status": "pending"},
        ]}},
        {"id": "c2", "attributes": {"holds_at_pod_terminal": []}},
    ]
    rows = flatten.holds_table(records, FETCHED).to_pylist()
    assert [(r["container_id"], r["position"], r["_deleted"]) for r in rows] == [
        ("c1", 0, False), ("c1", 1, False), ("c2", -1, True)]
    assert [r["placed_at"] for r in rows] == ["2026-01-02T03:04:05Z", None, None]
    assert [r["attr_type"] for r in rows] == ["x", None, None]  # "type" is a reserved name
    assert [r["name"] for r in rows] == ["customs", "freight", None]


def test_integer_ids_and_types_in_relationships_land_as_text() -> None:
    """JSON:API ids are strings; an API that sends an integer must not fail the load."""
    records = [{"id": 7, "type": "container", "attributes": {"number": "A"},
                "relationships": {"shipment": {"data": {"id": 42, "type": "shipment"}}}}]
    row = flatten.containers_table(records, FETCHED).to_pylist()[0]
    assert (row["id"], row["shipment_id"]) == ("7", "42")


def test_pages_are_flattened_one_at_a_time_whatever_thread_fetched_them(monkeypatch) -> None:
    """Four fetching threads never flatten at once: their GIL hand-overs cost 2.6 times the CPU
    (see ``pages._FLATTENING``)."""
    body = orjson.dumps(reference_json("responses/container-with-shipment.json"))
    running, most = 0, 0
    count = threading.Lock()
    flatten_page = pages.python_page

    def probe(*args: Any, **kwargs: Any) -> pages.ParsedPage:
        nonlocal running, most
        with count:
            running += 1
            most = max(most, running)
        time.sleep(0.02)  # long enough for every other thread to arrive meanwhile
        try:
            return flatten_page(*args, **kwargs)
        finally:
            with count:
                running -= 1

    monkeypatch.setattr(pages, "python_page", probe)
    with ThreadPoolExecutor(4) as pool:
        parsed = list(pool.map(lambda _: pages.parse_page(body, "containers", FETCHED), range(8)))
    assert [p.tables["containers"].num_rows for p in parsed] == [1] * 8
    assert most == 1
