"""Demurrage risk per container, as of an instant: polars LazyFrames in and out.

:func:`compute_risk` implements the rules of ``docs/risk-rules.md`` (the README's section
"Demurrage risk: the rules" sums them up); each block of :func:`_rules` is one of them, under
the same heading. In short:

* LFDs are local calendar dates, stored as DATEs by the load (an LFD column still holding
  instants is refused: :class:`UnconvertedLfds`). ``days_to_lfd`` is a difference of local
  dates; ``working_days_to_lfd`` counts Monday-Friday minus observed US federal holidays in
  ``(today, lfd]``.
* Binding LFD = the earliest relevant source: terminal until the box leaves the port, rail for
  inland moves, line until done. Ties prefer line, terminal, rail.
* Holds do not stop the clock. Ready = available AND no hold with status ``hold``.
* Fees: the ``total`` line repeats the others and is dropped before summing (:func:`is_total_fee`).
* Cost from the tariff table; the LFD is free, charges start the next day in calendar days, tiers
  counted from the first chargeable day. No tariff or no LFD => ``costed`` false, costs NULL.
* Projected pickup: appointment (today or later), else today if ready, else 3rd working day after
  today with a blocking hold, else the next working day.
* Risk level, first that applies: done; unknown (discharged, no LFD); ok (not discharged, no LFD);
  overdue (< 0 days); due_today (0); imminent (1-3); watch (4-7); ok (> 7).
* ``stale``: terminal not checked for 7 days (or never) or line tracking stopped; shown, it does
  not change the level.

:func:`clock` holds the rules that say when (zones, dates, phases, the binding LFD, the detention
clock); :func:`compute_risk` adds the risk rules to it and :mod:`pipelines.analytics.charges` the
charges, so the two read one clock.

How: the containers are joined to their shipment, terminal, holds, fees and tariff rows (joins on
ids and keys; only the key columns go through the joins, the matches are placed beside the
rows), then each rule adds its columns. Each instant is converted to a local date in its own
zone only; "today" and the working days after it are constants per zone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime, timedelta
from typing import Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl

from pipelines.analytics.calendars import WorkingCalendar, working_calendar
from pipelines.analytics.tariffs import greatest, least, match_tariffs, tier_cost

#: The risk levels, most urgent first: the one definition (the tool server's argument type,
#: the views and the reports take theirs from here).
Level = Literal["overdue", "due_today", "imminent", "watch", "ok", "unknown", "done"]
LEVELS: tuple[Level, ...] = get_args(Level)
AT_RISK_LEVELS: tuple[Level, ...] = ("overdue", "due_today", "imminent")
#: :data:`AT_RISK_LEVELS` as an SQL list of string literals.
AT_RISK_SQL = ", ".join(f"'{level}'" for level in AT_RISK_LEVELS)
DONE_STATUSES = ("picked_up", "delivered", "dropped", "empty_returned")
STALE_AFTER = timedelta(days=7)
#: Working days assumed for a blocking hold to clear before pickup (x-ray exam: 2-3 days).
HOLD_CLEAR_WORKING_DAYS = 3

TS = pl.Datetime("us", "UTC")
_S, _B, _I, _F, _D = pl.String, pl.Boolean, pl.Int64, pl.Float64, pl.Date

#: LFD columns: local calendar DATEs (a load converts an older warehouse's instants to dates:
#: ``docs/lfd-dates.md``). An LFD column still holding instants is refused by :func:`conform`
#: with :func:`unconverted_lfds_message`.
LFD_COLUMNS = ("pickup_lfd_terminal", "pickup_lfd_rail", "pickup_lfd_line", "ind_facility_lfd_on")
#: The fee line that repeats the sum of the others (compared case-insensitively).
TOTAL_FEE_TYPE = "total"


def is_total_fee(fee_type: str | None) -> bool:
    """True for the terminal's ``total`` fee line, which repeats the others: drop it before
    summing. The one rule for Python callers; :func:`total_fee_expr` is the same rule in polars."""
    return (fee_type or "").strip().lower() == TOTAL_FEE_TYPE


def total_fee_expr(fee_type: pl.Expr) -> pl.Expr:
    """:func:`is_total_fee` as a polars expression (NULL type: false)."""
    return (fee_type.str.strip_chars().str.to_lowercase() == TOTAL_FEE_TYPE).fill_null(False)


def unconverted_lfds_message(table: str, columns: Sequence[str]) -> str:
    """The one line telling the user that a warehouse still holds LFDs as instants."""
    return (
        f"{table} holds LFDs as instants (column {', '.join(columns)}), written before LFDs "
        "became dates: run `freetime load` once to convert them, then try again"
    )


class UnconvertedLfds(ValueError):
    """An LFD column holds instants: the warehouse predates DATE LFDs (see the message)."""


#: The POD deadline columns (``import_deadlines.pod``; absent in older warehouses).
POD_COLUMNS: dict[str, pl.DataType | type[pl.DataType]] = {
    "has_pod_deadlines": _B,
    "pod_lfd_unified": _D,
    "pod_lfd_unified_selection": _S,
    "pod_lfd_line_current": _D,
    "pod_lfd_facility_current": _D,
}

#: Columns read from each warehouse table, with the dtype compute_risk works on. Missing columns
#: (dlt drops all-NULL columns) are added as typed NULLs.
SCHEMAS: dict[str, dict[str, pl.DataType | type[pl.DataType]]] = {
    "containers": {
        "id": _S,
        "number": _S,
        "shipment_id": _S,
        "pod_terminal_id": _S,
        "equipment_type": _S,
        "equipment_length": _I,
        "current_status": _S,
        "pod_timezone": _S,
        "final_destination_timezone": _S,
        "empty_terminated_timezone": _S,
        "pod_rail_carrier_scac": _S,
        "available_for_pickup": _B,
        "availability_known": _B,
        "holds_at_pod_terminal_known": _B,
        "fees_at_pod_terminal_known": _B,
        **POD_COLUMNS,
        **{c: _D for c in LFD_COLUMNS},
        **{
            c: TS
            for c in (
                "pickup_appointment_at",
                "pod_discharged_at",
                "pod_full_out_at",
                "final_destination_full_out_at",
                "empty_terminated_at",
                "terminal_checked_at",
                "pod_rail_loaded_at",
                "pod_rail_departed_at",
                "ind_eta_at",
                "ind_ata_at",
                "ind_rail_unloaded_at",
            )
        },
    },
    "shipments": {
        "id": _S,
        "bill_of_lading_number": _S,
        "shipping_line_scac": _S,
        "port_of_discharge_locode": _S,
        "destination_locode": _S,
        "customer_name": _S,
        "pod_timezone": _S,
        "destination_timezone": _S,
        **{
            c: TS
            for c in ("pod_eta_at", "pod_ata_at", "pod_original_eta_at", "line_tracking_stopped_at")
        },
    },
    "container_holds": {"container_id": _S, "name": _S, "status": _S},
    "container_fees": {"container_id": _S, "type": _S, "amount": _F, "currency_code": _S},
    "terminals": {"id": _S, "name": _S, "nickname": _S, "firms_code": _S},
    "ports": {"id": _S, "code": _S, "time_zone": _S},
}

OUTPUT_COLUMNS = [
    "as_of",
    "container_id",
    "container_number",
    "shipment_id",
    "bill_of_lading_number",
    "shipping_line_scac",
    "port_of_discharge_locode",
    "destination_locode",
    "pod_terminal_name",
    "pod_terminal_firms_code",
    "current_status",
    "customer_name",
    "equipment_type",
    "equipment_length",
    "is_inland",
    "risk_level",
    "risk_reason",
    "lfd_date",
    "lfd_source",
    "lfd_line",
    "lfd_terminal",
    "lfd_rail",
    "lfd_pod",
    "lfd_disagreement_days",
    "lfd_estimated",
    "today_local",
    "days_to_lfd",
    "working_days_to_lfd",
    "ready_for_pickup",
    "blocking_holds",
    "pending_holds",
    "available_for_pickup",
    "availability_known",
    "pickup_appointment_at",
    "projected_pickup_date",
    "fees_reported",
    "demurrage_fee_reported",
    "costed",
    "uncosted_reason",
    "currency",
    "accrued_demurrage",
    "projected_demurrage",
    "demurrage_tariff_line",
    "full_out_at",
    "days_out",
    "detention_lfd",
    "projected_detention",
    "detention_tariff_line",
    "dwell_days",
    "eta_slip_days",
    "stale",
    "terminal_checked_at",
]


@dataclass
class WarehouseFrames:
    """The ``terminal49`` tables as LazyFrames (any may be empty; columns are conformed)."""

    containers: pl.LazyFrame
    shipments: pl.LazyFrame
    container_holds: pl.LazyFrame
    container_fees: pl.LazyFrame
    terminals: pl.LazyFrame
    ports: pl.LazyFrame

    @classmethod
    def from_mapping(cls, frames: Mapping[str, pl.LazyFrame | pl.DataFrame]) -> WarehouseFrames:
        """Build from ``{"containers": ..., ...}``; absent tables become empty frames."""
        out = {}
        for f in fields(cls):
            lf = frames.get(f.name)
            out[f.name] = conform(lf.lazy() if lf is not None else None, f.name)
        return cls(**out)


def conform(lf: pl.LazyFrame | None, table: str) -> pl.LazyFrame:
    """Select the columns ``SCHEMAS[table]`` names, cast, and add missing ones as NULL.

    Instants become UTC microseconds. Raises :class:`UnconvertedLfds` when an LFD column
    (:data:`LFD_COLUMNS`) holds instants rather than dates.
    """
    schema = SCHEMAS[table]
    if lf is None:
        return pl.LazyFrame(schema=schema)
    have = lf.collect_schema()
    instants = [c for c in LFD_COLUMNS if c in schema and isinstance(have.get(c), pl.Datetime)]
    if instants:
        raise UnconvertedLfds(unconverted_lfds_message(table, instants))
    exprs = []
    for name, dtype in schema.items():
        if name not in have:
            exprs.append(pl.lit(None, dtype=dtype).alias(name))
        elif have[name] == dtype:
            exprs.append(pl.col(name))
        elif dtype == TS and isinstance(have[name], pl.Datetime):
            col = pl.col(name)
            tz = getattr(have[name], "time_zone", None)
            col = col.dt.convert_time_zone("UTC") if tz else col.dt.replace_time_zone("UTC")
            exprs.append(col.dt.cast_time_unit("us").alias(name))
        else:
            exprs.append(pl.col(name).cast(dtype, strict=False).alias(name))
    return lf.select(exprs)


def compute_risk(
    frames: WarehouseFrames | Mapping[str, pl.LazyFrame],
    as_of: datetime,
    tariffs: pl.DataFrame,
) -> pl.LazyFrame:
    """One row per container with LFDs, readiness, fees, costs and a risk level at ``as_of``.

    ``as_of`` must be timezone-aware (a naive value is taken as UTC). ``tariffs`` is the frame
    :func:`pipelines.analytics.load_tariffs` returns. Output columns: :data:`OUTPUT_COLUMNS`
    (described in ``docs/risk-rules.md``). Only the distinct zone names are read when this is
    called; everything else runs when the result is collected.
    """
    return _rules(clock(frames, as_of, tariffs))


def risk_of(c: Clock) -> pl.LazyFrame:
    """:func:`compute_risk` of a :class:`Clock` (to plan it with the charges of the same clock)."""
    return _rules(c)


@dataclass
class Clock:
    """Each container's clocks at ``as_of``, shared by the risk rules and the charge engine
    (:mod:`pipelines.analytics.charges`): one row per container with its joins, zones, tariff
    columns (:data:`DEM`, :data:`DET`), local dates, phases (``_done``, ``_left_port``), the
    binding LFD (``lfd_date``, ``lfd_source``), ``today_local``, ``days_to_lfd``, and the
    detention clock (``detention_lfd``, ``_detention_end``)."""

    rows: pl.LazyFrame
    zones: list[str]
    as_of: datetime
    cal: WorkingCalendar
    tiers: dict[str, int]

    def today(self, zone: str) -> date:
        """The local date at ``as_of`` in ``zone``."""
        return self.as_of.astimezone(ZoneInfo(zone)).date()

    def today_in(self, zone: pl.Expr) -> pl.Expr:
        """Today's local date in the row's ``zone`` (a zone column of the rows)."""
        return _in_zone(zone, self.zones, self.today)

    def local_date(self, ts: str | pl.Expr, zone: pl.Expr) -> pl.Expr:
        """The local date of a UTC instant in the row's ``zone``."""
        return _local_date(ts, zone, self.zones)


