"""The charge engine: who charges what for each container, day by day (polars).

:func:`compute_charges` works on the same :class:`~pipelines.analytics.risk.Clock` as the risk
table (the same LFDs, zones, phases and tariff match), so the two never disagree. Rules (README
and ``docs/risk-rules.md``, "Charges"):

* Charging parties (:data:`PARTIES`), each with its own dates:

  - ``terminal`` / ``demurrage``: the POD terminal's demurrage (storage). LFD: the terminal's
    (``pickup_lfd_terminal``); with ``import_deadlines.pod``, the unified POD deadline unless
    it was selected from the line, then ``pod_lfd_facility_current``. Free time starts the day
    after discharge. Chargeable until the box leaves the port (the earliest of full out, rail
    loading and rail departure), else today; nothing once the box is done with no such date.
  - ``line`` / ``demurrage``: the shipping line's demurrage. LFD: the line's
    (``pickup_lfd_line``); with ``import_deadlines.pod``, the unified POD deadline when it was
    selected from the line, else ``pod_lfd_line_current``. Chargeable until the final pickup
    (full out at the port, or at the inland ramp for inland moves), else today.
  - ``rail`` / ``storage`` (inland moves only): the inland ramp's storage. LFD: the rail LFD.
    Free time starts the day after rail arrival. Chargeable until the final pickup, else today.
  - ``line`` / ``detention`` (once the box is out): free days of the detention tariff after the
    final pickup (``detention_lfd``), chargeable until the empty return, else today.

* The LFD is free; each later day up to the end of chargeable time (that day included) is a
  chargeable day, numbered from 1, priced by the party's tariff: demurrage rows for terminal,
  line and rail, detention rows for detention (:func:`pipelines.analytics.tariffs.tier_cost`,
  day ``k`` costs ``cost(k) - cost(k - 1)``). No LFD, or no end (done with no date), means no
  day; no tariff means days without a rate (``costed`` false), never a zero.
* ``binds`` marks the party whose LFD is the risk table's binding LFD (``lfd_date``,
  ``lfd_source``): the earliest relevant one, the "pick up before" date. The risk table's
  ``accrued_demurrage`` is the sum of that party's day rates; its ``projected_detention`` the
  sum of the detention days'.

Availability and holds on each day come from history, not from here:
:func:`pipelines.history.views.day_flags_sql` adds them to :data:`DAY_COLUMNS` rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from pipelines.analytics.risk import DEM, DET, TS, Clock, WarehouseFrames, clock
from pipelines.analytics.tariffs import tier_cost

#: (party, charge) pairs, in the order rows are listed.
PARTIES = (
    ("terminal", "demurrage"),
    ("line", "demurrage"),
    ("rail", "storage"),
    ("line", "detention"),
)
#: The published tables (schema ``analytics``).
PARTIES_TABLE, DAYS_TABLE = "charges", "charge_days"

#: One row per container and charging party: ``analytics.charges``.
PARTY_COLUMNS: dict[str, pl.DataType | type[pl.DataType]] = {
    "as_of": TS,
    "container_id": pl.String,
    "container_number": pl.String,
    "party": pl.String,
    "charge": pl.String,
    "binds": pl.Boolean,
    "zone": pl.String,
    "free_time_start": pl.Date,
    "lfd_date": pl.Date,
    "lfd_source": pl.String,
    "lfd_column": pl.String,
    "free_days": pl.Int32,
    "chargeable_until": pl.Date,
    "end_reason": pl.String,
    "chargeable_days": pl.Int32,
    "costed": pl.Boolean,
    "uncosted_reason": pl.String,
    "amount": pl.Float64,
    "currency": pl.String,
    "tariff_line": pl.Int32,
}
#: One row per chargeable day of a party: ``analytics.charge_days``.
DAY_COLUMNS: dict[str, pl.DataType | type[pl.DataType]] = {
    "as_of": TS,
    "container_id": pl.String,
    "container_number": pl.String,
    "party": pl.String,
    "charge": pl.String,
    "zone": pl.String,
    "lfd_date": pl.Date,
    "day": pl.Date,
    "day_number": pl.Int32,
    "tier": pl.String,
    "rate": pl.Float64,
    "currency": pl.String,
    "tariff_line": pl.Int32,
}


#: The clock columns the parties read (besides the tariff columns).
_CLOCK_COLUMNS = (
    "container_id",
    "container_number",
    "_zone_pod",
    "_zone_line",
    "_zone_dest",
    "_done",
    "_inland",
    "_left_port",
    "full_out_at",
    "_full_out_date",
    "_return_date",
    "lfd_terminal",
    "lfd_line",
    "lfd_rail",
    "lfd_pod",
    "pod_lfd_facility_current",
    "pod_lfd_line_current",
    "pickup_lfd_rail",
    "ind_facility_lfd_on",
    "_pod_source",
    "lfd_date",
    "lfd_source",
    "detention_lfd",
    "_detention_end",
)


@dataclass
class Charges:
    """The engine's rows, lazily: :attr:`parties` (:data:`PARTY_COLUMNS`) and :attr:`days`
    (:data:`DAY_COLUMNS`). :meth:`collect` computes both from one pass over the clock."""

    clock: Clock
    #: the clock columns the parties read, one row per container
    rows: pl.LazyFrame
    n_tiers: int

    def _base(self, rows: pl.LazyFrame) -> pl.LazyFrame:
        """One row per container and party, with its tier columns and ``_days``."""
        return pl.concat(
            [_party(rows, self.clock, self.n_tiers, p, c) for p, c in PARTIES], how="vertical"
        )

    @property
    def parties(self) -> pl.LazyFrame:
        return _parties(self._base(self.rows), self.n_tiers)

    @property
    def days(self) -> pl.LazyFrame:
        return _days(self._base(self.rows), self.n_tiers)

    def collect(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """``(parties, days)``: the clock is computed once, then each party from it."""
        rows = self.rows.collect(engine="in-memory").lazy()
        base = self._base(rows).collect(engine="in-memory").lazy()
        parties, days = pl.collect_all(
            [_parties(base, self.n_tiers), _days(base, self.n_tiers)], engine="in-memory"
        )
        return parties, days


def compute_charges(
    frames: WarehouseFrames | Mapping[str, pl.LazyFrame] | Clock,
    as_of: datetime | None = None,
    tariffs: pl.DataFrame | None = None,
) -> Charges:
    """Every container's charges at ``as_of`` with ``tariffs`` (as for
    :func:`pipelines.analytics.compute_risk`), or those of an existing :class:`Clock`."""
    if isinstance(frames, Clock):
        c = frames
    else:
        if as_of is None or tariffs is None:
            raise ValueError("compute_charges needs as_of and tariffs with warehouse frames")
        c = clock(frames, as_of, tariffs)
    tariff_columns = [n for n in c.rows.collect_schema().names() if n.startswith((DEM, DET))]
    rows = c.rows.with_columns(**_party_inputs(c)).select(
        *_CLOCK_COLUMNS, *_party_inputs(c), *tariff_columns
    )
    return Charges(c, rows, max(c.tiers.values()))


def _tier_columns(n_tiers: int) -> list[str]:
    return [f"t{k}_{f}" for k in range(n_tiers) for f in ("start", "end", "rate")]


def _parties(base: pl.LazyFrame, n_tiers: int) -> pl.LazyFrame:
    days = pl.col("_days").fill_null(0)
    return base.with_columns(
        chargeable_days=days,
        amount=pl.when(pl.col("costed")).then(tier_cost(days, n_tiers)),
    ).select(list(PARTY_COLUMNS))


def _days(base: pl.LazyFrame, n_tiers: int) -> pl.LazyFrame:
    k = pl.col("day_number")
    kept = [c for c in DAY_COLUMNS if c not in ("day", "day_number", "tier", "rate")]
    return (
        base.filter(pl.col("_days") > 0)
        .select(*kept, "costed", "_days", *_tier_columns(n_tiers))  # narrow before exploding
        .with_columns(day_number=pl.int_ranges(1, pl.col("_days") + 1, dtype=pl.Int32))
        .explode("day_number")
        .with_columns(
            day=(pl.col("lfd_date").cast(pl.Int32) + k).cast(pl.Date),
            tier=_tier_label(k, n_tiers),
            rate=pl.when(pl.col("costed")).then(
                (tier_cost(k, n_tiers) - tier_cost(k - 1, n_tiers)).round(6)
            ),
        )
        .select(list(DAY_COLUMNS))
    )


def _party_inputs(c: Clock) -> dict[str, pl.Expr]:
    """Per-container dates the parties share, beyond the clock's."""
    col = pl.col
    pod = col("_zone_pod")
    left = {
        "full out": c.local_date("pod_full_out_at", pod),
        "rail departure": c.local_date("pod_rail_departed_at", pod),
        "rail loading": c.local_date("pod_rail_loaded_at", pod),
    }
    left_date = pl.min_horizontal(*left.values())
    reason = pl.lit(None, dtype=pl.String)
    for name, day in reversed(left.items()):  # ties name full out, then rail departure
        reason = pl.when(day == left_date).then(pl.lit(name)).otherwise(reason)
    has_pod = col("has_pod_deadlines").fill_null(False)
    return {
        "_has_pod": has_pod,
        "_pod_from_line": has_pod
        & col("pod_lfd_unified_selection").str.starts_with("line").fill_null(False),
        "_discharge_date": c.local_date("pod_discharged_at", pod),
        "_left_port_date": left_date,
        "_left_port_reason": reason,
        "_rail_arrival_date": c.local_date(
            pl.coalesce("ind_rail_unloaded_at", "ind_ata_at"), col("_zone_dest")
        ),
    }


