"""Constants of the Terminal49 source: endpoints, paging, includes and the typed columns.

Column types are declared here once; :mod:`.flatten` turns JSON:API records into Arrow tables
with these types, and any attribute not listed here still lands (as a new column, typed by its
values), so an attribute the API adds tomorrow never fails a load.
"""

from __future__ import annotations

import pyarrow as pa

from pipelines.config import DEFAULT_RATE_WINDOW_SECONDS

PAGE_SIZE = 100  # asked for; the API caps it (containers 50, shipments 100): see .scan
BATCH_RECORDS = 5_000  # records flattened before handing dlt one item per table
CONTAINERS_PATH = "/containers"
SHIPMENTS_PATH = "/shipments"
# Containers' shipments come from the /shipments scan (all of them, with their ports and
# terminals), so the container scan does not ask for them again: a page is then ~320 kB instead
# of ~510 kB, which the API renders and the client parses faster. A load without the shipments
# scan asks for them here (CONTAINER_INCLUDE_WITH_SHIPMENT). Included shipments are merged
# either way.
CONTAINER_INCLUDE = "pod_terminal,pickup_facility"
CONTAINER_INCLUDE_WITH_SHIPMENT = "shipment,pod_terminal,pickup_facility"
SHIPMENT_INCLUDE = "pod_terminal,port_of_lading,port_of_discharge,destination,destination_terminal"

# Transport defaults: a page of 100 containers with includes is ~300 kB.
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
MAX_ATTEMPTS = 8  # per request, for 5xx, dropped connections and truncated bodies (see stall)
UNREACHABLE_ATTEMPTS = 3  # connection refused / DNS before the API ever answered: a wrong URL
MAX_RATE_LIMITED = 50  # 429 answers tolerated for one request before giving up
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0
DEFAULT_CONCURRENCY = 4
RATE_WINDOW_S = DEFAULT_RATE_WINDOW_SECONDS  # the API's rolling window
RATE_WINDOW_MARGIN_S = 0.5  # send a little later than the window allows: clocks and latency differ

TS = pa.timestamp("us", tz="UTC")
JSON = "json"  # marker: serialised to JSON text, typed `json` for dlt (DuckDB JSON)
DATE = pa.date32()  # a local calendar date (LFDs), never an instant