def clock(
    frames: WarehouseFrames | Mapping[str, pl.LazyFrame],
    as_of: datetime,
    tariffs: pl.DataFrame,
) -> Clock:
    """The :class:`Clock` of every container at ``as_of`` (lazy, like :func:`compute_risk`)."""
    fr = frames if isinstance(frames, WarehouseFrames) else WarehouseFrames.from_mapping(frames)
    as_of = (as_of if as_of.tzinfo else as_of.replace(tzinfo=UTC)).astimezone(UTC)
    zones = _zone_names(fr)
    shipments = _shipments(fr)
    rows = _with_zones(_joined(fr, shipments), zones)
    rows, tiers = _with_tariffs(rows, shipments, tariffs)
    c = Clock(rows, zones, as_of, working_calendar(), tiers)
    c.rows = _clock_rows(c)
    return c


# --- the inputs of the rules: one row per container with everything joined ----------------


def _shipments(fr: WarehouseFrames) -> pl.LazyFrame:
    """The shipment columns the rules read, one row per ``shipment_id`` (its first)."""
    col = pl.col
    return fr.shipments.filter(col("id").is_first_distinct()).select(
        col("id").alias("shipment_id"),
        "bill_of_lading_number",
        col("shipping_line_scac").str.to_uppercase(),
        "port_of_discharge_locode",
        "destination_locode",
        "customer_name",
        col("pod_timezone").alias("_shipment_pod_zone"),
        col("destination_timezone").alias("_shipment_dest_zone"),
        eta_slip_days=_days_of(
            pl.coalesce("pod_ata_at", "pod_eta_at") - col("pod_original_eta_at")
        ),
        _line_tracking_stopped=col("line_tracking_stopped_at").is_not_null(),
    )


