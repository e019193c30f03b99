"""The flattener: JSON:API resources to typed Arrow tables. Every LFD lands as its local
calendar date whatever its wire form, ``import_deadlines.pod`` as typed columns, and a value of
an unexpected type lands beside its column (``__raw``) instead of failing the page."""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson
import pyarrow as pa
import pytest
from conftest import reference_json

from pipelines.terminal49 import flatten, settings

pytestmark = pytest.mark.fast

FETCHED = dt.datetime(2026, 11, 20, 12, tzinfo=dt.UTC)
NEW_YORK, LOS_ANGELES, TOKYO = "America/New_York", "America/Los_Angeles", "Asia/Tokyo"


def _container(cid: str = "c1", **attributes: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "number": "MSCU1234567",
        "equipment_length": 40,
        "pod_discharged_at": "2026-09-20T14:24:00Z",
        "pod_timezone": NEW_YORK,
        "final_destination_timezone": None,
        "import_deadlines": {
            "pickup_lfd_terminal": None,
            "pickup_lfd_line": None,
            "pickup_lfd_rail": None,
        },
        "holds_at_pod_terminal": [],
    }
    attrs.update(attributes)
    return {
        "id": cid,
        "type": "container",
        "attributes": attrs,
        "relationships": {"shipment": {"data": {"id": "s1", "type": "shipment"}}},
    }


def _rows(*records: dict[str, Any]) -> list[dict[str, Any]]:
    return flatten.containers_table(list(records), FETCHED).to_pylist()


def _pod(line: Any = None, facility: Any = None, unified: Any = None) -> dict[str, Any]:
    empty = {"original": None, "current": None, "calculated": None, "manual": False}
    return {
        "line": {**empty, **(line or {})},
        "facility": {**empty, **(facility or {})},
        "unified": {
            "original_value": None,
            "original_selection": None,
            "current_value": None,
            "current_selection": None,
            **(unified or {}),
        },
    }


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


#: Every DATE column made of an LFD.
DATES = [
    *settings.LFD_ATTRIBUTES,
    *settings.IMPORT_DEADLINES,
    *(name for name, (_, _, kind) in settings.POD_DEADLINES.items() if kind == settings.DATE),
]


def _every_lfd(cid: str, zone: str, value: str) -> dict[str, Any]:
    """A container whose every LFD field is ``value``, in ``zone`` (port and inland)."""
    both = {"original": value, "current": value, "calculated": value}
    return _container(
        cid,
        pod_timezone=zone,
        final_destination_timezone=zone,
        pickup_lfd=value,
        ssl_lfd=value,
        ind_facility_lfd_on=value,
        import_deadlines={
            "pickup_lfd_terminal": value,
            "pickup_lfd_line": value,
            "pickup_lfd_rail": value,
            "pod": _pod(
                line=both, facility=both, unified={"current_value": value, "original_value": value}
            ),
        },
    )


@pytest.mark.parametrize(
    ("zone", "instant"),
    [
        (NEW_YORK, "2026-09-24T04:00:00Z"),  # local midnight, EDT
        (LOS_ANGELES, "2026-09-24T07:00:00Z"),  # west of UTC: UTC midnight is the 23rd there
        (TOKYO, "2026-09-23T15:00:00Z"),  # east of UTC: the UTC date is the day before
    ],
)
def test_a_bare_date_and_its_instant_give_the_same_local_date(zone: str, instant: str) -> None:
    sent = ("2026-09-24", instant)
    rows = _rows(*(_every_lfd(f"c-{n}", zone, value) for n, value in enumerate(sent)))
    for row, value in zip(rows, sent, strict=True):
        assert {name: row[name] for name in DATES} == dict.fromkeys(DATES, dt.date(2026, 9, 24))
        for name in settings.LFD_ATTRIBUTES:
            assert row[f"{name}_wire"] == value
        assert orjson.loads(row["import_deadlines"])["pickup_lfd_line"] == value
        assert not [k for k in row if k.endswith("__raw")]


