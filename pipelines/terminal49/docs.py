"""Table and column comments, written into DuckDB so analysts find fields from SQL.

``SELECT table_name, comment FROM duckdb_tables() WHERE schema_name = 'terminal49'`` and
``duckdb_columns()`` show them. The README's section "The warehouse" sums up the tables.
"""

from __future__ import annotations

import duckdb

TABLE_COMMENTS = {
    "containers": "One row per container (GET /containers). LFD columns are DATEs: the local "
    "calendar date in pod_timezone (rail and inland LFDs: final_destination_timezone), whether "
    "the API sent a bare date or an instant; the value as sent is kept beside them.",
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
_LFD_WIRE = (
    "Sent as a bare date (that day) or as an instant (its date in the zone); a value that names "
    "no date is NULL here, its text in <column>__raw."
)


def _pod(path: str, what: str, date: bool = True) -> str:
    """The comment of the column of ``import_deadlines.pod.<path>`` (a date or not)."""
    zone = " Local date in pod_timezone (sent as a bare date or an instant)." if date else ""
    return f"import_deadlines.pod.{path}: {what}{zone} NULL when has_pod_deadlines is false."


COLUMN_COMMENTS: dict[str, dict[str, str]] = {
    "containers": {
        "id": "Terminal49 container id.",
        "number": "Container number (e.g. MSCU1234567).",
        "current_status": "new, on_ship, available, not_available, grounded, on_rail, picked_up, "
        "off_dock, delivered, dropped, loaded, empty_returned, awaiting_inland_transfer.",
        "pickup_lfd": "Coalesced last free day (prefers line, then terminal, then rail): local "
        f"date in pod_timezone. {_LFD_WIRE}",
        "pickup_lfd_wire": "pickup_lfd as the API sent it (text).",
        "ssl_lfd": f"Shipping line's LFD: local date in pod_timezone. {_LFD_WIRE}",
        "ssl_lfd_wire": "ssl_lfd as the API sent it (text).",
        "ind_facility_lfd_on": "LFD at the inland facility: local date in "
        f"final_destination_timezone (else pod_timezone, else UTC). {_LFD_WIRE}",
        "ind_facility_lfd_on_wire": "ind_facility_lfd_on as the API sent it (text).",
        "import_deadlines": "The API's import_deadlines object exactly as sent (JSON), pod "
        "included; its LFDs are the pickup_lfd_terminal/line/rail and pod_lfd_* columns.",
        "pickup_lfd_terminal": "Terminal LFD (import_deadlines.pickup_lfd_terminal): local date "
        f"in pod_timezone. {_LFD_WIRE}",
        "pickup_lfd_line": "Shipping line LFD (import_deadlines.pickup_lfd_line): local date in "
        f"pod_timezone. {_LFD_WIRE}",
        "pickup_lfd_rail": "Rail LFD (import_deadlines.pickup_lfd_rail): local date in "
        f"final_destination_timezone (else pod_timezone, else UTC). {_LFD_WIRE}",
        "has_pod_deadlines": "True when the API sent import_deadlines.pod (an object); then "
        "pod_lfd_unified is the POD deadline, with no fallback to the pickup_lfd* columns.",
        **{
            f"pod_lfd_{source}_{field}": _pod(
                f"{source}.{field}", what.format(whose), date=field != "manual"
            )
            for source, whose in (("line", "shipping line's"), ("facility", "terminal's"))
            for field, what in (
                ("original", "the {} first LFD."),
                ("current", "the {} current LFD."),
                (
                    "calculated",
                    "the {} LFD calculated from the tariff (shown only to eligible accounts).",
                ),
                ("manual", "true when the {} LFD is a manual override."),
            )
        },
        "pod_lfd_unified": _pod(
            "unified.current_value", "the POD deadline (NULL: unknown, never a legacy LFD)."
        ),
        "pod_lfd_unified_selection": _pod(
            "unified.current_selection",
            "the source pod_lfd_unified comes from (facility, line, line_calculated, ...).",
            False,
        ),
        "pod_lfd_unified_original": _pod(
            "unified.original_value", "the first unified POD deadline."
        ),
        "pod_lfd_unified_original_selection": _pod(
            "unified.original_selection", "the source of pod_lfd_unified_original.", False
        ),
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
    tables = dict(
        con.execute(
            "SELECT table_name, comment FROM duckdb_tables() WHERE schema_name = ?", [dataset]
        ).fetchall()
    )
    columns = {
        (t, c): text
        for t, c, text in con.execute(
            "SELECT table_name, column_name, comment FROM duckdb_columns() WHERE schema_name = ?",
            [dataset],
        ).fetchall()
    }
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