def _joined(fr: WarehouseFrames, shipments: pl.LazyFrame) -> pl.LazyFrame:
    """Each container with its shipment (a :func:`_shipments` frame), POD terminal, holds and
    fees (joins on ids)."""
    col = pl.col
    terminals = (
        fr.terminals.select(
            col("id").alias("pod_terminal_id"),
            col("name").alias("pod_terminal_name"),
            col("firms_code").alias("pod_terminal_firms_code"),
            _at_terminal=pl.concat_str(pl.lit(" at "), pl.coalesce("nickname", "name")),  # reason
        )
        .drop_nulls("pod_terminal_id")
        .unique("pod_terminal_id", keep="first", maintain_order=True)
    )
    holds = (
        fr.container_holds.filter(col("status").is_in(["hold", "pending"]))
        .unique(["container_id", "status", "name"])
        .sort("name")  # a group keeps the order of its rows: the names come out sorted
        .group_by("container_id")
        .agg(
            blocking_holds=col("name").filter(col("status") == "hold"),
            pending_holds=col("name").filter(col("status") == "pending"),
        )
        .with_columns(
            _holds_phrase=pl.concat_str(  # "; customs hold; TMF pending": the reason's part
                pl.lit("; "),
                pl.concat_str(
                    [
                        pl.when(col(c).list.len() > 0).then(
                            pl.concat_str(col(c).list.join(", "), pl.lit(w))
                        )
                        for c, w in (("blocking_holds", " hold"), ("pending_holds", " pending"))
                    ],
                    separator="; ",
                    ignore_nulls=True,
                ),
            )
        )
    )
    fees = (
        fr.container_fees.with_columns(
            _fee=pl.when(~total_fee_expr(col("type"))).then("amount"),
            _demurrage=pl.when(col("type") == "demurrage").then("amount"),
        )
        .group_by("container_id")
        .agg(
            _fees_sum=col("_fee").sum(),
            _demurrage_sum=col("_demurrage").sum(),
            _fee_rows=pl.len(),
        )
    )
    no_names = pl.lit([], dtype=pl.List(pl.String))
    holds_and_fees = holds.join(fees, on="container_id", how="full", coalesce=True)
    containers = fr.containers.rename({"id": "container_id", "number": "container_number"})
    return (
        _beside(
            containers,
            containers.select("shipment_id", "pod_terminal_id", "container_id")
            .join(shipments, on="shipment_id", how="left", maintain_order="left")
            .join(terminals, on="pod_terminal_id", how="left", maintain_order="left")
            .join(holds_and_fees, on="container_id", how="left", maintain_order="left"),
        )
        .with_columns(
            blocking_holds=col("blocking_holds").fill_null(no_names),
            pending_holds=col("pending_holds").fill_null(no_names),
            _fees_sum=col("_fees_sum").fill_null(0.0),
            _demurrage_sum=col("_demurrage_sum").fill_null(0.0),
            _fee_rows=col("_fee_rows").fill_null(0),
            _inland=_is_inland(),
        )
        .with_columns(**_tariff_keys())
    )