def test_each_lfd_is_read_in_its_own_zone() -> None:
    """Port LFDs in pod_timezone; the rail and inland-facility LFDs in
    final_destination_timezone, else pod_timezone, else UTC."""
    instant = "2026-09-24T05:00:00Z"  # the 24th in UTC and in Chicago, the 23rd in Los Angeles
    both = _container(
        "both",
        pod_timezone=LOS_ANGELES,
        final_destination_timezone="America/Chicago",
        pickup_lfd=instant,
        ind_facility_lfd_on=instant,
        import_deadlines={
            "pickup_lfd_line": instant,
            "pickup_lfd_rail": instant,
            "pod": _pod(unified={"current_value": instant}),
        },
    )
    pod_only = _container(
        "pod-only",
        pod_timezone=LOS_ANGELES,
        ind_facility_lfd_on=instant,
        import_deadlines={"pickup_lfd_rail": instant},
    )
    neither = _container(
        "neither", pod_timezone=None, pickup_lfd=instant, ind_facility_lfd_on=instant
    )
    rows = {r["id"]: r for r in _rows(both, pod_only, neither)}
    the_23rd, the_24th = dt.date(2026, 9, 23), dt.date(2026, 9, 24)
    assert rows["both"]["pickup_lfd"] == rows["both"]["pickup_lfd_line"] == the_23rd
    assert rows["both"]["pod_lfd_unified"] == the_23rd
    assert rows["both"]["pickup_lfd_rail"] == rows["both"]["ind_facility_lfd_on"] == the_24th
    assert rows["pod-only"]["pickup_lfd_rail"] == the_23rd
    assert rows["pod-only"]["ind_facility_lfd_on"] == the_23rd
    assert rows["neither"]["pickup_lfd"] == rows["neither"]["ind_facility_lfd_on"] == the_24th


def test_an_lfd_that_names_no_date_lands_beside_its_column() -> None:
    """Text that is no date, a number, an instant without offset, an impossible date, or an
    instant whose zone is unknown: NULL in the date column, the value in ``__raw``, and the
    page still lands. A bare date needs no zone: it lands even where the zone is unknown."""
    odd = _container(
        "odd",
        pickup_lfd="soon",
        ssl_lfd=20260924,
        import_deadlines={
            "pickup_lfd_terminal": "2026-09-24T00:00:00",
            "pickup_lfd_line": "2026-02-30",
            "pod": _pod(facility={"current": "tomorrow", "manual": "yes"}),
        },
    )
    unknown_zone = _container(
        "unknown-zone",
        pod_timezone="Mars/Olympus",
        pickup_lfd="2026-09-24",
        ssl_lfd="2026-09-24T04:00:00Z",
    )
    good = _container("good", pickup_lfd="2026-09-24")
    rows = {r["id"]: r for r in _rows(odd, unknown_zone, good)}
    expected_raw = {
        "pickup_lfd": "soon",
        "ssl_lfd": "20260924",
        "pickup_lfd_terminal": "2026-09-24T00:00:00",
        "pickup_lfd_line": "2026-02-30",
        "pod_lfd_facility_current": "tomorrow",
        "pod_lfd_facility_manual": '"yes"',
    }
    for column, raw in expected_raw.items():
        assert rows["odd"][column] is None
        assert rows["odd"][f"{column}__raw"] == raw
        assert rows["good"][f"{column}__raw"] is None
    assert rows["odd"]["pickup_lfd_wire"] == "soon"
    assert rows["odd"]["ssl_lfd_wire"] == "20260924"
    assert rows["unknown-zone"]["pickup_lfd"] == dt.date(2026, 9, 24)
    assert rows["unknown-zone"]["ssl_lfd"] is None
    assert rows["unknown-zone"]["ssl_lfd__raw"] == "2026-09-24T04:00:00Z"
    assert rows["good"]["pickup_lfd"] == dt.date(2026, 9, 24)