CONTAINER_ATTRIBUTES: dict[str, pa.DataType | str] = {
    "number": pa.string(),
    "seal_number": pa.string(),
    "created_at": TS,
    "ref_numbers": JSON,
    "equipment_type": pa.string(),
    "equipment_length": pa.int64(),
    "equipment_height": pa.string(),
    "weight_in_lbs": pa.float64(),
    "pickup_lfd": DATE,
    "pickup_appointment_at": TS,
    "availability_known": pa.bool_(),
    "available_for_pickup": pa.bool_(),
    "pod_arrived_at": TS,
    "pod_discharged_at": TS,
    "pod_full_out_at": TS,
    "terminal_checked_at": TS,
    "pod_full_out_chassis_number": pa.string(),
    "location_at_pod_terminal": pa.string(),
    "final_destination_full_out_at": TS,
    "empty_terminated_at": TS,
    "pod_timezone": pa.string(),
    "final_destination_timezone": pa.string(),
    "empty_terminated_timezone": pa.string(),
    "pod_rail_carrier_scac": pa.string(),
    "ind_rail_carrier_scac": pa.string(),
    "pod_last_tracking_request_at": TS,
    "shipment_last_tracking_request_at": TS,
    "pod_rail_loaded_at": TS,
    "pod_rail_departed_at": TS,
    "ind_eta_at": TS,
    "ind_ata_at": TS,
    "ind_rail_unloaded_at": TS,
    "ind_facility_lfd_on": DATE,
    "current_status": pa.string(),
    "import_deadlines": JSON,  # whole, as sent; its LFDs also land as the columns below
    # live-only attributes (not in the interface document, seen in production)
    "ssl_lfd": DATE,
    "delivered_at": TS,
    "empty_out_at": TS,
    "pol_full_in_at": TS,
    "pol_vessel_loaded_at": TS,
    "pol_vessel_departed_at": TS,
    "rail_last_tracking_request_at": TS,
    "ind_facility_holds": JSON,
    "ind_facility_fees": JSON,
}
# LFDs (last free days) are local calendar dates. Each is read in the zone named by the first
# of its zone attributes that is set (UTC when none is): a bare date ("2026-09-24") is that day,
# an instant is its date in that zone.
POD_ZONE = ("pod_timezone",)
INLAND_ZONE = ("final_destination_timezone", "pod_timezone")
# Container attributes that are LFDs: a DATE column each, plus `<name>_wire` (the value as sent).
LFD_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "pickup_lfd": POD_ZONE,
    "ind_facility_lfd_on": INLAND_ZONE,
    "ssl_lfd": POD_ZONE,
}
WIRE_SUFFIX = "_wire"
# `import_deadlines`' LFDs, a DATE column each (the object itself lands whole as JSON).
IMPORT_DEADLINES: dict[str, tuple[str, ...]] = {
    "pickup_lfd_terminal": POD_ZONE,
    "pickup_lfd_rail": INLAND_ZONE,
    "pickup_lfd_line": POD_ZONE,
}
# `import_deadlines.pod`: column -> (object in `pod`, its field, type); dates in POD_ZONE.
# Every column is NULL for a container without a `pod` object; HAS_POD_DEADLINES says which.
HAS_POD_DEADLINES = "has_pod_deadlines"
POD_DEADLINES: dict[str, tuple[str, str, pa.DataType]] = {
    **{
        f"pod_lfd_{source}_{field}": (source, field, pa.bool_() if field == "manual" else DATE)
        for source in ("line", "facility")
        for field in ("original", "current", "calculated", "manual")
    },
    "pod_lfd_unified": ("unified", "current_value", DATE),
    "pod_lfd_unified_selection": ("unified", "current_selection", pa.string()),
    "pod_lfd_unified_original": ("unified", "original_value", DATE),
    "pod_lfd_unified_original_selection": ("unified", "original_selection", pa.string()),
}
# Every container LFD column (a DATE) and the attributes naming the zone its instants are read in.
LFD_ZONES: dict[str, tuple[str, ...]] = {
    **LFD_ATTRIBUTES,
    **IMPORT_DEADLINES,
    **{name: POD_ZONE for name, (_, _, kind) in POD_DEADLINES.items() if kind == DATE},
}
# Arrays that become child tables; the container row keeps whether the API reported them.
CONTAINER_CHILD_ARRAYS = ("holds_at_pod_terminal", "fees_at_pod_terminal")
CONTAINER_RELATIONSHIPS = ("shipment", "pod_terminal", "pickup_facility")

SHIPMENT_ATTRIBUTES: dict[str, pa.DataType | str] = {
    "bill_of_lading_number": pa.string(),
    "normalized_number": pa.string(),
    "ref_numbers": JSON,
    "created_at": TS,
    "tags": JSON,
    "port_of_lading_locode": pa.string(),
    "port_of_lading_name": pa.string(),
    "port_of_discharge_locode": pa.string(),
    "port_of_discharge_name": pa.string(),
    "destination_locode": pa.string(),
    "destination_name": pa.string(),
    "shipping_line_scac": pa.string(),
    "shipping_line_name": pa.string(),
    "shipping_line_short_name": pa.string(),
    "customer_name": pa.string(),
    "pod_vessel_name": pa.string(),
    "pod_vessel_imo": pa.string(),
    "pod_voyage_number": pa.string(),
    "pol_etd_at": TS,
    "pol_atd_at": TS,
    "pod_eta_at": TS,
    "pod_original_eta_at": TS,
    "pod_ata_at": TS,
    "destination_eta_at": TS,
    "destination_ata_at": TS,
    "pol_timezone": pa.string(),
    "pod_timezone": pa.string(),
    "destination_timezone": pa.string(),
    "line_tracking_last_attempted_at": TS,
    "line_tracking_last_succeeded_at": TS,
    "line_tracking_stopped_at": TS,
    "line_tracking_stopped_reason": pa.string(),
    # live-only
    "pol_original_etd_at": TS,
    "destination_original_eta_at": TS,
}
SHIPMENT_RELATIONSHIPS = (
    "port_of_lading",
    "port_of_discharge",
    "destination",
    "pod_terminal",
    "destination_terminal",
    "line_tracking_stopped_by_user",
)