def _beside(rows: pl.LazyFrame, joined: pl.LazyFrame) -> pl.LazyFrame:
    """``rows`` with the columns ``joined`` adds, for ``joined`` = left joins of some of the
    key columns of ``rows`` (in their order) to tables unique on their keys."""
    # joining the narrow key columns, rather than every column of ``rows``, spares polars
    # gathering all of them by the join's row order
    added = [c for c in joined.collect_schema().names() if c not in rows.collect_schema()]
    return pl.concat([rows, joined.select(added)], how="horizontal")


def _is_inland() -> pl.Expr:
    """Inland move = any rail evidence (docs/risk-rules.md, "Which LFD binds")."""
    evidence = (
        "pod_rail_carrier_scac",
        "pod_rail_loaded_at",
        "pod_rail_departed_at",
        "ind_eta_at",
        "ind_ata_at",
        "ind_rail_unloaded_at",
        "pickup_lfd_rail",
        "ind_facility_lfd_on",
        "final_destination_full_out_at",
    )
    return (
        pl.any_horizontal(pl.col(c).is_not_null() for c in evidence)
        | pl.col("current_status").is_in(["on_rail", "awaiting_inland_transfer"])
    ).fill_null(False)


def _tariff_keys() -> dict[str, pl.Expr]:
    """The tariff key of a container (docs/risk-rules.md, "Cost"): carrier, port (of
    discharge, or the destination for inland moves), equipment (``reefer``, or ``dry`` for
    everything else)."""
    col = pl.col
    return dict(
        _scac=col("shipping_line_scac"),
        _port=pl.when(col("_inland") & col("destination_locode").is_not_null())
        .then(col("destination_locode"))
        .otherwise(col("port_of_discharge_locode")),
        _equip=pl.when(col("equipment_type") == "reefer")
        .then(pl.lit("reefer"))
        .otherwise(pl.lit("dry")),
    )


#: Prefixes of the demurrage and detention tariff columns joined to each container.
DEM, DET = "dem_", "det_"
_KEYS = ["_scac", "_port", "_equip"]


def _with_tariffs(
    rows: pl.LazyFrame, shipments: pl.LazyFrame, tariffs: pl.DataFrame
) -> tuple[pl.LazyFrame, dict[str, int]]:
    """Join each container's demurrage and detention tariff rows (docs/risk-rules.md, "Cost").

    The columns are those of :func:`match_tariffs` prefixed :data:`DEM` / :data:`DET` (NULL: no
    tariff). Also returns the number of tier columns of each prefix. ``shipments``: the
    :func:`_shipments` frame the rows were joined to.
    """
    # Every key a container can have: its shipment's carrier with the port of discharge or
    # the destination (or no shipment), either equipment. Taken from the shipments: distinct
    # keys of ``rows`` would have polars compute the joined rows a second time.
    no_shipment = pl.LazyFrame(
        {"scac": [None], "port": [None]}, schema={"scac": pl.String, "port": pl.String}
    )
    keys = (
        pl.concat(
            [
                shipments.select(scac="shipping_line_scac", port=port).unique()
                for port in ("port_of_discharge_locode", "destination_locode")
            ]
            + [no_shipment]
        )
        .unique()
        .join(pl.LazyFrame({"equip": ["dry", "reefer"]}), how="cross")
    )
    by_key, tiers = keys, {}
    for prefix, charge in ((DEM, "demurrage"), (DET, "detention")):
        matched = match_tariffs(keys, tariffs, charge)
        names = matched.collect_schema().names()
        renamed = {c: prefix + c for c in names if c not in ("scac", "port", "equip")}
        by_key = by_key.join(
            matched.rename(renamed), on=["scac", "port", "equip"], how="left", nulls_equal=True
        )
        tiers[prefix] = sum(1 for c in names if c.endswith("_rate"))
    rows = _beside(
        rows,
        rows.select(_KEYS).join(
            by_key,
            left_on=_KEYS,
            right_on=["scac", "port", "equip"],
            how="left",
            nulls_equal=True,
            maintain_order="left",
        ),
    )
    return rows, tiers