def test_the_pod_deadlines_land_typed_and_whole() -> None:
    deadlines = {
        "pickup_lfd_terminal": None,
        "pickup_lfd_line": None,
        "pickup_lfd_rail": "2099-12-30",
        "pod": {
            "line": {
                "original": "2026-09-22",
                "current": "2026-09-26T07:00:00Z",
                "calculated": None,
                "manual": True,
            },
            "facility": {
                "original": None,
                "current": "2026-09-25T07:00:00Z",
                "calculated": "2026-09-27",
                "manual": False,
            },
            "unified": {
                "original_value": "2026-09-22",
                "original_selection": "line",
                "current_value": "2026-09-25T07:00:00Z",
                "current_selection": "facility",
            },
        },
    }
    with_pod = _container("pod", pod_timezone=LOS_ANGELES, import_deadlines=deadlines)
    withheld = _container(
        "withheld",
        import_deadlines={
            "pod": _pod(
                line={"current": "2026-09-26"}, unified={"current_selection": "line_calculated"}
            )
        },
    )
    without = _container("without")
    odd_pod = _container("odd-pod", import_deadlines={"pod": "n/a"})
    no_deadlines = _container("no-deadlines", import_deadlines=None)
    table = flatten.containers_table([with_pod, withheld, without, odd_pod, no_deadlines], FETCHED)
    for name, (_, _, kind) in settings.POD_DEADLINES.items():
        assert table.schema.field(name).type == kind, name
    assert table.schema.field("has_pod_deadlines").type == pa.bool_()
    rows = {r["id"]: r for r in table.to_pylist()}
    pod = rows["pod"]
    assert orjson.loads(pod["import_deadlines"]) == deadlines
    assert pod["has_pod_deadlines"] is True
    assert pod["pickup_lfd_rail"] == dt.date(2099, 12, 30)
    assert {k: v for k, v in pod.items() if k.startswith("pod_lfd_")} == {
        "pod_lfd_line_original": dt.date(2026, 9, 22),
        "pod_lfd_line_current": dt.date(2026, 9, 26),
        "pod_lfd_line_calculated": None,
        "pod_lfd_line_manual": True,
        "pod_lfd_facility_original": None,
        "pod_lfd_facility_current": dt.date(2026, 9, 25),
        "pod_lfd_facility_calculated": dt.date(2026, 9, 27),
        "pod_lfd_facility_manual": False,
        "pod_lfd_unified": dt.date(2026, 9, 25),
        "pod_lfd_unified_selection": "facility",
        "pod_lfd_unified_original": dt.date(2026, 9, 22),
        "pod_lfd_unified_original_selection": "line",
    }
    assert rows["withheld"]["has_pod_deadlines"] is True
    assert rows["withheld"]["pod_lfd_unified"] is None  # withheld: unknown, stays NULL
    assert rows["withheld"]["pod_lfd_unified_selection"] == "line_calculated"
    assert rows["withheld"]["pod_lfd_line_current"] == dt.date(2026, 9, 26)
    for cid in ("without", "odd-pod", "no-deadlines"):
        assert rows[cid]["has_pod_deadlines"] is False
        assert all(rows[cid][name] is None for name in settings.POD_DEADLINES), cid
    assert orjson.loads(rows["odd-pod"]["import_deadlines"]) == {"pod": "n/a"}
    assert rows["no-deadlines"]["import_deadlines"] is None


def test_odd_values_land_beside_their_columns() -> None:
    odd = _container(
        "odd",
        equipment_length="40",  # a number sent as text: parsed
        seal_number=12345,  # a number where text is declared: kept as text in __raw
        pod_discharged_at="yesterday",  # not an instant: NULL plus __raw
        brand_new_attribute={"nested": [1, 2]},  # unknown: lands as JSON text
    )
    table = flatten.containers_table([_container(), odd], FETCHED)
    rows = table.to_pylist()
    assert rows[1]["equipment_length"] == 40
    assert rows[1]["seal_number__raw"] == "12345"
    assert rows[1]["pod_discharged_at"] is None
    assert rows[1]["pod_discharged_at__raw"] == "yesterday"
    assert rows[1]["brand_new_attribute"] == '{"nested":[1,2]}'
    assert rows[0]["pod_discharged_at"] == dt.datetime(2026, 9, 20, 14, 24, tzinfo=dt.UTC)
    assert rows[0]["pod_discharged_at__raw"] is None
    names = table.column_names  # the raw text right after its column
    assert names[names.index("pod_discharged_at") + 1] == "pod_discharged_at__raw"
    assert "terminal_checked_at__raw" not in names


def test_numbers_and_instants_sent_as_text_are_read() -> None:
    ports = [{"id": "p1", "type": "port", "attributes": {"code": "USCHS", "latitude": "32.83"}}]
    assert flatten.ports_table(ports, FETCHED).column("latitude").to_pylist() == [32.83]
    row = _rows(_container(terminal_checked_at="2025-11-14T03:00:00+00:00"))[0]
    assert row["terminal_checked_at"] == dt.datetime(2025, 11, 14, 3, tzinfo=dt.UTC)