TERMINAL_ATTRIBUTES: dict[str, pa.DataType | str] = {
    "name": pa.string(),
    "nickname": pa.string(),
    "firms_code": pa.string(),
    "smdg_code": pa.string(),
    "bic_facility_code": pa.string(),
    "provided_data": JSON,
    "street": pa.string(),
    "city": pa.string(),
    "state": pa.string(),
    "state_abbr": pa.string(),
    "zip": pa.string(),
    "country": pa.string(),
    "facility_type": pa.string(),
}
TERMINAL_TYPES = ("terminal", "rail_terminal")
TERMINAL_RELATIONSHIPS = ("port",)

PORT_ATTRIBUTES: dict[str, pa.DataType | str] = {
    "name": pa.string(),
    "code": pa.string(),
    "city": pa.string(),
    "state_abbr": pa.string(),
    "country_code": pa.string(),
    "time_zone": pa.string(),
    "latitude": pa.float64(),
    "longitude": pa.float64(),
}
PORT_TYPES = ("port", "metro_area")

# Transport and estimated events (webhook notifications and /containers/{id}/transport_events).
TRANSPORT_EVENT_ATTRIBUTES: dict[str, pa.DataType | str] = {
    "event": pa.string(),
    "timestamp": TS,
    "timezone": pa.string(),
    "location_locode": pa.string(),
    "voyage_number": pa.string(),
    "data_source": pa.string(),
    "value": pa.string(),
    "created_at": TS,
    "invalidated_at": TS,
}
TRANSPORT_EVENT_RELATIONSHIPS = (
    "container",
    "shipment",
    "previous_version",
    "vessel",
    "location",
    "terminal",
)
ESTIMATED_EVENT_ATTRIBUTES: dict[str, pa.DataType | str] = {
    "event": pa.string(),
    "estimated_timestamp": TS,
    "timezone": pa.string(),
    "location_locode": pa.string(),
    "voyage_number": pa.string(),
    "data_source": pa.string(),
    "created_at": TS,
}
ESTIMATED_EVENT_RELATIONSHIPS = ("shipment", "port", "vessel")

HOLD_COLUMNS = ("name", "status", "description")
FEE_COLUMNS = ("type", "amount", "currency_code")

# The columns each table declares (attributes and the columns made of them): their type is the
# one declared here, whatever type an older warehouse has for them (see flatten.ColumnTypes).
DECLARED_COLUMNS: dict[str, frozenset[str]] = {
    "containers": frozenset(
        (
            *CONTAINER_ATTRIBUTES,
            *(name + WIRE_SUFFIX for name in LFD_ATTRIBUTES),
            *IMPORT_DEADLINES,
            HAS_POD_DEADLINES,
            *POD_DEADLINES,
        )
    ),
    "container_holds": frozenset(HOLD_COLUMNS),
    "container_fees": frozenset(FEE_COLUMNS),
    "shipments": frozenset(SHIPMENT_ATTRIBUTES),
    "terminals": frozenset(TERMINAL_ATTRIBUTES),
    "ports": frozenset(PORT_ATTRIBUTES),
}

# Column names the flattener writes itself; an attribute with one of these names is renamed
# with this prefix rather than overwriting the resource's own identity.
RESERVED_PREFIX = "attr_"