@functools.lru_cache(maxsize=256)
def _valid_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
        pl.Series([datetime(2025, 1, 1, tzinfo=UTC)]).dt.convert_time_zone(name)
    except (ZoneInfoNotFoundError, ValueError, pl.exceptions.PolarsError):
        return False
    return True


_CONTAINER_ZONES = ("pod_timezone", "final_destination_timezone", "empty_terminated_timezone")
_SHIPMENT_ZONES = ("pod_timezone", "destination_timezone")


def _zone_names(fr: WarehouseFrames) -> list[str]:
    """UTC and the valid zone names the containers and shipments use (a small eager query)."""
    names = (
        pl.concat(
            [fr.containers.select(pl.col(c).alias("z")) for c in _CONTAINER_ZONES]
            + [fr.shipments.select(pl.col(c).alias("z")) for c in _SHIPMENT_ZONES]
        )
        .unique()
        .drop_nulls()
        .collect(engine="in-memory")["z"]
        .to_list()
    )
    return ["UTC", *sorted(z for z in names if z != "UTC" and _valid_zone(z))]


def _with_zones(rows: pl.LazyFrame, zones: list[str]) -> pl.LazyFrame:
    """Add the zone of each kind of local date (docs/risk-rules.md, "Dates and zones"), as an
    Enum of ``zones``; a name that is not a known zone counts as UTC.

    ``_zone_pod``: the container's ``pod_timezone``, else the shipment's, else UTC.
    ``_zone_dest``: the container's ``final_destination_timezone``, else the shipment's
    ``destination_timezone``, else the port's. ``_zone_line`` (line LFD): the container's
    final-destination zone, else the port's. ``_zone_empty`` (empty return):
    ``empty_terminated_timezone``, else the destination's (inland moves) or the port's.
    """
    enum = pl.Enum(zones)

    def zone(c: str) -> pl.Expr:
        return (
            pl.col(c)
            .cast(enum, strict=False)
            .fill_null(  # unknown names: UTC
                pl.when(pl.col(c).is_not_null()).then(pl.lit("UTC", dtype=enum))
            )
        )

    pod = pl.coalesce(zone("pod_timezone"), zone("_shipment_pod_zone"), pl.lit("UTC", dtype=enum))
    dest = pl.coalesce(zone("final_destination_timezone"), zone("_shipment_dest_zone"), pod)
    return rows.with_columns(
        _zone_pod=pod,
        _zone_dest=dest,
        _zone_line=pl.coalesce(zone("final_destination_timezone"), pod),
        _zone_empty=pl.coalesce(
            zone("empty_terminated_timezone"), pl.when(pl.col("_inland")).then(dest).otherwise(pod)
        ),
    )


# --- helpers ------------------------------------------------------------------------------


def _local_date(ts: str | pl.Expr, zone: pl.Expr, zones: Sequence[str]) -> pl.Expr:
    """The calendar date of a UTC instant in the row's ``zone`` (one of ``zones``)."""
    e = pl.col(ts) if isinstance(ts, str) else ts
    # each instant is converted in its own zone only (the other rows are NULL there)
    return pl.coalesce(pl.when(zone == z).then(e).dt.convert_time_zone(z).dt.date() for z in zones)


def _in_zone(zone: pl.Expr, zones: Sequence[str], value: Callable[[str], date]) -> pl.Expr:
    """``value(z)`` for the row's zone ``z``: e.g. today's date there."""
    return pl.coalesce(pl.when(zone == z).then(pl.lit(value(z), dtype=pl.Date)) for z in zones)


def _days_between(later: pl.Expr, earlier: pl.Expr) -> pl.Expr:
    """``later - earlier`` in whole days, for two Date expressions (Int32)."""
    return later.cast(pl.Int32) - earlier.cast(pl.Int32)


def _earliest(dates: Iterable[pl.Expr]) -> pl.Expr:
    """The earliest of Date expressions, NULLs skipped (NULL when all are NULL)."""
    return least(d.cast(pl.Int32) for d in dates).cast(pl.Date)


def _latest(dates: Iterable[pl.Expr]) -> pl.Expr:
    """The latest of Date expressions, NULLs skipped (NULL when all are NULL)."""
    return greatest(d.cast(pl.Int32) for d in dates).cast(pl.Date)


def _add_days(day: pl.Expr, n: pl.Expr) -> pl.Expr:
    """``day`` plus ``n`` calendar days."""
    return (day.cast(pl.Int32) + n).cast(pl.Date)


def _days_of(duration: pl.Expr) -> pl.Expr:
    """A duration in days, rounded to one decimal."""
    return (duration.dt.total_seconds() / 86400).round(1)


def _cost(prefix: str, tiers: dict[str, int], days: pl.Expr) -> pl.Expr:
    """Charges for ``days`` chargeable days under the tariff columns of ``prefix``."""
    return tier_cost(days, tiers[prefix], prefix)


