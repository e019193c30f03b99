"""Views over ``terminal49.history`` that an analyst asks for (created by :func:`create_views`).

- ``terminal49.lfd_changes``: one row per posting, move or withdrawal of an LFD of a container,
  per source (the column: ``pickup_lfd_terminal``, ``pod_lfd_unified``, ...), as local dates,
  with ``days_moved`` (new minus old, NULL unless both are known), when it was seen and how;
  the binding LFD of the risk run is source ``lfd_binding``, with its ``binding_basis`` (the
  ``pod_lfd_*_selection`` and ``*_manual`` fields are in history, not in this view);
- ``terminal49.eta_reliability``: per carrier, port of discharge and month of actual arrival,
  the first ETA freetime saw against the actual arrival (shipments seen before they arrived);
- ``terminal49.charged_days``: one row per day charged (a local day after the LFD up to the day
  of full-out, or today while the box is in the yard), flagged when at any moment of that day
  history shows the box not available or under a hold with status ``hold``, or when the day
  ended before freetime first saw the container (then nothing is known about it);
- ``terminal49.free_time_used``: per container, discharge, first available, LFD and its basis,
  free time start and end, pickup, empty return, days charged and how many of them were
  flagged.

The LFD of the free-time views: with ``import_deadlines.pod`` (``has_pod_deadlines``) the
unified POD deadline, else the terminal's LFD, else the line's, else ``pickup_lfd``. LFD values
are local dates; an LFD column still holding instants is read in its zone.
"""

from __future__ import annotations

from collections.abc import Mapping

import duckdb

from pipelines.config import DATASET
from pipelines.history import HISTORY_TABLE, q
from pipelines.warehouse import column_types

D = q(DATASET)
RAIL_ZONE_FIELDS = ("pickup_lfd_rail", "ind_facility_lfd_on")


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    return column_types(con, DATASET, table)


def local_date_sql(expr: str, duck_type: str, zone: str) -> str:
    """``expr`` (a DATE, or an instant: local midnight in UTC) as a local calendar date."""
    if duck_type == "DATE":
        return expr
    return f"CAST(timezone({zone}, {expr}) AS DATE)"


def _text_date(value: str, zone: str) -> str:
    """A history text value of an LFD as a local date: ``2030-01-10`` is that day; an instant
    is read in ``zone``."""
    return (
        f"CASE WHEN length({value}) = 10 THEN TRY_CAST({value} AS DATE) ELSE "
        f"CAST(timezone({zone}, TRY_CAST({value} AS TIMESTAMPTZ)) AS DATE) END"
    )


def _binding(cols: Mapping[str, str]) -> tuple[str, str]:
    """SQL for the LFD (local date) and its basis, from the container row ``c``."""
    zone = "coalesce(c.pod_timezone, 'UTC')"
    legacy = [c for c in ("pickup_lfd_terminal", "pickup_lfd_line", "pickup_lfd") if c in cols]
    if not legacy:
        date, basis = "CAST(NULL AS DATE)", "CAST(NULL AS VARCHAR)"
    else:
        dates = [local_date_sql(f"c.{c}", cols[c], zone) for c in legacy]
        date = f"coalesce({', '.join(dates)})"
        whens = " ".join(
            f"WHEN {d} IS NOT NULL THEN '{c}'" for c, d in zip(legacy, dates, strict=True)
        )
        basis = f"CASE {whens} END"
    if "has_pod_deadlines" in cols and "pod_lfd_unified" in cols:
        unified = local_date_sql("c.pod_lfd_unified", cols["pod_lfd_unified"], zone)
        selection = (
            "'pod_' || coalesce(c.pod_lfd_unified_selection, 'unified')"
            if "pod_lfd_unified_selection" in cols
            else "'pod_unified'"
        )
        date = f"CASE WHEN c.has_pod_deadlines THEN {unified} ELSE {date} END"
        basis = f"CASE WHEN c.has_pod_deadlines THEN {selection} ELSE {basis} END"
    return date, basis


