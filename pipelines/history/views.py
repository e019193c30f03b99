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

from collections.abc import Callable, Mapping, Sequence

import duckdb

from pipelines.config import ANALYTICS_SCHEMA, DATASET
from pipelines.dialect import DUCKDB, Dialect
from pipelines.history import HISTORY_TABLE
from pipelines.warehouse import column_types
from pipelines.warehouse import quote as q

D = q(DATASET)
#: The engine's tables (``pipelines.analytics.charges.PARTIES_TABLE`` / ``DAYS_TABLE``).
CHARGES, CHARGE_DAYS = "charges", "charge_days"
#: ``columns(schema, table)``: a table's ``{column: type}``, empty when it does not exist
Columns = Callable[[str, str], Mapping[str, str]]


def _text_date(value: str, zone: str, d: Dialect) -> str:
    """A history text value of an LFD as a local date: ``2030-01-10`` is that day; an instant
    (history rows written before LFDs became dates stay as they were) is read in ``zone``."""
    return (
        f"CASE WHEN length({value}) = 10 THEN {d.try_date(value)} ELSE "
        f"CAST(timezone({zone}, {d.try_instant(value)}) AS DATE) END"
    )


def day_flags_sql(
    days: str,
    h: str = f"{D}.{HISTORY_TABLE}",
    d: Dialect = DUCKDB,
    day_columns: Sequence[str] = (),
) -> str:
    """SQL: every row of relation ``days`` (with ``container_id``, ``day``, a local date, and
    ``zone``, its IANA zone) plus ``day_start`` and ``day_end`` (the local day as instants),
    ``before_first_seen`` (the day ended before freetime first saw the container: nothing is
    known of it), ``not_available_or_held`` and ``reasons`` (at some moment of the day history
    shows the box not available, or under a hold with status ``hold``). On PostgreSQL,
    ``day_columns`` names the columns of ``days`` (DuckDB finds them itself)."""
    kept = [f"b.{q(c)}" for c in (*day_columns, "day_start", "day_end")]
    columns = ", ".join(kept) if d.postgres else "b.* EXCLUDE (_first_seen_at)"
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
               OR (field LIKE 'hold:%' AND {d.split_contains("new_value", "'hold'")})
        ), bounded AS (
            SELECT d.*, timezone(d.zone, CAST(d.day AS TIMESTAMP)) AS day_start,
                   timezone(d.zone, CAST(d.day + 1 AS TIMESTAMP)) AS day_end,
                   f.first_seen_at AS _first_seen_at
            FROM {days} d LEFT JOIN first_seen f ON f.container_id = d.container_id
        )
        SELECT {columns},
               b._first_seen_at IS NULL OR b.day_end <= b._first_seen_at AS before_first_seen,
               count(k.reason) > 0 AS not_available_or_held,
               string_agg(DISTINCT k.reason, ', ' ORDER BY k.reason) AS reasons
        FROM bounded b LEFT JOIN blocking k ON k.container_id = b.container_id
             AND k.since < b.day_end AND (k.until IS NULL OR k.until > b.day_start)
        {d.group_by([*kept, "b._first_seen_at"])}"""


def create_views(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create the views; a no-op until ``history`` and ``containers`` exist, and the charge
    views wait for the engine's tables. The SQL follows the columns the tables have."""
    for name, sql in view_selects(lambda schema, table: column_types(con, schema, table)):
        con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")