def _free_time_end(cal: WorkingCalendar, prefix: str, start: pl.Expr) -> pl.Expr:
    """The tariff's ``free_days`` after ``start``, on its basis (working or calendar days)."""
    free = pl.col(prefix + "free_days")
    working = pl.col(prefix + "free_basis") == "working"
    # only the working-basis rows go through the (costlier) working-day arithmetic
    return (
        pl.when(working)
        .then(cal.add_working_days(pl.when(working).then(start), free))
        .otherwise(_add_days(start, free))
    )


# --- the rules ----------------------------------------------------------------------------


def _clock_rows(c: Clock) -> pl.LazyFrame:
    """The rows of :class:`Clock`: the rules "Which LFD binds" and "Dates and zones", and the
    detention clock."""
    col = pl.col
    rows, zones, cal, today = c.rows, c.zones, c.cal, c.today

    # --- Which LFD binds: phases ---------------------------------------------------------
    inland = col("_inland")
    full_out = (
        pl.when(inland).then(col("final_destination_full_out_at")).otherwise(col("pod_full_out_at"))
    )
    rows = rows.with_columns(
        is_inland=inland,
        _left_port=pl.any_horizontal(
            col(c).is_not_null()
            for c in ("pod_full_out_at", "pod_rail_loaded_at", "pod_rail_departed_at")
        ),
        full_out_at=full_out,
        _done=(
            full_out.is_not_null()
            | col("empty_terminated_at").is_not_null()
            | col("current_status").is_in(DONE_STATUSES).fill_null(False)
        ),
        _discharged=col("pod_discharged_at").is_not_null()
        | (inland & (col("ind_ata_at").is_not_null() | col("ind_rail_unloaded_at").is_not_null())),
    )
    done, left_port = col("_done"), col("_left_port")

    # --- Dates and zones: every LFD and event as a local calendar date --------------------
    at_ramp = inland & left_port  # an inland box that left the port: the destination's clock
    pod_zone, dest_zone = col("_zone_pod"), col("_zone_dest")
    rows = rows.with_columns(  # LFD columns are local dates already
        lfd_terminal=col("pickup_lfd_terminal"),
        lfd_line=col("pickup_lfd_line"),
        lfd_rail=pl.coalesce("pickup_lfd_rail", "ind_facility_lfd_on"),
        lfd_pod=col("pod_lfd_unified"),
        _appointment_date=_local_date("pickup_appointment_at", pod_zone, zones),
        _return_date=_local_date("empty_terminated_at", col("_zone_empty"), zones),
        _full_out_date=_local_date(
            full_out, pl.when(inland).then(dest_zone).otherwise(pod_zone), zones
        ),
    )

    # --- Which LFD binds: the earliest relevant source ------------------------------------
    # With the POD deadline object, its unified value replaces the line and terminal LFDs (a
    # NULL one is unknown: no fallback); it binds like the source it was selected from: a line
    # date until done, a facility date until the box leaves the port.
    has_pod = col("has_pod_deadlines").fill_null(False)
    pod_from_line = col("pod_lfd_unified_selection").str.starts_with("line").fill_null(False)
    relevant = {
        "pod": has_pod & ~done & (pod_from_line | ~left_port),
        "line": ~has_pod & ~done,
        "terminal": ~has_pod & ~done & ~left_port,
        "rail": ~done & inland,
    }
    rows = rows.with_columns(
        lfd_date=_earliest(pl.when(rel).then(col("lfd_" + name)) for name, rel in relevant.items())
    )
    pod_source = pl.concat_str(
        pl.lit("pod_"), pl.when(has_pod).then(col("pod_lfd_unified_selection"))
    ).fill_null("pod")
    source = pl.lit(None, dtype=pl.String)
    for name in reversed(relevant):  # ties prefer pod, line, terminal, then rail
        label = pod_source if name == "pod" else pl.lit(name)
        source = (
            pl.when(relevant[name] & (col("lfd_" + name) == col("lfd_date")))
            .then(label)
            .otherwise(source)
        )
    reported = [
        col(c)
        for c in (
            "lfd_line",
            "lfd_terminal",
            "lfd_rail",
            "pod_lfd_line_current",
            "pod_lfd_facility_current",
            "pod_lfd_unified",
        )
    ]
    rows = rows.with_columns(
        lfd_source=source,
        _pod_source=pod_source,
        lfd_disagreement_days=pl.when(
            pl.sum_horizontal(d.is_not_null() for d in reported) >= 2
        ).then(_days_between(_latest(reported), _earliest(reported))),
    )

    # --- Dates and zones: today in the zone of the binding LFD ----------------------------
    src = col("lfd_source")
    rows = rows.with_columns(  # no binding LFD: the inland ramp's zone, or the port's
        _zone_binding=pl.when((src == "terminal") | src.str.starts_with("pod"))
        .then(pod_zone)
        .when(src == "rail")
        .then(dest_zone)
        .when(src == "line")
        .then(col("_zone_line"))
        .when(at_ramp)
        .then(dest_zone)
        .otherwise(pod_zone),
    )

    def in_binding_zone(day: Callable[[str], date]) -> pl.Expr:
        return _in_zone(col("_zone_binding"), zones, day)

    rows = rows.with_columns(today_local=in_binding_zone(today))
    today_local = col("today_local")
    rows = rows.with_columns(
        days_to_lfd=_days_between(col("lfd_date"), today_local),
        working_days_to_lfd=cal.working_days_between(today_local, col("lfd_date")),
    )

    # --- Cost: detention (its clock) ------------------------------------------------------
    rows = rows.with_columns(
        detention_lfd=_free_time_end(cal, DET, col("_full_out_date")),
        _detention_end=pl.coalesce(col("_return_date"), _in_zone(pod_zone, zones, today)),
    )
    return rows