def test_numbers_an_integer_column_cannot_hold_land_as_text() -> None:
    """pyarrow truncates 40.5 into an int64 column and overflows on 2**63: both are kept whole
    in ``__raw`` instead (a whole float such as 40.0 is read as the integer), and only the odd
    value leaves the typed column."""
    pages = []
    for n, value in enumerate([40.5, 2**63, 40.0]):  # 2**63: one past int64, as orjson reads it
        # brand_new_count: an unknown attribute, never lost either
        odd = _container(f"odd-{n}", equipment_length=value, brand_new_count=value)
        pages.append(_rows(_container(), odd))
    fraction, huge, whole = (page[1] for page in pages)
    for page in pages:  # the other container of the page keeps its value, typed
        assert page[0]["equipment_length"] == 40
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
    types = flatten.ColumnTypes.from_duckdb(
        [
            ("containers", "gate_code", "BIGINT"),
            ("containers", "berth", "VARCHAR"),
            ("containers", "ratio", "DOUBLE"),
            ("containers", "odd", "STRUCT(a INTEGER)"),  # a type it does not map: left alone
        ]
    )
    page = pa.table(
        {
            "id": ["a", "b", "c"],
            "gate_code": ["12", "A7", None],  # text now: numbers read, the rest kept raw
            "gate_code__raw": [None, None, "kept"],
            "berth": [7, 8, None],  # numbers where text is stored
            "ratio": [1, 2, 3],  # integers where doubles are stored
            "new_flag": [True, None, False],  # new: its type is remembered
        }
    )
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
        {
            "id": "c1",
            "attributes": {
                "holds_at_pod_terminal": [
                    {
                        "name": "customs",
                        "status": "hold",
                        "placed_at": "2026-01-02T03:04:05Z",
                        "type": "x",
                    },
                    {"name": "freight", "status": "pending"},
                ]
            },
        },
        {"id": "c2", "attributes": {"holds_at_pod_terminal": []}},
    ]
    rows = flatten.holds_table(records, FETCHED).to_pylist()
    assert [(r["container_id"], r["position"], r["_deleted"]) for r in rows] == [
        ("c1", 0, False),
        ("c1", 1, False),
        ("c2", -1, True),
    ]
    assert [r["placed_at"] for r in rows] == ["2026-01-02T03:04:05Z", None, None]
    assert [r["attr_type"] for r in rows] == ["x", None, None]  # "type" is a reserved name
    assert [r["name"] for r in rows] == ["customs", "freight", None]


def test_integer_ids_and_types_in_relationships_land_as_text() -> None:
    """JSON:API ids are strings; an API that sends an integer must not fail the load."""
    records = [
        {
            "id": 7,
            "type": "container",
            "attributes": {"number": "A"},
            "relationships": {"shipment": {"data": {"id": 42, "type": "shipment"}}},
        }
    ]
    row = flatten.containers_table(records, FETCHED).to_pylist()[0]
    assert (row["id"], row["shipment_id"]) == ("7", "42")


def test_declared_columns_keep_their_type_whatever_the_warehouse_has() -> None:
    """A warehouse from before LFDs were dates has them as TIMESTAMPTZ: the page keeps its
    DATE columns (the write migrates the warehouse), and undeclared columns still conform."""
    lfds = ("pickup_lfd", "pickup_lfd_terminal", "pod_lfd_unified", "ssl_lfd")
    types = flatten.ColumnTypes.from_duckdb(
        [
            *(("containers", name, "TIMESTAMP WITH TIME ZONE") for name in lfds),
            ("containers", "equipment_length", "VARCHAR"),
            ("containers", "gate_code", "BIGINT"),
        ]
    )
    lfd = _container(
        pickup_lfd="2026-09-24",
        ssl_lfd="2026-09-24T04:00:00Z",
        gate_code="12",
        import_deadlines={
            "pickup_lfd_terminal": "2026-09-24",
            "pod": _pod(unified={"current_value": "2026-09-24"}),
        },
    )
    out = types.conform("containers", flatten.containers_table([lfd], FETCHED))
    for name in lfds:
        assert out.schema.field(name).type == pa.date32(), name
        assert out.column(name).to_pylist() == [dt.date(2026, 9, 24)]
    assert out.schema.field("equipment_length").type == pa.int64()  # declared: as flattened
    assert out.column("gate_code").to_pylist() == [12]  # undeclared: conformed to BIGINT
    assert not [n for n in out.column_names if n.endswith("__raw")]
