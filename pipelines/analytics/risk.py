"""Demurrage risk per container, as of an instant: pure polars, LazyFrames in and out.

The rules (also in ``pipelines/analytics/RISK_RULES.md``, which is the long form):

* LFDs are local calendar dates (terminal: ``pod_timezone``; rail: ``final_destination_timezone``;
  line: the destination zone if set, else the port's), decoded from the API's local-midnight-in-UTC
  encoding. ``days_to_lfd`` is a difference of local dates; ``working_days_to_lfd`` counts
  Monday-Friday minus observed US federal holidays in ``(today, lfd]``.
* Binding LFD = the earliest relevant source: terminal until the box leaves the port, rail for
  inland moves, line until done. Ties prefer line, terminal, rail.
* Holds do not stop the clock. Ready = available AND no hold with status ``hold``.
* Fees: the ``total`` line repeats the others and is dropped before summing.
* Cost from the tariff table; the LFD is free, charges start the next day in calendar days, tiers
  counted from the first chargeable day. No tariff or no LFD => ``costed`` false, costs NULL.
* Projected pickup: appointment (today or later), else today if ready, else 3rd working day after
  today with a blocking hold, else the next working day.
* Risk level, first that applies: done; unknown (discharged, no LFD); ok (not discharged, no LFD);
  overdue (< 0 days); due_today (0); imminent (1-3); watch (4-7); ok (> 7).
* ``stale``: terminal not checked for 7 days (or never) or line tracking stopped; shown, it does
  not change the level.

Performance: every step is a vectorised expression. Local dates come from gathered per-zone
offsets, working days from gathered cumulative counts (see ``calendars``); the only eager step is
collecting the distinct zone names (a few values) before building the plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta

import polars as pl

from pipelines.analytics.calendars import ZoneTable, working_calendar
from pipelines.analytics.tariffs import match_tariffs, tier_cost

LEVELS = ("overdue", "due_today", "imminent", "watch", "ok", "unknown", "done")
AT_RISK_LEVELS = ("overdue", "due_today", "imminent")
DONE_STATUSES = ("picked_up", "delivered", "dropped", "empty_returned")
STALE_AFTER = timedelta(days=7)
#: Working days assumed for a blocking hold to clear before pickup (x-ray exam: 2-3 days).
HOLD_CLEAR_WORKING_DAYS = 3

TS = pl.Datetime("us", "UTC")
_S, _B, _I, _F = pl.String, pl.Boolean, pl.Int64, pl.Float64

#: Columns read from each warehouse table, with the dtype compute_risk works on. Missing columns
#: (dlt drops all-NULL columns) are added as typed NULLs.
SCHEMAS: dict[str, dict[str, pl.DataType | type[pl.DataType]]] = {
    "containers": {
        "id": _S, "number": _S, "shipment_id": _S, "pod_terminal_id": _S, "equipment_type": _S,
        "equipment_length": _I, "current_status": _S, "pod_timezone": _S,
        "final_destination_timezone": _S, "empty_terminated_timezone": _S,
        "pod_rail_carrier_scac": _S, "available_for_pickup": _B, "availability_known": _B,
        "holds_at_pod_terminal_known": _B, "fees_at_pod_terminal_known": _B,
        **{c: TS for c in (
            "pickup_lfd_terminal", "pickup_lfd_rail", "pickup_lfd_line", "ind_facility_lfd_on",
            "pickup_appointment_at", "pod_discharged_at", "pod_full_out_at",
            "final_destination_full_out_at", "empty_terminated_at", "terminal_checked_at",
            "pod_rail_loaded_at", "pod_rail_departed_at", "ind_eta_at", "ind_ata_at",
            "ind_rail_unloaded_at",
        )},
    },
    "shipments": {
        "id": _S, "bill_of_lading_number": _S, "shipping_line_scac": _S,
        "port_of_discharge_locode": _S, "destination_locode": _S, "customer_name": _S,
        "pod_timezone": _S, "destination_timezone": _S,
        **{c: TS for c in (
            "pod_eta_at", "pod_ata_at", "pod_original_eta_at", "line_tracking_stopped_at")},
    },
    "container_holds": {"container_id": _S, "name": _S, "status": _S},
    "container_fees": {"container_id": _S, "type": _S, "amount": _F, "currency_code": _S},
    "terminals": {"id": _S, "name": _S, "nickname": _S, "firms_code": _S},
    "ports": {"id": _S, "code": _S, "time_zone": _S},
}


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
    """Select the columns ``SCHEMAS[table]`` names, cast, and add missing ones as NULL."""
    schema = SCHEMAS[table]
    if lf is None:
        return pl.LazyFrame(schema=schema)
    have = lf.collect_schema()
    exprs = []
    for name, dtype in schema.items():
        if name not in have:
            exprs.append(pl.lit(None, dtype=dtype).alias(name))
        elif dtype == TS and isinstance(have[name], pl.Datetime):
            col = pl.col(name)
            tz = getattr(have[name], "time_zone", None)
            col = col.dt.convert_time_zone("UTC") if tz else col.dt.replace_time_zone("UTC")
            exprs.append(col.dt.cast_time_unit("us").alias(name))
        elif have[name] == dtype:
            exprs.append(pl.col(name))
        else:
            exprs.append(pl.col(name).cast(dtype, strict=False).alias(name))
    return lf.select(exprs)


def _distinct_zones(fr: WarehouseFrames) -> list[str | None]:
    """The few distinct IANA names in the zone columns (the one eager step)."""
    parts = [
        fr.containers.select(pl.col(c).unique().alias("z"))
        for c in ("pod_timezone", "final_destination_timezone", "empty_terminated_timezone")
    ] + [
        fr.shipments.select(pl.col(c).unique().alias("z"))
        for c in ("pod_timezone", "destination_timezone")
    ]
    return pl.concat(parts).unique().collect()["z"].to_list()


def _days(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """``a - b`` in whole days for two Date expressions."""
    return a.cast(pl.Int32) - b.cast(pl.Int32)


def _s(expr: pl.Expr) -> pl.Expr:
    return expr.cast(pl.String)


def compute_risk(
    frames: WarehouseFrames | Mapping[str, pl.LazyFrame],
    as_of: datetime,
    tariffs: pl.DataFrame,
) -> pl.LazyFrame:
    """One row per container with LFDs, readiness, fees, costs and a risk level at ``as_of``.

    ``as_of`` must be timezone-aware (a naive value is taken as UTC). ``tariffs`` is the frame
    :func:`pipelines.analytics.load_tariffs` returns. Output columns: see RISK_RULES.md.
    """
    fr = frames if isinstance(frames, WarehouseFrames) else WarehouseFrames.from_mapping(frames)
    if as_of.tzinfo is None:
        as_of = as_of.replace(tzinfo=UTC)
    as_of = as_of.astimezone(UTC)
    zt = ZoneTable(_distinct_zones(fr))
    cal = working_calendar()
    col = pl.col

    ship = fr.shipments.select(
        col("id").alias("shipment_id"), "bill_of_lading_number",
        col("shipping_line_scac").str.to_uppercase().alias("shipping_line_scac"),
        "port_of_discharge_locode", "destination_locode", "customer_name",
        col("pod_timezone").alias("s_pod_tz"), col("destination_timezone").alias("s_dest_tz"),
        "pod_eta_at", "pod_ata_at", "pod_original_eta_at", "line_tracking_stopped_at",
    ).unique("shipment_id", keep="first")
    term = fr.terminals.select(
        col("id").alias("pod_terminal_id"), col("name").alias("pod_terminal_name"),
        col("nickname").alias("pod_terminal_nickname"),
        col("firms_code").alias("pod_terminal_firms_code"),
    ).unique("pod_terminal_id", keep="first")
    holds = fr.container_holds.group_by("container_id").agg(
        col("name").filter(col("status") == "hold").unique().sort().alias("blocking_holds"),
        col("name").filter(col("status") == "pending").unique().sort().alias("pending_holds"),
    )
    fees = fr.container_fees.group_by("container_id").agg(
        col("amount").filter(col("type") != "total").sum().alias("_fees_sum"),
        col("amount").filter(col("type") == "demurrage").sum().alias("_dem_sum"),
        pl.len().alias("_fee_rows"),
    )

    c = (
        fr.containers.rename({"id": "container_id", "number": "container_number"})
        .join(ship, on="shipment_id", how="left")
        .join(term, on="pod_terminal_id", how="left")
        .join(holds, on="container_id", how="left")
        .join(fees, on="container_id", how="left")
    )

    # --- phases --------------------------------------------------------------------------
    inland = (
        pl.any_horizontal(
            col(x).is_not_null()
            for x in (
                "pod_rail_carrier_scac", "pod_rail_loaded_at", "pod_rail_departed_at",
                "ind_eta_at", "ind_ata_at", "ind_rail_unloaded_at", "pickup_lfd_rail",
                "ind_facility_lfd_on", "final_destination_full_out_at",
            )
        )
        | col("current_status").is_in(["on_rail", "awaiting_inland_transfer"])
    ).fill_null(False)
    c = c.with_columns(
        _inland=inland,
        _zi_pod=zt.zone_index(pl.coalesce("pod_timezone", "s_pod_tz")),
        _zi_fd_own=zt.zone_index(col("final_destination_timezone")),
        _zi_dest=zt.zone_index(pl.coalesce("final_destination_timezone", "s_dest_tz")),
        _zi_empty=zt.zone_index(col("empty_terminated_timezone")),
    ).with_columns(
        _zi_pod=col("_zi_pod").fill_null(0),
        _zi_fd=pl.coalesce("_zi_dest", "_zi_pod").fill_null(0),
        _zi_line=pl.coalesce("_zi_fd_own", "_zi_pod").fill_null(0),
        _left_port=pl.any_horizontal(
            col(x).is_not_null()
            for x in ("pod_full_out_at", "pod_rail_loaded_at", "pod_rail_departed_at")
        ),
        full_out_at=pl.when(col("_inland"))
        .then(col("final_destination_full_out_at"))
        .otherwise(col("pod_full_out_at")),
        blocking_holds=col("blocking_holds").fill_null(pl.lit([], dtype=pl.List(pl.String))),
        pending_holds=col("pending_holds").fill_null(pl.lit([], dtype=pl.List(pl.String))),
    ).with_columns(
        _done=(
            col("full_out_at").is_not_null()
            | col("empty_terminated_at").is_not_null()
            | col("current_status").is_in(DONE_STATUSES).fill_null(False)
        ),
    )

    # --- LFDs --------------------------------------------------------------------------
    c = c.with_columns(
        lfd_terminal=zt.local_date(col("pickup_lfd_terminal"), col("_zi_pod")),
        lfd_rail=zt.local_date(
            pl.coalesce("pickup_lfd_rail", "ind_facility_lfd_on"), col("_zi_fd")
        ),
        lfd_line=zt.local_date(col("pickup_lfd_line"), col("_zi_line")),
    )
    rel_line = ~col("_done")
    rel_term = ~col("_done") & ~col("_left_port")
    rel_rail = ~col("_done") & col("_inland")
    c = c.with_columns(
        lfd_date=pl.min_horizontal(
            pl.when(rel_line).then(col("lfd_line")),
            pl.when(rel_term).then(col("lfd_terminal")),
            pl.when(rel_rail).then(col("lfd_rail")),
        ),
        lfd_disagreement_days=pl.when(
            pl.sum_horizontal(
                col(x).is_not_null().cast(pl.Int32)
                for x in ("lfd_line", "lfd_terminal", "lfd_rail")
            ) >= 2
        ).then(
            _days(
                pl.max_horizontal("lfd_line", "lfd_terminal", "lfd_rail"),
                pl.min_horizontal("lfd_line", "lfd_terminal", "lfd_rail"),
            )
        ),
    ).with_columns(
        lfd_source=pl.when(rel_line & (col("lfd_line") == col("lfd_date"))).then(pl.lit("line"))
        .when(rel_term & (col("lfd_terminal") == col("lfd_date"))).then(pl.lit("terminal"))
        .when(rel_rail & (col("lfd_rail") == col("lfd_date"))).then(pl.lit("rail")),
    ).with_columns(
        _zi_bind=pl.when(col("lfd_source") == "terminal").then(col("_zi_pod"))
        .when(col("lfd_source") == "rail").then(col("_zi_fd"))
        .when(col("lfd_source") == "line").then(col("_zi_line"))
        .when(col("_inland") & col("_left_port")).then(col("_zi_fd"))
        .otherwise(col("_zi_pod")),
    ).with_columns(
        today_local=zt.today_expr(as_of, col("_zi_bind")),
        _today_pod=zt.today_expr(as_of, col("_zi_pod")),
    ).with_columns(
        days_to_lfd=_days(col("lfd_date"), col("today_local")),
        working_days_to_lfd=cal.working_days_between(col("today_local"), col("lfd_date")),
    )

    # --- readiness, fees, misc facts -------------------------------------------------------
    discharged = col("pod_discharged_at").is_not_null() | (
        col("_inland") & pl.any_horizontal(
            col("ind_ata_at").is_not_null(), col("ind_rail_unloaded_at").is_not_null()
        )
    )
    fees_reported = col("fees_at_pod_terminal_known").fill_null(False) | (
        col("_fee_rows").fill_null(0) > 0
    )
    dwell_end = pl.coalesce(
        "pod_full_out_at", "pod_rail_loaded_at", "pod_rail_departed_at", pl.lit(as_of, dtype=TS)
    )
    slip_at = pl.coalesce("pod_ata_at", "pod_eta_at")
    c = c.with_columns(
        ready_for_pickup=col("available_for_pickup").fill_null(False)
        & (col("blocking_holds").list.len() == 0),
        _discharged=discharged,
        fees_reported=pl.when(fees_reported).then(col("_fees_sum").fill_null(0.0)),
        demurrage_fee_reported=pl.when(fees_reported).then(col("_dem_sum").fill_null(0.0)),
        dwell_days=pl.when(col("pod_discharged_at").is_not_null()).then(
            ((dwell_end - col("pod_discharged_at")).dt.total_seconds() / 86400).round(1)
        ),
        eta_slip_days=((slip_at - col("pod_original_eta_at")).dt.total_seconds() / 86400).round(1),
        stale=(
            col("terminal_checked_at").is_null()
            | (col("terminal_checked_at") < pl.lit(as_of - STALE_AFTER, dtype=TS))
            | col("line_tracking_stopped_at").is_not_null()
        ),
        _appt_date=zt.local_date(col("pickup_appointment_at"), col("_zi_pod")),
        _full_out_date=zt.local_date(
            col("full_out_at"), pl.when(col("_inland")).then(col("_zi_fd")).otherwise("_zi_pod")
        ),
        _return_date=zt.local_date(
            col("empty_terminated_at"),
            pl.coalesce("_zi_empty", pl.when(col("_inland")).then(col("_zi_fd"))
                        .otherwise("_zi_pod")),
        ),
        _clock_start=pl.when(col("_inland") & col("_left_port")).then(
            zt.local_date(pl.coalesce("ind_rail_unloaded_at", "ind_ata_at"), col("_zi_fd"))
        ).otherwise(zt.local_date(col("pod_discharged_at"), col("_zi_pod"))),
        _tkey_scac=col("shipping_line_scac"),
        _tkey_port=pl.when(col("_inland") & col("destination_locode").is_not_null())
        .then(col("destination_locode")).otherwise(col("port_of_discharge_locode")),
        _tkey_equip=pl.when(col("equipment_type") == "reefer").then(pl.lit("reefer"))
        .otherwise(pl.lit("dry")),
    )

    # --- tariffs ---------------------------------------------------------------------------
    keys = c.select(
        col("_tkey_scac").alias("scac"), col("_tkey_port").alias("port"),
        col("_tkey_equip").alias("equip"),
    ).unique()
    n_tiers = {}
    for charge, prefix in (("demurrage", "d_"), ("detention", "x_")):
        m = match_tariffs(keys, tariffs, charge)
        n_tiers[prefix] = sum(1 for n in m.collect_schema() if n.endswith("_rate"))
        m = m.rename({n: prefix + n for n in m.collect_schema().names()
                      if n not in ("scac", "port", "equip")})
        c = c.join(
            m, left_on=["_tkey_scac", "_tkey_port", "_tkey_equip"],
            right_on=["scac", "port", "equip"], how="left", nulls_equal=True,
        )

    c = c.with_columns(
        lfd_estimated=pl.when(
            col("lfd_date").is_null() & ~col("_done") & col("_clock_start").is_not_null()
            & col("d_free_days").is_not_null()
        ).then(
            pl.when(col("d_free_basis") == "working")
            .then(cal.add_working_days(col("_clock_start"), col("d_free_days")))
            .otherwise(col("_clock_start") + pl.duration(days=col("d_free_days")))
        ),
        _pickup_date=pl.when(col("_appt_date") >= col("today_local")).then(col("_appt_date"))
        .when(col("ready_for_pickup")).then(col("today_local"))
        .when(col("blocking_holds").list.len() > 0)
        .then(cal.add_working_days(col("today_local"), pl.lit(HOLD_CLEAR_WORKING_DAYS)))
        .otherwise(cal.add_working_days(col("today_local"), pl.lit(1))),
        detention_lfd=pl.when(col("x_free_basis") == "working")
        .then(cal.add_working_days(col("_full_out_date"), col("x_free_days")))
        .otherwise(col("_full_out_date") + pl.duration(days=col("x_free_days"))),
        _det_end=pl.coalesce("_return_date", "_today_pod"),
    ).with_columns(
        _cost_lfd=pl.coalesce("lfd_date", "lfd_estimated"),
        days_out=_days(col("_det_end"), col("_full_out_date")),
    )
    has_tariff = col("d_tariff_line").is_not_null()
    costed = has_tariff & (col("_done") | col("_cost_lfd").is_not_null())
    accrued_days = pl.when(~col("_done")).then(
        _days(col("today_local"), col("_cost_lfd")).clip(lower_bound=0)).otherwise(0)
    proj_days = pl.when(~col("_done")).then(
        _days(col("_pickup_date"), col("_cost_lfd")).clip(lower_bound=0)).otherwise(0)
    det_days = _days(col("_det_end"), col("detention_lfd")).clip(lower_bound=0)
    c = c.with_columns(
        costed=costed,
        uncosted_reason=pl.when(~has_tariff).then(pl.lit("no tariff"))
        .when(~costed).then(pl.lit("no LFD")),
        accrued_demurrage=pl.when(costed).then(tier_cost(accrued_days, n_tiers["d_"], "d_")),
        projected_demurrage=pl.when(costed).then(tier_cost(proj_days, n_tiers["d_"], "d_")),
        projected_pickup_date=pl.when(~col("_done")).then(col("_pickup_date")),
        projected_detention=pl.when(col("detention_lfd").is_not_null()).then(
            tier_cost(det_days, n_tiers["x_"], "x_")),
        currency=col("d_currency"),
        demurrage_tariff_line=col("d_tariff_line"),
        detention_tariff_line=pl.when(col("full_out_at").is_not_null()).then(col("x_tariff_line")),
    )

    # --- level and reason ------------------------------------------------------------------
    d = col("days_to_lfd")
    level = (
        pl.when(col("_done")).then(pl.lit("done"))
        .when(col("lfd_date").is_null() & col("_discharged")).then(pl.lit("unknown"))
        .when(col("lfd_date").is_null()).then(pl.lit("ok"))
        .when(d < 0).then(pl.lit("overdue"))
        .when(d == 0).then(pl.lit("due_today"))
        .when(d <= 3).then(pl.lit("imminent"))
        .when(d <= 7).then(pl.lit("watch"))
        .otherwise(pl.lit("ok"))
    )
    c = c.with_columns(risk_level=level)
    place = pl.when(col("lfd_source") != "rail").then(
        pl.concat_str(pl.lit(" at "), pl.coalesce("pod_terminal_nickname", "pod_terminal_name"))
    ).otherwise(pl.lit(""))
    when_txt = (
        pl.when(d < -1).then(pl.concat_str(pl.lit("LFD passed "), _s(-d), pl.lit(" days ago")))
        .when(d == -1).then(pl.lit("LFD was yesterday"))
        .when(d == 0).then(pl.lit("LFD today"))
        .when(d == 1).then(pl.lit("LFD tomorrow"))
        .otherwise(pl.concat_str(pl.lit("LFD in "), _s(d), pl.lit(" days")))
    )
    lfd_phrase = pl.concat_str(
        when_txt, place.fill_null(""), pl.lit(" ("), col("lfd_source"), pl.lit(")")
    )
    first = (
        pl.when(col("_done")).then(
            pl.when(col("empty_terminated_at").is_not_null())
            .then(pl.concat_str(pl.lit("empty returned "), _s(col("_return_date"))))
            .when(col("full_out_at").is_not_null())
            .then(pl.concat_str(pl.lit("picked up "), _s(col("_full_out_date"))))
            .otherwise(pl.concat_str(pl.lit("status "), col("current_status")))
        )
        .when(col("risk_level") == "unknown").then(
            pl.concat_str(
                pl.lit("discharged, no LFD posted"),
                pl.concat_str(pl.lit(" (tariff estimate "), _s(col("lfd_estimated")), pl.lit(")"))
                .fill_null(""),
            )
        )
        .when(col("lfd_date").is_null()).then(pl.lit("not discharged yet"))
        .otherwise(lfd_phrase)
    )
    active = ~col("_done") & (col("lfd_date").is_not_null() | col("_discharged"))
    nb = col("blocking_holds").list.len()
    parts = [
        first,
        pl.when(active & (nb > 0)).then(
            pl.concat_str(col("blocking_holds").list.join(", "), pl.lit(" hold"))),
        pl.when(active & (col("pending_holds").list.len() > 0)).then(
            pl.concat_str(col("pending_holds").list.join(", "), pl.lit(" pending"))),
        pl.when(active & (nb == 0) & ~col("ready_for_pickup")).then(
            pl.when(col("availability_known") == False)  # noqa: E712 (NULL must stay NULL)
            .then(pl.lit("availability unknown")).otherwise(pl.lit("not available"))),
        pl.when(active).then(
            pl.when(col("_appt_date") >= col("today_local"))
            .then(pl.concat_str(pl.lit("appointment "), _s(col("_appt_date"))))
            .otherwise(pl.lit("no appointment"))),
        pl.when(col("stale") & ~col("_done")).then(pl.lit("stale data")),
    ]
    c = c.with_columns(
        risk_reason=pl.concat_str(parts, separator="; ", ignore_nulls=True),
        as_of=pl.lit(as_of, dtype=TS),
        is_inland=col("_inland"),
    )
    return c.select(OUTPUT_COLUMNS)


OUTPUT_COLUMNS = [
    "as_of", "container_id", "container_number", "shipment_id", "bill_of_lading_number",
    "shipping_line_scac", "port_of_discharge_locode", "destination_locode", "pod_terminal_name",
    "pod_terminal_firms_code", "current_status", "customer_name", "equipment_type",
    "equipment_length", "is_inland",
    "risk_level", "risk_reason",
    "lfd_date", "lfd_source", "lfd_line", "lfd_terminal", "lfd_rail", "lfd_disagreement_days",
    "lfd_estimated", "today_local", "days_to_lfd", "working_days_to_lfd",
    "ready_for_pickup", "blocking_holds", "pending_holds", "available_for_pickup",
    "availability_known", "pickup_appointment_at", "projected_pickup_date",
    "fees_reported", "demurrage_fee_reported",
    "costed", "uncosted_reason", "currency", "accrued_demurrage", "projected_demurrage",
    "demurrage_tariff_line",
    "full_out_at", "days_out", "detention_lfd", "projected_detention", "detention_tariff_line",
    "dwell_days", "eta_slip_days", "stale", "terminal_checked_at",
]