def _rules(c: Clock) -> pl.LazyFrame:
    """The risk columns, rule by rule, on the rows of a :class:`Clock`."""
    col = pl.col
    rows, zones, as_of, cal, tiers, today = c.rows, c.zones, c.as_of, c.cal, c.tiers, c.today
    done, inland = col("_done"), col("_inland")
    at_ramp = inland & col("_left_port")
    pod_zone, dest_zone = col("_zone_pod"), col("_zone_dest")
    today_local = col("today_local")

    def in_binding_zone(day: Callable[[str], date]) -> pl.Expr:
        return _in_zone(col("_zone_binding"), zones, day)

    # --- Holds, availability, fees --------------------------------------------------------
    on_hold = col("blocking_holds").list.len() > 0
    fees_known = col("fees_at_pod_terminal_known").fill_null(False) | (col("_fee_rows") > 0)
    rows = rows.with_columns(
        ready_for_pickup=col("available_for_pickup").fill_null(False) & ~on_hold,
        fees_reported=pl.when(fees_known).then(col("_fees_sum")),
        demurrage_fee_reported=pl.when(fees_known).then(col("_demurrage_sum")),
    )

    # --- Cost: the LFD used for cost and the projected pickup date ------------------------
    appointment = col("_appointment_date")
    # free time counts from discharge, or from rail arrival at the inland ramp; only the boxes
    # with no binding LFD have their instant converted
    estimated = col("lfd_date").is_null() & ~done
    rows = rows.with_columns(  # a column: _free_time_end reads it twice, polars would convert twice
        _estimate_start=_local_date(
            pl.when(estimated & at_ramp)
            .then(pl.coalesce("ind_rail_unloaded_at", "ind_ata_at"))
            .when(estimated)
            .then(col("pod_discharged_at")),
            pl.when(at_ramp).then(dest_zone).otherwise(pod_zone),
            zones,
        )
    )
    rows = rows.with_columns(
        lfd_estimated=_free_time_end(cal, DEM, col("_estimate_start")),
        _pickup_date=pl.when(appointment >= today_local)
        .then(appointment)
        .when(col("ready_for_pickup"))
        .then(today_local)
        .when(on_hold)
        .then(in_binding_zone(lambda z: cal.working_day_after(today(z), HOLD_CLEAR_WORKING_DAYS)))
        .otherwise(in_binding_zone(lambda z: cal.working_day_after(today(z), 1))),
    )

    # --- Cost: demurrage ------------------------------------------------------------------
    cost_lfd = pl.coalesce("lfd_date", "lfd_estimated")
    has_tariff = col(DEM + "tariff_line").is_not_null()
    costed = has_tariff & (done | cost_lfd.is_not_null())

    def chargeable_days(until: pl.Expr) -> pl.Expr:  # 0 for done boxes: nothing left to act on
        return pl.when(~done).then(_days_between(until, cost_lfd).clip(lower_bound=0)).otherwise(0)

    rows = rows.with_columns(
        costed=costed,
        uncosted_reason=pl.when(~has_tariff)
        .then(pl.lit("no tariff"))
        .when(~costed)
        .then(pl.lit("no LFD")),
        currency=col(DEM + "currency"),
        demurrage_tariff_line=col(DEM + "tariff_line"),
        accrued_demurrage=pl.when(costed).then(_cost(DEM, tiers, chargeable_days(today_local))),
        projected_demurrage=pl.when(costed).then(
            _cost(DEM, tiers, chargeable_days(col("_pickup_date")))
        ),
        projected_pickup_date=pl.when(~done).then(col("_pickup_date")),
    )

    # --- Cost: detention ------------------------------------------------------------------
    detention_end = col("_detention_end")
    rows = rows.with_columns(
        days_out=_days_between(detention_end, col("_full_out_date")),
        detention_tariff_line=pl.when(col("full_out_at").is_not_null()).then(
            col(DET + "tariff_line")
        ),
    )
    rows = rows.with_columns(
        projected_detention=pl.when(col("detention_lfd").is_not_null()).then(
            _cost(
                DET, tiers, _days_between(detention_end, col("detention_lfd")).clip(lower_bound=0)
            )
        ),
    )

    # --- Other facts ----------------------------------------------------------------------
    dwell_end = pl.coalesce(
        "pod_full_out_at", "pod_rail_loaded_at", "pod_rail_departed_at", pl.lit(as_of, dtype=TS)
    )
    rows = rows.with_columns(
        as_of=pl.lit(as_of, dtype=TS),
        dwell_days=pl.when(col("pod_discharged_at").is_not_null()).then(
            _days_of(dwell_end - col("pod_discharged_at"))
        ),
        stale=(
            col("terminal_checked_at").is_null()
            | (col("terminal_checked_at") < pl.lit(as_of - STALE_AFTER, dtype=TS))
            | col("_line_tracking_stopped").fill_null(False)
        ),
    )

    # --- Risk level (first rule that applies) ---------------------------------------------
    days = col("days_to_lfd")
    no_lfd = col("lfd_date").is_null()
    unknown = ~done & no_lfd & col("_discharged")
    rows = rows.with_columns(
        risk_level=pl.when(done)
        .then(pl.lit("done"))
        .when(unknown)
        .then(pl.lit("unknown"))
        .when(no_lfd)
        .then(pl.lit("ok"))
        .when(days < 0)
        .then(pl.lit("overdue"))
        .when(days == 0)
        .then(pl.lit("due_today"))
        .when(days <= 3)
        .then(pl.lit("imminent"))
        .when(days <= 7)
        .then(pl.lit("watch"))
        .otherwise(pl.lit("ok")),
        risk_reason=_risk_reason(unknown),
    )
    return rows.select(OUTPUT_COLUMNS)