def _party(rows: pl.LazyFrame, c: Clock, n_tiers: int, party: str, charge: str) -> pl.LazyFrame:
    """The :data:`PARTY_COLUMNS` rows of one party (plus ``_days`` and the tier columns)."""
    col, lit = pl.col, pl.lit
    has_pod, from_line, done = col("_has_pod"), col("_pod_from_line"), col("_done")
    final_out = col("full_out_at").is_not_null()

    def until(
        zone: pl.Expr, out: pl.Expr, out_date: pl.Expr, reason: pl.Expr
    ) -> dict[str, pl.Expr]:
        return {
            "chargeable_until": pl.when(out).then(out_date).when(~done).then(c.today_in(zone)),
            "end_reason": pl.when(out)
            .then(reason)
            .when(done)
            .then(lit("done, no date"))
            .otherwise(lit("today")),
        }

    if party == "terminal":
        zone = col("_zone_pod")
        spec = {
            "lfd_date": pl.when(has_pod)
            .then(pl.when(from_line).then("pod_lfd_facility_current").otherwise("lfd_pod"))
            .otherwise("lfd_terminal"),
            "lfd_source": pl.when(has_pod)
            .then(pl.when(from_line).then(lit("pod_facility_current")).otherwise("_pod_source"))
            .otherwise(lit("terminal")),
            "lfd_column": pl.when(has_pod)
            .then(
                pl.when(from_line)
                .then(lit("pod_lfd_facility_current"))
                .otherwise(lit("pod_lfd_unified"))
            )
            .otherwise(lit("pickup_lfd_terminal")),
            "free_time_start": col("_discharge_date") + pl.duration(days=1),
            **until(
                zone,
                col("_left_port"),
                col("_left_port_date"),
                col("_left_port_reason"),
            ),
        }
        keep = pl.lit(True)
    elif party == "line" and charge == "demurrage":
        zone = pl.when(has_pod).then(col("_zone_pod")).otherwise(col("_zone_line"))
        spec = {
            "lfd_date": pl.when(has_pod)
            .then(pl.when(from_line).then("lfd_pod").otherwise("pod_lfd_line_current"))
            .otherwise("lfd_line"),
            "lfd_source": pl.when(has_pod)
            .then(pl.when(from_line).then("_pod_source").otherwise(lit("pod_line_current")))
            .otherwise(lit("line")),
            "lfd_column": pl.when(has_pod)
            .then(
                pl.when(from_line)
                .then(lit("pod_lfd_unified"))
                .otherwise(lit("pod_lfd_line_current"))
            )
            .otherwise(lit("pickup_lfd_line")),
            "free_time_start": col("_discharge_date") + pl.duration(days=1),
            **until(zone, final_out, col("_full_out_date"), lit("full out")),
        }
        keep = pl.lit(True)
    elif party == "rail":
        zone = col("_zone_dest")
        spec = {
            "lfd_date": col("lfd_rail"),
            "lfd_source": lit("rail"),
            "lfd_column": pl.when(col("pickup_lfd_rail").is_not_null())
            .then(lit("pickup_lfd_rail"))
            .when(col("ind_facility_lfd_on").is_not_null())
            .then(lit("ind_facility_lfd_on")),
            "free_time_start": col("_rail_arrival_date") + pl.duration(days=1),
            **until(zone, final_out, col("_full_out_date"), lit("full out")),
        }
        keep = col("_inland")
    else:  # detention
        zone = col("_zone_pod")
        spec = {
            "lfd_date": col("detention_lfd"),
            "lfd_source": lit("detention tariff"),
            "lfd_column": lit(None, dtype=pl.String),
            "free_time_start": col("_full_out_date") + pl.duration(days=1),
            "chargeable_until": col("_detention_end"),
            "end_reason": pl.when(col("_return_date").is_not_null())
            .then(lit("empty return"))
            .otherwise(lit("today")),
        }
        keep = final_out
    prefix = DET if charge == "detention" else DEM
    tariff_cols = [
        col(f"{prefix}t{k}_{f}").alias(f"t{k}_{f}")
        if k < c.tiers[prefix]
        else lit(None, dtype=pl.Float64 if f == "rate" else pl.Int32).alias(f"t{k}_{f}")
        for k in range(n_tiers)
        for f in ("start", "end", "rate")
    ]
    lfd, end = col("lfd_date"), col("chargeable_until")
    has_tariff = col("tariff_line").is_not_null()
    out = (
        rows.filter(keep)
        .select(
            "container_id",
            "container_number",
            zone.cast(pl.String).alias("zone"),
            *(e.alias(k) for k, e in spec.items()),
            col(prefix + "tariff_line").alias("tariff_line"),
            col(prefix + "currency").alias("currency"),
            *tariff_cols,
            _binding_date=col("lfd_date"),
            _binding_source=col("lfd_source"),
        )
        .with_columns(
            as_of=pl.lit(c.as_of, dtype=TS),
            party=lit(party),
            charge=lit(charge),
            free_days=(lfd.cast(pl.Int32) - col("free_time_start").cast(pl.Int32) + 1),
            _days=(end.cast(pl.Int32) - lfd.cast(pl.Int32)).clip(lower_bound=0),
        )
        .with_columns(
            binds=(
                (col("_binding_date") == lfd) & (col("_binding_source") == col("lfd_source"))
            ).fill_null(False),
            costed=has_tariff & col("_days").is_not_null(),
            uncosted_reason=pl.when(~has_tariff)
            .then(lit("no tariff"))
            .when(lfd.is_null())
            .then(lit("no LFD"))
            .when(end.is_null())
            .then(lit("end unknown")),
        )
    )
    return out.select(
        *[k for k in PARTY_COLUMNS if k not in ("chargeable_days", "amount")],
        "_days",
        *_tier_columns(n_tiers),
    )


def _tier_label(day: pl.Expr, n_tiers: int) -> pl.Expr:
    """The tier ``day`` falls in, as the tariff writes it (``1-4``, ``10+``)."""
    label = pl.lit(None, dtype=pl.String)
    for k in reversed(range(n_tiers)):
        start, end = pl.col(f"t{k}_start"), pl.col(f"t{k}_end")
        inside = (start <= day) & (end.is_null() | (day <= end))
        text = (
            pl.when(end.is_null())
            .then(pl.format("{}+", start))
            .otherwise(pl.format("{}-{}", start, end))
        )
        label = pl.when(inside).then(text).otherwise(label)
    return label
