"""Views over ``terminal49.history`` that an analyst asks for (created by :func:`create_views`).

- ``terminal49.lfd_changes``: one row per posting, move or withdrawal of an LFD of a container,
  per source (the column: ``pickup_lfd_terminal``, ``pod_lfd_unified``, ...), as local dates,
  with ``days_moved`` (new minus old, NULL unless both are known), when it was seen and how;
  the binding LFD of the risk run is source ``lfd_binding``, with its ``binding_basis`` (the
  ``pod_lfd_*_selection`` and ``*_manual`` fields are in history, not in this view);
- ``terminal49.eta_reliability``: per carrier, port of discharge and month of actual arrival,
  the first ETA freetime saw against the actual arrival (shipments seen before they arrived);
- ``terminal49.charged_days``: the charge engine's chargeable days (``analytics.charge_days``,
  one row per container, party, charge and day, published by the risk run) with
  :func:`day_flags_sql`'s flags from history;
- ``terminal49.free_time_used``: the engine's rows per container and party
  (``analytics.charges``) with discharge, first seen, first available, pickup, empty return
  and the counts of its charged days (flagged ones too).

The two charge views exist once a risk run has published the engine's tables
(:mod:`pipelines.analytics.charges`); no LFD rule is restated here.
"""

from __future__ import annotations

from collections.abc import Mapping

import duckdb

from pipelines.config import ANALYTICS_SCHEMA, DATASET
from pipelines.history import HISTORY_TABLE
from pipelines.warehouse import column_types
from pipelines.warehouse import quote as q

D = q(DATASET)
#: The engine's tables (``pipelines.analytics.charges.PARTIES_TABLE`` / ``DAYS_TABLE``).
CHARGES, CHARGE_DAYS = "charges", "charge_days"


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    return column_types(con, DATASET, table)


def _text_date(value: str, zone: str) -> str:
    """A history text value of an LFD as a local date: ``2030-01-10`` is that day; an instant
    (history rows written before LFDs became dates stay as they were) is read in ``zone``."""
    return (
        f"CASE WHEN length({value}) = 10 THEN TRY_CAST({value} AS DATE) ELSE "
        f"CAST(timezone({zone}, TRY_CAST({value} AS TIMESTAMPTZ)) AS DATE) END"
    )


def day_flags_sql(days: str, h: str = f"{D}.{HISTORY_TABLE}") -> str:
    """SQL: every row of relation ``days`` (with ``container_id``, ``day``, a local date, and
    ``zone``, its IANA zone) plus ``day_start`` and ``day_end`` (the local day as instants),
    ``before_first_seen`` (the day ended before freetime first saw the container: nothing is
    known of it), ``not_available_or_held`` and ``reasons`` (at some moment of the day history
    shows the box not available, or under a hold with status ``hold``)."""
    return f"""
        WITH first_seen AS (
            SELECT entity_id AS container_id, min(observed_at) AS first_seen_at
            FROM {h} WHERE entity = 'container' GROUP BY entity_id
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
                   timezone(d.zone, CAST(d.day + 1 AS TIMESTAMP)) AS day_end,
                   f.first_seen_at AS _first_seen_at
            FROM {days} d LEFT JOIN first_seen f ON f.container_id = d.container_id
        )
        SELECT b.* EXCLUDE (_first_seen_at),
               b._first_seen_at IS NULL OR b.day_end <= b._first_seen_at AS before_first_seen,
               count(k.reason) > 0 AS not_available_or_held,
               string_agg(DISTINCT k.reason, ', ' ORDER BY k.reason) AS reasons
        FROM bounded b LEFT JOIN blocking k ON k.container_id = b.container_id
             AND k.since < b.day_end AND (k.until IS NULL OR k.until > b.day_start)
        GROUP BY ALL"""