def view_selects(columns: Columns, d: Dialect = DUCKDB) -> list[tuple[str, str]]:
    """``(qualified name, SELECT)`` of each view the tables allow, in the order to create them
    (a view before the views that read it), in dialect ``d``."""
    cols = columns(DATASET, "containers")
    if not cols or not columns(DATASET, HISTORY_TABLE):
        return []
    h = f"{D}.{HISTORY_TABLE}"

    def col(name: str) -> str:
        return f"c.{name}" if name in cols else "NULL"

    zone = (
        "CASE WHEN h.field IN ('pickup_lfd_rail', 'ind_facility_lfd_on') THEN "
        f"coalesce({col('final_destination_timezone')}, {col('pod_timezone')}, 'UTC') "
        f"ELSE coalesce({col('pod_timezone')}, 'UTC') END"
    )
    old, new = _text_date("h.old_value", zone, d), _text_date("h.new_value", zone, d)
    out = [
        (
            f"{D}.lfd_changes",
            f"""
        SELECT h.entity_id AS container_id, c.number AS container_number, h.field AS source,
               {old} AS old_lfd,
               {new} AS new_lfd,
               {d.days_between(old, new)} AS days_moved,
               CASE WHEN h.old_value IS NULL THEN 'posted'
                    WHEN h.new_value IS NULL THEN 'withdrawn' ELSE 'moved' END AS change,
               CASE WHEN h.field = 'lfd_binding' THEN
                 (SELECT {d.last_by("b.new_value", "b.observed_at")} FROM {h} b
                  WHERE b.entity = 'container' AND b.entity_id = h.entity_id
                    AND b.field = 'binding_basis' AND b.observed_at <= h.observed_at)
               END AS binding_basis,
               h.observed_at, h.how, h.notification_id
        FROM {h} h LEFT JOIN {D}.containers c ON c.id = h.entity_id
        WHERE h.entity = 'container' AND h.field LIKE '%lfd%'
          AND NOT (right(h.field, 10) = '_selection' OR right(h.field, 7) = '_manual')
    """,
        )
    ]
    out += _charge_views(columns, h, cols, d)
    shipments = columns(DATASET, "shipments")
    if shipments:
        out.append(_eta_view(h, shipments, d))
    return out


def _charge_views(
    columns: Columns, h: str, cols: Mapping[str, str], d: Dialect
) -> list[tuple[str, str]]:
    """``charged_days`` and ``free_time_used`` over the engine's published tables."""
    a = q(ANALYTICS_SCHEMA)
    day_columns = list(columns(ANALYTICS_SCHEMA, CHARGE_DAYS))
    if not {"container_id", "day", "zone"} <= set(day_columns):
        return []
    if "container_id" not in columns(ANALYTICS_SCHEMA, CHARGES):
        return []

    def col(name: str) -> str:
        return f"c.{q(name)}" if name in cols else "NULL"

    keys = ["container_id", "party", "charge"]
    charged = day_flags_sql(f"{a}.{CHARGE_DAYS}", h, d, day_columns)
    free_time_used = f"""
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
            FROM {D}.charged_days {d.group_by(keys)}
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
    """
    return [(f"{D}.charged_days", charged), (f"{D}.free_time_used", free_time_used)]


def _eta_view(h: str, shipments: Mapping[str, str], d: Dialect) -> tuple[str, str]:
    # a column no load has filled yet (no shipment arrived) reads as NULL: the view stays
    def s(name: str, null_type: str = "VARCHAR") -> str:
        return f"s.{name}" if name in shipments else f"CAST(NULL AS {d.type(null_type)})"

    ata = s("pod_ata_at", "TIMESTAMPTZ")
    error = "error_days"
    return (
        f"{D}.eta_reliability",
        f"""
        WITH first_eta AS (
            SELECT entity_id AS shipment_id,
                   {d.first_by(d.try_instant("new_value"), "observed_at")} AS first_eta_at,
                   min(observed_at) AS first_eta_seen_at
            FROM {h} WHERE entity = 'shipment' AND field = 'pod_eta_at'
              AND new_value IS NOT NULL
            GROUP BY entity_id
        ), per_shipment AS (
            SELECT s.id AS shipment_id, {s("shipping_line_scac")} AS carrier_scac,
                   {s("port_of_discharge_locode")} AS port_locode,
                   CAST(date_trunc('month', timezone('UTC', {ata})) AS DATE)
                     AS arrival_month,
                   {d.minutes_between("f.first_eta_at", ata)} / 1440.0 AS error_days
            FROM {D}.shipments s JOIN first_eta f ON f.shipment_id = s.id
            WHERE {ata} IS NOT NULL AND f.first_eta_seen_at < {ata}
        )
        SELECT carrier_scac, port_locode, arrival_month, count(*) AS shipments,
               {d.round(f"avg({error})", 2)} AS mean_delay_days,
               {d.round(f"avg(abs({error}))", 2)} AS mean_abs_error_days,
               {d.round(f"avg(CASE WHEN abs({error}) <= 1 THEN 1.0 ELSE 0.0 END)", 3)}
                 AS share_within_1_day
        FROM per_shipment {d.group_by(["carrier_scac", "port_locode", "arrival_month"])}
    """,
    )