def _risk_reason(unknown: pl.Expr) -> pl.Expr:
    """Short phrases joined with "; ": what happened or the LFD, holds, availability,
    appointment, staleness (docs/risk-rules.md, "Risk level")."""
    # One concatenation of pieces, each NULL outside its case, rather than phrases built, then
    # picked and joined: building strings is the costly part, so no row builds one it drops.
    # The fixed words are looked up by the flags of their case (_pick) and carry the "; "
    # before them: the first piece (what happened or the LFD) is never NULL.
    col = pl.col
    done, src, days = col("_done"), col("lfd_source"), col("days_to_lfd")

    def only(case: pl.Expr, value: str | pl.Expr) -> pl.Expr:
        return pl.when(case).then(pl.col(value) if isinstance(value, str) else value)

    returned = done & col("empty_terminated_at").is_not_null()
    picked_up = done & ~returned & col("full_out_at").is_not_null()
    estimate = only(unknown, "lfd_estimated")
    posted = col("lfd_date").is_not_null()  # never done: no LFD binds once done
    active = ~done & (posted | col("_discharged"))
    appointment = only(
        active & (col("_appointment_date") >= col("today_local")), "_appointment_date"
    )

    def opening(
        returned: bool,
        picked_up: bool,
        done: bool,
        unknown: bool,
        estimated: bool,
        posted: bool,
        passed: bool,
        yesterday: bool,
        today: bool,
        tomorrow: bool,
    ) -> str:
        if returned:
            return "empty returned "
        if picked_up:
            return "picked up "
        if done:
            return "status "
        if unknown:
            return "discharged, no LFD posted" + (" (tariff estimate " if estimated else "")
        if not posted:
            return "not discharged yet"
        if passed:
            return "LFD passed "
        if yesterday:
            return "LFD was yesterday"
        if today:
            return "LFD today"
        return "LFD tomorrow" if tomorrow else "LFD in "

    def availability_and_appointment(
        active: bool, held: bool, ready: bool, availability_unknown: bool, appointment: bool
    ) -> str | None:
        if not active:
            return None
        available = "" if held or ready else "; not available"
        if available and availability_unknown:
            available = "; availability unknown"
        return available + ("; appointment " if appointment else "; no appointment")

    parts = [
        _pick(
            opening,
            returned=returned,
            picked_up=picked_up,
            done=done,
            unknown=unknown,
            estimated=estimate.is_not_null(),
            posted=posted,
            passed=days < -1,
            yesterday=days == -1,
            today=days == 0,
            tomorrow=days == 1,
        ),
        pl.coalesce(
            only(returned, "_return_date"), only(picked_up, "_full_out_date"), estimate
        ).cast(pl.String),
        only(done & ~returned & ~picked_up, "current_status"),
        only(days.abs() > 1, days.abs()).cast(pl.String),
        _pick(
            lambda estimated, passed, later: (
                ")" if estimated else " days ago" if passed else " days" if later else None
            ),
            estimated=estimate.is_not_null(),
            passed=days < -1,
            later=days > 1,
        ),
        only(src != "rail", "_at_terminal"),
        only(posted, pl.lit(" (")),
        src,
        only(posted, pl.lit(")")),
        only(active, "_holds_phrase"),
        _pick(
            availability_and_appointment,
            active=active,
            held=col("blocking_holds").list.len() > 0,
            ready=col("ready_for_pickup"),
            availability_unknown=col("availability_known") == False,  # noqa: E712 (not NULL)
            appointment=appointment.is_not_null(),
        ),
        appointment.cast(pl.String),
        only(col("stale") & ~done, pl.lit("; stale data")),
    ]
    return pl.concat_str(parts, ignore_nulls=True)


def _pick(phrase: Callable[..., str | None], **flags: pl.Expr) -> pl.Expr:
    """``phrase(**flags)`` with each row's flags (a NULL flag reads as false); NULL where
    ``phrase`` returns None."""
    # a lookup in the table of ``phrase`` over every combination of the flags, by the number
    # their bits make: cheaper than when/then chains of string literals
    names = list(flags)
    table = [
        phrase(**{name: bool(code >> bit & 1) for bit, name in enumerate(names)})
        for code in range(1 << len(names))
    ]
    code = pl.sum_horizontal(
        flags[name].fill_null(False).cast(pl.UInt32) * (1 << bit) for bit, name in enumerate(names)
    )
    return pl.lit(pl.Series(table, dtype=pl.String)).gather(code)