def create_views(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create the views; a no-op until ``history`` and ``containers`` exist, and the charge
    views wait for the engine's tables. The SQL follows the columns the tables have."""
    cols = _columns(con, "containers")
    if not cols or not _columns(con, HISTORY_TABLE):
        return
    h = f"{D}.{HISTORY_TABLE}"

    def col(name: str) -> str:
        return f"c.{name}" if name in cols else "NULL"

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
    _charge_views(con, h, cols)
    shipments = _columns(con, "shipments")
    if shipments:
        _eta_view(con, h, shipments)


def _charge_views(con: duckdb.DuckDBPyConnection, h: str, cols: Mapping[str, str]) -> None:
    """``charged_days`` and ``free_time_used`` over the engine's published tables."""
    a = q(ANALYTICS_SCHEMA)
    if not {"container_id", "day", "zone"} <= set(column_types(con, ANALYTICS_SCHEMA, CHARGE_DAYS)):
        return
    if "container_id" not in column_types(con, ANALYTICS_SCHEMA, CHARGES):
        return

    def col(name: str) -> str:
        return f"c.{q(name)}" if name in cols else "NULL"

    con.execute(
        f"CREATE OR REPLACE VIEW {D}.charged_days AS {day_flags_sql(f'{a}.{CHARGE_DAYS}', h)}"
    )
    con.execute(f"""
        CREATE OR REPLACE VIEW {D}.free_time_used AS
        WITH seen AS (
            SELECT entity_id AS container_id, min(observed_at) AS first_seen_at,
                   min(observed_at) FILTER (WHERE
                       (field = 'current_status' AND new_value = 'available')
                       OR (field = 'available_for_pickup' AND new_value = 'true'))
                     AS first_available_at
            FROM {h} WHERE entity = 'container' GROUP BY entity_id
        ), counted AS (
            SELECT container_id, party, charge, count(*) AS days_charged,
                   count(*) FILTER (WHERE not_available_or_held) AS days_charged_not_available,
                   count(*) FILTER (WHERE before_first_seen) AS days_charged_before_first_seen
            FROM {D}.charged_days GROUP BY ALL
        )
        SELECT p.container_id, p.container_number, p.party, p.charge, p.binds,
               coalesce({col("pod_timezone")}, 'UTC') AS pod_timezone, p.zone,
               s.first_seen_at, {col("pod_discharged_at")} AS discharged_at,
               s.first_available_at, p.lfd_date, p.lfd_column AS lfd_basis, p.lfd_source,
               p.free_time_start, p.lfd_date AS free_time_end, p.free_days,
               p.chargeable_until, p.end_reason,
               {col("pod_full_out_at")} AS picked_up_at,
               {col("empty_terminated_at")} AS empty_returned_at,
               coalesce(n.days_charged, 0) AS days_charged,
               coalesce(n.days_charged_not_available, 0) AS days_charged_not_available,
               coalesce(n.days_charged_before_first_seen, 0) AS days_charged_before_first_seen,
               p.amount, p.currency, p.tariff_line, p.as_of
        FROM {a}.{CHARGES} p
        LEFT JOIN {D}.containers c ON c.id = p.container_id
        LEFT JOIN seen s ON s.container_id = p.container_id
        LEFT JOIN counted n ON n.container_id = p.container_id AND n.party = p.party
             AND n.charge = p.charge
    """)


def _eta_view(con: duckdb.DuckDBPyConnection, h: str, shipments: Mapping[str, str]) -> None:
    # a column no load has filled yet (no shipment arrived) reads as NULL: the view stays
    def s(name: str, null_type: str = "VARCHAR") -> str:
        return f"s.{name}" if name in shipments else f"CAST(NULL AS {null_type})"

    ata = s("pod_ata_at", "TIMESTAMPTZ")
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
            SELECT s.id AS shipment_id, {s("shipping_line_scac")} AS carrier_scac,
                   {s("port_of_discharge_locode")} AS port_locode,
                   CAST(date_trunc('month', timezone('UTC', {ata})) AS DATE)
                     AS arrival_month,
                   date_diff('minute', f.first_eta_at, {ata}) / 1440.0 AS error_days
            FROM {D}.shipments s JOIN first_eta f ON f.shipment_id = s.id
            WHERE {ata} IS NOT NULL AND f.first_eta_seen_at < {ata}
        )
        SELECT carrier_scac, port_locode, arrival_month, count(*) AS shipments,
               round(avg(error_days), 2) AS mean_delay_days,
               round(avg(abs(error_days)), 2) AS mean_abs_error_days,
               round(avg(CASE WHEN abs(error_days) <= 1 THEN 1.0 ELSE 0.0 END), 3)
                 AS share_within_1_day
        FROM per_shipment GROUP BY ALL
    """)
