"""Table and column comments, written into DuckDB so analysts find fields from SQL.

``SELECT table_name, comment FROM duckdb_tables() WHERE schema_name = 'terminal49'`` and
``duckdb_columns()`` show them. The README's schema section is generated from the same text.
"""

from __future__ import annotations

import duckdb

TABLE_COMMENTS = {
    "containers": "One row per container (GET /containers). LFD columns are local dates "
    "encoded as local midnight in UTC; see pod_timezone / final_destination_timezone.",
    "shipments": "One row per shipment (bill of lading), from /shipments and from containers' "
    "included shipments, merged on id.",
    "container_holds": "Current holds at the port terminal, one row per (container, position "
    "in the list). A cleared hold has no row. status: hold blocks pickup, pending is a warning.",
    "container_fees": "Fees reported by the port terminal, one row per (container, position "
    "in the list). The 'total' row repeats the sum of the others: drop it before summing.",
    "terminals": "Port and rail terminals referenced by containers and shipments.",
    "ports": "Ports (UN/LOCODE) and metro areas referenced by shipments.",
}

_CHILD_FETCHED_AT = (
    "The fetch of the container these rows come from (UTC); only its newest fetch's rows are kept."
)
COLUMN_COMMENTS: dict[str, dict[str, str]] = {
    "containers": {
        "id": "Terminal49 container id.",
        "number": "Container number (e.g. MSCU1234567).",
        "current_status": "new, on_ship, available, not_available, grounded, on_rail, picked_up, "
        "off_dock, delivered, dropped, loaded, empty_returned, awaiting_inland_transfer.",
        "pickup_lfd": "Coalesced last free day (prefers line, then terminal, then rail).",
        "pickup_lfd_terminal": "Terminal LFD: local date in pod_timezone, as local midnight UTC.",
        "pickup_lfd_rail": "Rail LFD: local date in final_destination_timezone.",
        "pickup_lfd_line": "Shipping line LFD: local date (final_destination_timezone or "
        "pod_timezone).",
        "available_for_pickup": "Terminal says the box can be picked up (when availability_known).",
        "holds_at_pod_terminal_known": "False when the API reported holds as null.",
        "fees_at_pod_terminal_known": "False when the API reported fees as null (not reported).",
        "shipment_id": "FK to shipments.id.",
        "pod_terminal_id": "FK to terminals.id: the terminal at the port of discharge.",
        "pickup_facility_id": "FK to terminals.id: where to pick up, when known.",
        "terminal_checked_at": "When the terminal was last checked; older than 7 days = stale.",
        "fetched_at": "When freetime fetched this version of the record (UTC).",
    },
    "container_holds": {"fetched_at": _CHILD_FETCHED_AT},
    "container_fees": {"fetched_at": _CHILD_FETCHED_AT},
    "shipments": {
        "pod_eta_at": "Estimated arrival at the port of discharge (shipment-owned field).",
        "pod_original_eta_at": "First ETA reported by the line; compare for ETA slip.",
        "customer_name": "The customer the shipment is tracked for.",
        "line_tracking_stopped_at": "When line tracking stopped (see the reason column).",
    },
}


def apply_comments(con: duckdb.DuckDBPyConnection, dataset: str) -> int:
    """Write the comments of the tables and columns of ``dataset`` that exist, where the
    warehouse's comment differs; return how many were written.

    A repeat load finds them all in place and writes nothing (it used to rewrite about 50
    comments each time, and the write ended in a checkpoint).
    """
    tables = dict(con.execute(
        "SELECT table_name, comment FROM duckdb_tables() WHERE schema_name = ?", [dataset]
    ).fetchall())
    columns = {(t, c): text for t, c, text in con.execute(
        "SELECT table_name, column_name, comment FROM duckdb_columns() WHERE schema_name = ?",
        [dataset],
    ).fetchall()}
    statements = [
        f'COMMENT ON TABLE "{dataset}"."{table}" IS {_lit(text)}'
        for table, text in TABLE_COMMENTS.items()
        if table in tables and tables[table] != text
    ] + [
        f'COMMENT ON COLUMN "{dataset}"."{table}"."{column}" IS {_lit(text)}'
        for table, named in COLUMN_COMMENTS.items()
        for column, text in named.items()
        if (table, column) in columns and columns[table, column] != text
    ]
    for statement in statements:
        con.execute(statement)
    return len(statements)


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
