"""Test helper: a temp DuckDB warehouse with the terminal49.* tables (loader's exact names).

LFD columns are DATEs, as a load writes them; a test may give an LFD as the API's instant
(local midnight in UTC, ``2025-11-17T08:00:00Z``): it is stored as its calendar date in the
record's zone (``pipelines.terminal49.settings.LFD_ZONES``), as the flattener stores it.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import duckdb

from pipelines.terminal49.settings import LFD_ZONES

TS = "TIMESTAMPTZ"
CONTAINER_COLS = {
    "id": "VARCHAR",
    "number": "VARCHAR",
    "seal_number": "VARCHAR",
    "created_at": TS,
    "ref_numbers": "VARCHAR",
    "equipment_type": "VARCHAR",
    "equipment_length": "BIGINT",
    "equipment_height": "VARCHAR",
    "weight_in_lbs": "DOUBLE",
    "pickup_lfd": "DATE",
    "pickup_appointment_at": TS,
    "availability_known": "BOOLEAN",
    "available_for_pickup": "BOOLEAN",
    "pod_arrived_at": TS,
    "pod_discharged_at": TS,
    "pod_full_out_at": TS,
    "terminal_checked_at": TS,
    "final_destination_full_out_at": TS,
    "empty_terminated_at": TS,
    "pod_full_out_chassis_number": "VARCHAR",
    "location_at_pod_terminal": "VARCHAR",
    "pod_timezone": "VARCHAR",
    "final_destination_timezone": "VARCHAR",
    "empty_terminated_timezone": "VARCHAR",
    "pod_rail_carrier_scac": "VARCHAR",
    "ind_rail_carrier_scac": "VARCHAR",
    "pod_last_tracking_request_at": TS,
    "shipment_last_tracking_request_at": TS,
    "pod_rail_loaded_at": TS,
    "pod_rail_departed_at": TS,
    "ind_eta_at": TS,
    "ind_ata_at": TS,
    "ind_rail_unloaded_at": TS,
    "ind_facility_lfd_on": "DATE",
    "pickup_lfd_terminal": "DATE",
    "pickup_lfd_rail": "DATE",
    "pickup_lfd_line": "DATE",
    "current_status": "VARCHAR",
    "ssl_lfd": "DATE",
    "delivered_at": TS,
    "empty_out_at": TS,
    "pol_full_in_at": TS,
    "pol_vessel_loaded_at": TS,
    "pol_vessel_departed_at": TS,
    "rail_last_tracking_request_at": TS,
    "ind_facility_holds": "VARCHAR",
    "ind_facility_fees": "VARCHAR",
    "holds_at_pod_terminal_known": "BOOLEAN",
    "fees_at_pod_terminal_known": "BOOLEAN",
    "shipment_id": "VARCHAR",
    "pod_terminal_id": "VARCHAR",
    "pickup_facility_id": "VARCHAR",
    "fetched_at": TS,
    "_dlt_load_id": "VARCHAR",
    "_dlt_id": "VARCHAR",
}
SHIPMENT_COLS = {
    "id": "VARCHAR",
    "bill_of_lading_number": "VARCHAR",
    "normalized_number": "VARCHAR",
    "ref_numbers": "VARCHAR",
    "created_at": TS,
    "tags": "VARCHAR",
    **{
        c: "VARCHAR"
        for c in (
            "port_of_lading_locode",
            "port_of_lading_name",
            "port_of_discharge_locode",
            "port_of_discharge_name",
            "destination_locode",
            "destination_name",
            "shipping_line_scac",
            "shipping_line_name",
            "shipping_line_short_name",
            "customer_name",
            "pod_vessel_name",
            "pod_vessel_imo",
            "pod_voyage_number",
        )
    },
    **{
        c: TS
        for c in (
            "pol_etd_at",
            "pol_atd_at",
            "pod_eta_at",
            "pod_original_eta_at",
            "pod_ata_at",
            "destination_eta_at",
            "destination_ata_at",
            "pol_original_etd_at",
            "destination_original_eta_at",
        )
    },
    "pol_timezone": "VARCHAR",
    "pod_timezone": "VARCHAR",
    "destination_timezone": "VARCHAR",
    "line_tracking_last_attempted_at": TS,
    "line_tracking_last_succeeded_at": TS,
    "line_tracking_stopped_at": TS,
    "line_tracking_stopped_reason": "VARCHAR",
    **{
        c: "VARCHAR"
        for c in (
            "port_of_lading_id",
            "port_of_discharge_id",
            "destination_id",
            "pod_terminal_id",
            "destination_terminal_id",
        )
    },
    "fetched_at": TS,
}
TABLES = {
    "containers": CONTAINER_COLS,
    "shipments": SHIPMENT_COLS,
    "container_holds": {
        "container_id": "VARCHAR",
        "name": "VARCHAR",
        "status": "VARCHAR",
        "description": "VARCHAR",
    },
    "container_fees": {
        "container_id": "VARCHAR",
        "type": "VARCHAR",
        "amount": "DOUBLE",
        "currency_code": "VARCHAR",
    },
    "terminals": {
        "id": "VARCHAR",
        "type": "VARCHAR",
        "name": "VARCHAR",
        "nickname": "VARCHAR",
        "firms_code": "VARCHAR",
        "smdg_code": "VARCHAR",
        "port_id": "VARCHAR",
    },
    "ports": {
        "id": "VARCHAR",
        "type": "VARCHAR",
        "name": "VARCHAR",
        "code": "VARCHAR",
        "city": "VARCHAR",
        "country_code": "VARCHAR",
        "time_zone": "VARCHAR",
        "latitude": "DOUBLE",
        "longitude": "DOUBLE",
    },
}


def make_warehouse(path: Path, data: dict[str, list[dict[str, Any]]]) -> Path:
    """Create ``terminal49.*`` with the loader's columns in ``path`` and insert ``data`` rows."""
    con = duckdb.connect(str(path))
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute("CREATE SCHEMA IF NOT EXISTS terminal49")
        for table, cols in TABLES.items():
            ddl = ", ".join(f'"{c}" {t}' for c, t in cols.items())
            con.execute(f"CREATE OR REPLACE TABLE terminal49.{table} ({ddl})")
            for row in data.get(table, []):
                if table == "containers":
                    row = _lfds_as_dates(row)
                unknown = set(row) - set(cols)
                assert not unknown, f"{table}: unknown columns {unknown}"
                names = ", ".join(f'"{c}"' for c in row)
                marks = ", ".join("?" for _ in row)
                con.execute(
                    f"INSERT INTO terminal49.{table} ({names}) VALUES ({marks})", list(row.values())
                )
    finally:
        con.close()
    return path


def _lfds_as_dates(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with each LFD given as an instant turned into its local date."""
    out = dict(row)
    for name, zones in LFD_ZONES.items():
        value = out.get(name)
        if isinstance(value, str) and "T" in value:
            zone = next((str(out[z]) for z in zones if out.get(z)), "UTC")
            instant = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            out[name] = instant.astimezone(ZoneInfo(zone)).date()
    return out


def container(cid: str, **kw: object) -> dict[str, object]:
    """A container at Fenix (Los Angeles), available, discharged 2025-11-07; ``kw`` overrides."""
    row: dict[str, object] = {
        "id": cid,
        "number": cid.upper(),
        "shipment_id": "s-" + cid,
        "pod_terminal_id": "t-fenix",
        "equipment_type": "dry",
        "equipment_length": 40,
        "pod_timezone": "America/Los_Angeles",
        "availability_known": True,
        "available_for_pickup": True,
        "terminal_checked_at": "2025-11-14T15:00:00Z",
        "holds_at_pod_terminal_known": True,
        "fees_at_pod_terminal_known": False,
        "current_status": "available",
        "pod_discharged_at": "2025-11-07T18:00:00Z",
    }
    row.update(kw)
    return row