def create_views(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create the views; a no-op until ``history`` and ``containers`` exist. The SQL follows
    the columns the tables have (an LFD column may be a DATE or an instant)."""
    cols = _columns(con, "containers")
    if not cols or not _columns(con, HISTORY_TABLE):
        return
    h = f"{D}.{HISTORY_TABLE}"
    col = lambda name: f"c.{name}" if name in cols else "NULL"  # noqa: E731
    zone = (
        "CASE WHEN h.field IN ('pickup_lfd_rail', 'ind_facility_lfd_on') THEN "
        f"coalesce({col('final_destination_timezone')}, {col('pod_timezone')}, 'UTC') "
        f"ELSE coalesce({col('pod_timezone')}, 'UTC') END"
    )
    con.execute(f"""
        CREATE OR REPLACE VIEW {D}.lfd_changes AS
        SELECT h.entity_id AS container_id, c.number AS container_number, h.field AS source,
               {_text_date("h.old_value", zone)} AS old_lfd,
               {_text_date("h.new_value", zone)} AS new_lfd,
               date_diff('day', {_text_date("h.old_value", zone)},
                         {_text_date("h.new_value", zone)}) AS days_moved,
               CASE WHEN h.old_value IS NULL THEN 'posted'
                    WHEN h.new_value IS NULL THEN 'withdrawn' ELSE 'moved' END AS change,
               CASE WHEN h.field = 'lfd_binding' THEN
                 (SELECT arg_max(b.new_value, b.observed_at) FROM {h} b
                  WHERE b.entity = 'container' AND b.entity_id = h.entity_id
                    AND b.field = 'binding_basis' AND b.observed_at <= h.observed_at)
               END AS binding_basis,
               h.observed_at, h.how, h.notification_id
        FROM {h} h LEFT JOIN {D}.containers c ON c.id = h.entity_id
        WHERE h.entity = 'container' AND h.field LIKE '%lfd%'
          AND NOT (ends_with(h.field, '_selection') OR ends_with(h.field, '_manual'))
    """)
    lfd, basis = _binding(cols)
    pz = f"coalesce({col('pod_timezone')}, 'UTC')"
    out_at = col("pod_full_out_at")
    con.execute(f"""
        CREATE OR REPLACE VIEW {D}.charged_days AS
        WITH base AS (
            SELECT c.id AS container_id, {pz} AS zone, {lfd} AS lfd_date,
                   {
        local_date_sql(out_at, cols.get("pod_full_out_at", "DATE"), pz)
        if "pod_full_out_at" in cols
        else "CAST(NULL AS DATE)"
    } AS out_date,
                   {col("pod_discharged_at")} AS discharged_at,
                   (SELECT min(observed_at) FROM {h} f WHERE f.entity = 'container'
                      AND f.entity_id = c.id) AS first_seen_at
            FROM {D}.containers c
        ), days AS (
            SELECT container_id, zone, first_seen_at,
                   CAST(unnest(generate_series(lfd_date + 1,
                        coalesce(out_date, CAST(timezone(zone, now()) AS DATE)),
                        INTERVAL 1 DAY)) AS DATE) AS day
            FROM base WHERE lfd_date IS NOT NULL AND discharged_at IS NOT NULL
        ), segments AS (
            SELECT entity_id AS container_id, field, new_value, observed_at AS since,
                   lead(observed_at) OVER (PARTITION BY entity_id, field
                                           ORDER BY observed_at, load_id) AS until
            FROM {h}
            WHERE entity = 'container' AND (field IN ('current_status', 'available_for_pickup')
                                            OR field LIKE 'hold:%')
        ), blocking AS (
            SELECT container_id, since, until,
                   CASE WHEN field LIKE 'hold:%' THEN substr(field, 6) || ' hold'
                        ELSE 'not available' END AS reason
            FROM segments
            WHERE (field = 'current_status' AND new_value = 'not_available')
               OR (field = 'available_for_pickup' AND new_value = 'false')
               OR (field LIKE 'hold:%' AND list_contains(string_split(new_value, ','), 'hold'))
        ), bounded AS (
            SELECT d.*, timezone(d.zone, CAST(d.day AS TIMESTAMP)) AS day_start,
                   timezone(d.zone, CAST(d.day + 1 AS TIMESTAMP)) AS day_end
            FROM days d
        )
        SELECT b.container_id, b.day, b.day_start, b.day_end,
               b.first_seen_at IS NULL OR b.day_end <= b.first_seen_at AS before_first_seen,
               count(k.reason) > 0 AS not_available_or_held,
               string_agg(DISTINCT k.reason, ', ' ORDER BY k.reason) AS reasons
        FROM bounded b LEFT JOIN blocking k ON k.container_id = b.container_id
             AND k.since < b.day_end AND (k.until IS NULL OR k.until > b.day_start)
        GROUP BY ALL
    """)
    con.execute(f"""
        CREATE OR REPLACE VIEW {D}.free_time_used AS
        SELECT c.id AS container_id, c.number AS container_number, {pz} AS pod_timezone,
               (SELECT min(observed_at) FROM {h} f WHERE f.entity = 'container'
                  AND f.entity_id = c.id) AS first_seen_at,
               {col("pod_discharged_at")} AS discharged_at,
               (SELECT min(observed_at) FROM {h} f WHERE f.entity = 'container'
                  AND f.entity_id = c.id
                  AND ((f.field = 'current_status' AND f.new_value = 'available')
                       OR (f.field = 'available_for_pickup' AND f.new_value = 'true')))
                 AS first_available_at,
               {lfd} AS lfd_date, {basis} AS lfd_basis,
               CAST(timezone({pz}, {col("pod_discharged_at")}) AS DATE) + 1 AS free_time_start,
               {lfd} AS free_time_end,
               date_diff('day', CAST(timezone({pz}, {col("pod_discharged_at")}) AS DATE),
                         {lfd}) AS free_days,
               {out_at} AS picked_up_at, {col("empty_terminated_at")} AS empty_returned_at,
               (SELECT count(*) FROM {D}.charged_days d WHERE d.container_id = c.id)
                 AS days_charged,
               (SELECT count(*) FILTER (WHERE d.not_available_or_held) FROM {D}.charged_days d
                  WHERE d.container_id = c.id) AS days_charged_not_available,
               (SELECT count(*) FILTER (WHERE d.before_first_seen) FROM {D}.charged_days d
                  WHERE d.container_id = c.id) AS days_charged_before_first_seen
        FROM {D}.containers c
    """)
    if _columns(con, "shipments"):
        _eta_view(con, h)


def _eta_view(con: duckdb.DuckDBPyConnection, h: str) -> None:
    con.execute(f"""
        CREATE OR REPLACE VIEW {D}.eta_reliability AS
        WITH first_eta AS (
            SELECT entity_id AS shipment_id,
                   arg_min(TRY_CAST(new_value AS TIMESTAMPTZ), observed_at) AS first_eta_at,
                   min(observed_at) AS first_eta_seen_at
            FROM {h} WHERE entity = 'shipment' AND field = 'pod_eta_at'
              AND new_value IS NOT NULL
            GROUP BY entity_id
        ), per_shipment AS (
            SELECT s.id AS shipment_id, s.shipping_line_scac AS carrier_scac,
                   s.port_of_discharge_locode AS port_locode,
                   CAST(date_trunc('month', timezone('UTC', s.pod_ata_at)) AS DATE)
                     AS arrival_month,
                   date_diff('minute', f.first_eta_at, s.pod_ata_at) / 1440.0 AS error_days
            FROM {D}.shipments s JOIN first_eta f ON f.shipment_id = s.id
            WHERE s.pod_ata_at IS NOT NULL AND f.first_eta_seen_at < s.pod_ata_at
        )
        SELECT carrier_scac, port_locode, arrival_month, count(*) AS shipments,
               round(avg(error_days), 2) AS mean_delay_days,
               round(avg(abs(error_days)), 2) AS mean_abs_error_days,
               round(avg(CASE WHEN abs(error_days) <= 1 THEN 1.0 ELSE 0.0 END), 3)
                 AS share_within_1_day
        FROM per_shipment GROUP BY ALL
    """)
