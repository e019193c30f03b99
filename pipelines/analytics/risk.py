"""Demurrage risk per container, as of an instant: pure polars, LazyFrames in and out.

The rules (the long form is the README's section "Demurrage risk: the rules"):

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

Performance (``benchmarks/bench_risk.py --breakdown`` shows where the time goes):

* Eager preparation (:func:`risk_plan`): the inputs are collected once, together with the
  per-shipment columns, the distinct zone names and the min/max of the instants. Each container
  gets the row index of its shipment (a left join on 64-bit key hashes) and each hold and fee
  the row index of its container (an inner join, the same way), by which the holds and fees are
  aggregated; every hash match is checked against the key strings. Those joins run in polars'
  streaming engine, beside the Python that builds the small tables. Zones, carriers, ports and
  terminals become small integer codes.
* Row level: the first ``with_columns`` layer gathers the shipments' and aggregates' columns by
  those row indexes; then layers of integer arithmetic and gathers from small tables built
  for the value ranges present: per-zone "today" constants, local dates from an hourly date table
  (whole-hour zones, instants inside the calendar window; else per-zone offsets), tariff rows by
  a dense (carrier, port, equipment) code, costs and estimated LFDs from (tariff row, days)
  tables, and ``risk_reason`` from phrase tables (an integer code per row; each distinct
  sentence is concatenated once per row block, then gathered). When a
  range is too wide for a table, the same quantity comes from the general formula instead (same
  result, slower). Row blocks are evaluated in parallel.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
from polars._typing import EngineType
from polars._typing import PolarsDataType as PolarsDType

from pipelines.analytics.calendars import (
    _EPOCH,
    _N_DAYS,
    _START_DAY,
    WorkingCalendar,
    ZoneTable,
    working_calendar,
)
from pipelines.analytics.tariffs import match_tariffs

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


def _days(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """``a - b`` in whole days for two Date expressions."""
    return a.cast(pl.Int32) - b.cast(pl.Int32)


_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1


def _phys(name: str, sentinel: int, cond: pl.Expr | None = None) -> pl.Expr:
    """Int32 days of Date column ``name`` (only where ``cond``), NULL replaced by ``sentinel``."""
    x = pl.col(name).to_physical()
    return (x if cond is None else pl.when(cond).then(x)).fill_null(sentinel)


def _s(expr: pl.Expr) -> pl.Expr:
    return expr.cast(pl.String)


def _gather(values: Sequence[object] | pl.Series, idx: pl.Expr, dtype: PolarsDType) -> pl.Expr:
    """``values[idx]`` per row (NULL index -> NULL): a gather from a small literal Series."""
    s = values if isinstance(values, pl.Series) else pl.Series(list(values), dtype=dtype)
    if s.len() == 0:
        return pl.lit(None, dtype=dtype)
    return pl.lit(s.cast(dtype)).gather(idx)


def _codes(names: Sequence[str]) -> Callable[[pl.Expr], pl.Expr]:
    """Position of a String expression's value in ``names`` (UInt32; NULL if NULL or absent).

    A cast to an Enum of ``names``: on polars 2 this is faster than comparing 64-bit hashes
    with each name (14 ms against 26 ms for a million zone names of three values).
    """
    if not names:
        return lambda e: pl.lit(None, dtype=pl.UInt32)
    enum = pl.Enum(list(names))
    return lambda e: e.cast(enum, strict=False).to_physical().cast(pl.UInt32)


#: Set to a list to record ``(stage, wall s, cpu s)`` of the eager preparation (benchmarks).
TIMINGS: list[tuple[str, float, float]] | None = None
_last: list[float] = [0.0, 0.0]


def _mark(stage: str | None) -> None:
    if TIMINGS is None:
        return
    now = [time.perf_counter(), time.process_time()]
    if stage is not None:
        TIMINGS.append((stage, now[0] - _last[0], now[1] - _last[1]))
    _last[:] = now


#: The categories of the containers' and shipments' zone-name columns (codes shared by every
#: call; the distinct zone names are few).
_ZONE_NAMES = pl.Categories("freetime_risk_zone_names")
_CONTAINER_ZONES = ("pod_timezone", "final_destination_timezone", "empty_terminated_timezone")
_SHIPMENT_ZONES = ("_s_pod_tz", "_s_dest_tz")

#: Join on 64-bit hashes of the keys (verified against the strings; exact either way).
HASH_JOIN = True
#: polars' engine for the joins of :func:`_row_indexes` and :func:`_per_container`. Two joins
#: of 1,000,000 rows in one ``collect_all`` took 87 ms in the in-memory engine (which runs them
#: one against the other) and 36 ms in the streaming one, whose rows then come back unordered
#: (13 ms to scatter). compute_risk of 1M rows, 12 alternating runs: best 441 ms against 489,
#: median 494 against 516; it costs about 70 MB more at the peak (909 MB against 838).
_JOIN_ENGINE: EngineType = "streaming"


def _key_hash(key: pl.Expr) -> pl.Expr:
    """The 64-bit hash a join runs on (NULL stays NULL)."""
    return pl.when(key.is_not_null()).then(key.hash())


def _keys(k: pl.Series, hashed: bool) -> pl.LazyFrame:
    """``k`` as the join key column ``k``: its hashes (:func:`_key_hash`) or the strings."""
    lf = pl.LazyFrame({"k": k})
    return lf.select(_key_hash(pl.col("k")).alias("k")) if hashed else lf


def _in_left_order(df: pl.DataFrame, n: int) -> pl.Series:
    """``_i`` of a join result with one row per left row ``_l`` in ``0..n-1``, in ``_l`` order."""
    if df.height == n and df["_l"].is_sorted():
        return df["_i"]
    out = pl.repeat(None, n, dtype=pl.UInt32, eager=True).alias("_i")
    return out.scatter(df["_l"], df["_i"])


def _row_indexes(pairs: Sequence[tuple[pl.Series, pl.Series]]) -> list[pl.Series]:
    """For each ``(left, right)``: per value of ``left``, the row of ``right`` holding it.

    NULL when absent or NULL; ``right``'s non-NULL values must be unique. Left joins (run in
    parallel), on the strings' 64-bit hashes when those are unique on the right; every match is
    then checked against the strings, and a mismatch (a hash collision) falls back to the join
    on the strings themselves. Exact either way.
    """
    def join(lk: pl.Series, rk: pl.Series, hashed: bool) -> pl.LazyFrame:
        right = _keys(rk, hashed).with_row_index("_i").with_columns(pl.col("_i").cast(pl.UInt32))
        # in any order, each row with its left row index: maintain_order="left" costs more than
        # the scatter that puts the rows back in order (1M rows: 34 ms against 13 + 5 ms)
        return _keys(lk, hashed).with_row_index("_l").join(
            right.drop_nulls("k"), on="k", how="left").select("_l", "_i")

    # the hash joins and the checks that the right side's hashes are unique, all in parallel
    unique = [_keys(rk, True).drop_nulls().select(pl.col("k").n_unique() == pl.len())
              for _, rk in pairs]
    plans = [join(lk, rk, HASH_JOIN) for lk, rk in pairs]
    done = pl.collect_all([*plans, *unique], engine=_JOIN_ENGINE)
    out = [_in_left_order(df, lk.len())
           for df, (lk, _) in zip(done[:len(pairs)], pairs, strict=True)]
    if not HASH_JOIN:
        return out
    # a hash join is kept when the right side's hashes are unique and every match is a string
    # match (checked in parallel); otherwise (a collision) the join runs on the strings
    ok = [bool(df.item()) for df in done[len(pairs):]]
    checked = [n for n in range(len(pairs)) if ok[n]]
    checks = pl.collect_all([
        pl.LazyFrame({"k": pairs[n][0], "_i": out[n]}).select(
            (pl.col("k") == pl.lit(pairs[n][1]).gather(pl.col("_i"))).fill_null(True).all())
        for n in checked
    ], engine=_JOIN_ENGINE)
    for n, check in zip(checked, checks, strict=True):
        ok[n] = bool(check.item())
    for n, (lk, rk) in enumerate(pairs):
        if not ok[n]:
            out[n] = _in_left_order(join(lk, rk, False).collect(engine=_JOIN_ENGINE), lk.len())
    return out


def _per_container(
    ids: pl.Series, parts: Sequence[tuple[pl.LazyFrame, Sequence[pl.Expr]]]
) -> list[pl.DataFrame]:
    """For each ``(rows, aggs)``: ``aggs`` of ``rows`` grouped by ``_row``, the row of ``ids``
    holding each row's ``container_id`` (rows of no container left out; an id held by several
    rows of ``ids`` gives each of them its group).

    Grouping by that row number replaces a grouping by the id strings and a join of the groups
    to the containers. The rows are joined to ``ids`` on the strings' 64-bit hashes and every
    match is checked against the strings; a mismatch (a hash collision) falls back to the join
    on the strings themselves. Exact either way. compute_risk of 1M rows, 16 alternating runs:
    median 479 ms against 540 with the holds and fees grouped by id and joined.
    """
    def plans(hashed: bool) -> list[pl.LazyFrame]:
        right = _keys(ids, hashed).with_row_index("_row").drop_nulls("k")
        key = _key_hash(pl.col("container_id")) if hashed else pl.col("container_id")
        out = []
        for rows, aggs in parts:
            joined = rows.with_columns(k=key).join(right, on="k", how="inner")
            if hashed:
                joined = joined.with_columns(
                    _ok=pl.col("container_id") == pl.lit(ids).gather(pl.col("_row")))
                aggs = [*aggs, pl.col("_ok").all()]
            out.append(joined.group_by("_row").agg(*aggs))
        return out

    done = pl.collect_all(plans(HASH_JOIN), engine=_JOIN_ENGINE)
    if HASH_JOIN:
        if all(df["_ok"].all() for df in done):
            return [df.drop("_ok") for df in done]
        done = pl.collect_all(plans(False), engine=_JOIN_ENGINE)
    return done


# --- eager preparation: the small tables the row-level plan gathers from --------------------


#: Bits of the per-container holds mask: two per hold name (hold, pending), NULL name first.
_MASK_BITS = 62


def _bit_values() -> pl.Expr:
    """``1 << i`` for each bit ``i`` of the mask, as a literal to gather from."""
    return pl.lit(pl.Series([1 << i for i in range(_MASK_BITS)], dtype=pl.Int64))


def _decode_holds(masks: pl.DataFrame, names: Sequence[str]) -> pl.DataFrame:
    """``_row, _mask`` to the holds columns: ``blocking_holds``, ``pending_holds``
    (sorted, unique; a NULL name first), ``_nb`` and the ``_holds_txt`` phrase, built once
    per distinct mask. ``names`` are the sorted distinct names (bit ``2 * (rank) + pending``,
    rank 0 for NULL)."""
    by_code: list[str | None] = [None, *names]
    rows = []
    for m in masks["_mask"].unique().to_list():
        blocking = [n for c, n in enumerate(by_code) if m >> (2 * c) & 1]
        pending = [n for c, n in enumerate(by_code) if m >> (2 * c + 1) & 1]
        txt = "".join(  # as list.join does: NULL names left out of the text
            f"; {', '.join(n for n in listed if n is not None)} {what}"
            for listed, what in ((blocking, "hold"), (pending, "pending")) if listed
        )
        rows.append((m, blocking, pending, len(blocking), txt))
    table = pl.DataFrame(rows, orient="row", schema={
        "_mask": pl.Int64, "blocking_holds": pl.List(pl.String),
        "pending_holds": pl.List(pl.String), "_nb": pl.UInt32, "_holds_txt": pl.String,
    })
    return masks.join(table, on="_mask", how="left").drop("_mask")


def _when_txt(d: pl.Expr) -> pl.Expr:
    """The "LFD in 3 days" phrase for a days-to-LFD expression."""
    return (
        pl.when(d < -1).then(pl.concat_str(pl.lit("LFD passed "), _s(-d), pl.lit(" days ago")))
        .when(d == -1).then(pl.lit("LFD was yesterday"))
        .when(d == 0).then(pl.lit("LFD today"))
        .when(d == 1).then(pl.lit("LFD tomorrow"))
        .otherwise(pl.concat_str(pl.lit("LFD in "), _s(d), pl.lit(" days")))
    )


def _date_strings(lo: int, hi: int) -> pl.Series:
    """ISO strings of the dates ``lo..hi`` (days since the epoch), formatted by polars."""
    return pl.int_range(lo, hi + 1, dtype=pl.Int32, eager=True).cast(pl.Date).cast(pl.String)


#: Largest phrase table the fast ``risk_reason`` path builds; wider data ranges (e.g. a stray
#: year-1900 timestamp) take the generic string-building path instead.
MAX_PHRASE_TABLE = 200_000
#: Local dates by one gather from the hourly table when every instant is inside its window.
HOURLY_DATES = True
#: Largest per-charge (tariff rows x days) cost table; beyond it costs use the tier formula.
MAX_COST_TABLE = 500_000


@dataclass
class _Charge:
    """One charge's tariff rows as arrays, and ``key code -> row`` for every possible key."""

    row_of_key: pl.Series  # UInt32 row per key code (NULL: no tariff)
    line: pl.Series
    free_days: pl.Series
    working: pl.Series
    currency: pl.Series
    free_min: int | None
    free_max: int | None
    # tier_cost(days) for days <= last_start: table[offset + days]; above it:
    # prefix + (days - last_start + 1) * last_rate (exactly tier_cost's float operations).
    table: pl.Series
    offset: pl.Series
    last_start: pl.Series
    prefix: pl.Series
    last_rate: pl.Series
    #: when set: ``costs[row * width + days]`` for every row and 0 <= days < width
    width: int = 0
    costs: pl.Series | None = None
    #: when set: the estimated LFD ``ends[row * n_days + day - first_day]`` for the clock
    #: start days ``first_day .. first_day + n_days - 1``
    ends: pl.Series | None = None
    first_day: int = 0
    n_days: int = 0

    def use_days(self, cal: WorkingCalendar, days: Range) -> None:
        """Tabulate :meth:`estimate` for clock starts in ``days`` (if the table stays small)."""
        n, rows = days[1] - days[0] + 1, self.line.len()
        if n <= 0 or rows == 0 or n * rows > MAX_COST_TABLE:
            return
        start = pl.int_range(days[0], days[1] + 1, dtype=pl.Int32, eager=True).cast(pl.Date)
        grid = pl.DataFrame({
            "_d": pl.int_range(rows, dtype=pl.UInt32, eager=True).repeat_by(n).explode(),
            "_clock_start": pl.concat([start] * rows),
        })
        ends = grid.select(self.estimate(cal, pl.col("_clock_start"), pl.col("_d")))
        self.ends = ends.to_series().rechunk()
        self.first_day, self.n_days = days[0], n

    def estimate(self, cal: WorkingCalendar, start: pl.Expr, idx: pl.Expr) -> pl.Expr:
        """The LFD ``free_days`` (working or calendar) after ``start`` under tariff row ``idx``."""
        if self.ends is not None:
            return pl.lit(self.ends).gather(
                idx.cast(pl.Int64) * self.n_days + start.cast(pl.Int64) - self.first_day)
        free = self.at(self.free_days, idx)
        return pl.when(start.is_not_null() & free.is_not_null()).then(
            pl.when(self.at(self.working, idx))
            .then(cal.add_working_days(start, free))
            .otherwise((start.cast(pl.Int32) + free).cast(pl.Date))
        )

    def at(self, s: pl.Series, idx: pl.Expr) -> pl.Expr:
        return _gather(s, idx, s.dtype)

    def use_width(self, width: int) -> None:
        """Tabulate the cost of 0..width-1 days for every row (if the table stays small)."""
        n = self.line.len()
        if n == 0 or width * n > MAX_COST_TABLE:
            return
        tab, offs = self.table.to_list(), self.offset.to_list()
        starts, prefixes = self.last_start.to_list(), self.prefix.to_list()
        rates = self.last_rate.to_list()
        out: list[float | None] = []
        for o, st, pre, rate in zip(offs, starts, prefixes, rates, strict=True):
            if o is None:
                out += [None] * width
                continue
            # the same float operations as the formula branch of cost()
            out += [tab[o + d] if d <= st else pre + float(d - st + 1) * rate
                    for d in range(width)]
        self.width, self.costs = width, pl.Series(out, dtype=pl.Float64)

    def cost(self, days: pl.Expr, idx: pl.Expr) -> pl.Expr:
        """:func:`tier_cost` of ``days`` (>= 0) under tariff row ``idx``, by table lookup.

        With :meth:`use_width`, ``days`` must be below the width (the caller's bounds).
        """
        if self.table.len() == 0:
            return pl.lit(None, dtype=pl.Float64)
        if self.costs is not None:
            return pl.lit(self.costs).gather(idx.cast(pl.Int64) * self.width + days)
        last = self.at(self.last_start, idx)
        tab = pl.lit(self.table).gather(
            self.at(self.offset, idx) + pl.min_horizontal(days, last).cast(pl.Int64))
        lin = self.at(self.prefix, idx) + (days - last + 1) * self.at(self.last_rate, idx)
        return pl.when(days <= last).then(tab).otherwise(lin)


def _charge(tariffs: pl.DataFrame, charge: str, keys: pl.DataFrame) -> _Charge:
    t = tariffs.filter(pl.col("charge") == charge)
    matched = match_tariffs(keys.lazy().drop("_code"), tariffs, charge).collect()
    rows = t.with_row_index("_row").select("tariff_line", "_row")
    row_of_key = (
        keys.join(matched.select("scac", "port", "equip", "tariff_line"),
                  on=["scac", "port", "equip"], how="left", nulls_equal=True)
        .join(rows, on="tariff_line", how="left")
        .sort("_code")["_row"]
    )
    # the tier columns tier_cost sees: every row padded to the charge's largest tier count
    n_tiers = max([1, *[n for n in t["tiers"].list.len().to_list() if n is not None]])
    table: list[float] = []
    offset, last_start, prefix, last_rate = [], [], [], []
    for tiers in t["tiers"].to_list():
        tiers = list(tiers or [])
        padded = tiers + [None] * (n_tiers - len(tiers))

        def cost(days: int, padded: list[dict[str, Any] | None] = padded) -> float:
            total = 0.0
            for tier in padded:
                if tier is None or tier["rate"] is None or tier["start"] is None:
                    total = total + 0.0
                    continue
                end = days if tier["end"] is None else min(days, tier["end"])
                total = total + max(end - tier["start"] + 1, 0) * tier["rate"]
            return total

        last = tiers[-1] if tiers else None
        ok = (last is not None and last["end"] is None and last["start"] is not None
              and last["rate"] is not None)
        start = int(last["start"]) if ok and last is not None else 0
        offset.append(len(table) if ok else None)
        last_start.append(start if ok else None)
        table += [cost(d) for d in range(start + 1)] if ok else []
        prefix.append(cost(start - 1) if ok and start >= 1 else (0.0 if ok else None))
        last_rate.append(last["rate"] if ok and last is not None else None)
    free = t["free_days"].drop_nulls()
    return _Charge(
        row_of_key=row_of_key.cast(pl.UInt32),
        line=t["tariff_line"], free_days=t["free_days"],
        working=t["free_basis"] == "working", currency=t["currency"],
        free_min=free.min() if free.len() else None,  # type: ignore[arg-type]
        free_max=free.max() if free.len() else None,  # type: ignore[arg-type]
        table=pl.Series(table, dtype=pl.Float64), offset=pl.Series(offset, dtype=pl.Int64),
        last_start=pl.Series(last_start, dtype=pl.Int32),
        prefix=pl.Series(prefix, dtype=pl.Float64),
        last_rate=pl.Series(last_rate, dtype=pl.Float64),
    )


_TS_STATS = (
    "pickup_lfd_terminal", "pickup_lfd_rail", "ind_facility_lfd_on", "pickup_lfd_line",
    "empty_terminated_at", "pod_full_out_at", "final_destination_full_out_at",
    "pickup_appointment_at", "pod_discharged_at", "ind_ata_at", "ind_rail_unloaded_at",
)
_DAY_US = 86_400_000_000


def _day_bounds(stats: dict[str, int | None], names: Sequence[str]) -> tuple[int, int] | None:
    """Bounds of the local dates (days since the epoch) of the instants in columns ``names``.

    A local date is within one day of the UTC date (offsets are under 24 h).
    """
    lo = [stats[f"{n}_min"] for n in names if stats[f"{n}_min"] is not None]
    hi = [stats[f"{n}_max"] for n in names if stats[f"{n}_max"] is not None]
    if not lo or not hi:
        return None
    return min(lo) // _DAY_US - 1, max(hi) // _DAY_US + 1  # type: ignore[type-var,operator]


def _add_working_days_py(cal: WorkingCalendar, day: int, n: int) -> int:
    """Scalar :meth:`WorkingCalendar.add_working_days` (days since the epoch)."""
    idx = min(max(day - _START_DAY, 0), _N_DAYS - 1)
    k = min(max(int(cal.cum[idx]) + n, 0), len(cal.nth) - 1)
    return (cal.nth[k] - _EPOCH).days  # type: ignore[no-any-return]


@dataclass
class _Phrases:
    """Tables for the fast ``risk_reason`` path: every phrase is one gather, no formatting."""

    first: pl.Series  # 0 not discharged yet, 1 discharged no LFD, 2 "status ", then blocks
    o_empty: int
    lo_empty: int
    o_picked: int
    lo_picked: int
    o_est: int
    lo_est: int
    o_lfd: int
    lo_lfd: int
    tail: pl.Series  # index (avail * 2 + stale) * (n_appt + 2) + appt
    n_appt: int
    lo_appt: int


Range = tuple[int, int]  # inclusive bounds in days since the epoch; lo > hi when empty
_EMPTY: Range = (0, -1)


def _union(*rs: Range) -> Range:
    rs = tuple(r for r in rs if r[0] <= r[1])
    return (min(r[0] for r in rs), max(r[1] for r in rs)) if rs else _EMPTY


def _shifted(cal: WorkingCalendar, r: Range, lo_n: int | None, hi_n: int | None) -> Range:
    """Bounds of ``r + n`` days and of ``n`` working days after ``r`` (both are monotone)."""
    if r[0] > r[1] or lo_n is None or hi_n is None:
        return _EMPTY
    return (min(r[0] + lo_n, _add_working_days_py(cal, r[0], lo_n)),
            max(r[1] + hi_n, _add_working_days_py(cal, r[1], hi_n)))


def _ranges(
    stats: dict[str, int | None], todays: Sequence[int], cal: WorkingCalendar, dem: _Charge,
    det: _Charge,
) -> dict[str, Range]:
    """Bounds of every date the row-level plan derives, from the input instants' min/max."""
    def b(*names: str) -> Range:
        return _day_bounds(stats, names) or _EMPTY

    today = (min(todays), max(todays))
    lfd = b("pickup_lfd_terminal", "pickup_lfd_rail", "ind_facility_lfd_on", "pickup_lfd_line")
    clock = b("pod_discharged_at", "ind_ata_at", "ind_rail_unloaded_at")
    est = _shifted(cal, clock, dem.free_min, dem.free_max)
    picked = b("pod_full_out_at", "final_destination_full_out_at")
    appt = b("pickup_appointment_at")
    appt = (max(appt[0], today[0]), appt[1])  # only appointments today or later are shown
    wd = [_add_working_days_py(cal, t, n) for t in todays for n in (1, HOLD_CLEAR_WORKING_DAYS)]
    r = {
        "today": today, "lfd": lfd, "est": est, "clock": clock, "picked": picked, "appt": appt,
        "empty": b("empty_terminated_at"),
        "d": (lfd[0] - today[1], lfd[1] - today[0]) if lfd[0] <= lfd[1] else _EMPTY,
        "cost_lfd": _union(lfd, est),
        "pickup": _union(appt, today, (min(wd), max(wd))),
        "det_lfd": _shifted(cal, picked, det.free_min, det.free_max),
    }
    r["det_end"] = _union(r["empty"], today)
    return r


def _width(*spans: tuple[Range, Range]) -> int:
    """1 + the largest ``hi - lo`` day count over (later, earlier) range pairs (0 if none)."""
    days = [a[1] - e[0] for a, e in spans if a[0] <= a[1] and e[0] <= e[1]]
    return max([0, *days]) + 1


def _phrases(r: dict[str, Range]) -> _Phrases | None:
    """Build the phrase tables for the value ranges present, or None if one would be too big."""
    empty, picked, est, d, appt = r["empty"], r["picked"], r["est"], r["d"], r["appt"]
    sizes = [hi - lo + 1 for lo, hi in (empty, picked, est, d, appt)]
    if max(sizes) > MAX_PHRASE_TABLE or 6 * (sizes[4] + 2) > MAX_PHRASE_TABLE:
        return None
    blocks = [pl.Series(["not discharged yet", "discharged, no LFD posted", "status "])]
    offsets = []
    for prefix, (lo, hi), suffix in (
        ("empty returned ", empty, ""), ("picked up ", picked, ""),
        ("discharged, no LFD posted (tariff estimate ", est, ")"),
    ):
        offsets.append(sum(b.len() for b in blocks))
        dates = _date_strings(lo, hi) if hi >= lo else pl.Series([], dtype=pl.String)
        blocks.append(prefix + dates + suffix)
    offsets.append(sum(b.len() for b in blocks))
    ds = pl.int_range(d[0], d[1] + 1, dtype=pl.Int32, eager=True).to_frame("d")
    blocks.append(ds.select(_when_txt(pl.col("d")).alias("d"))["d"] if ds.height
                  else ds["d"].cast(pl.String))
    first = pl.concat(blocks).rechunk()
    appt_txt = (["", "; no appointment"]
                + ("; appointment " + _date_strings(*appt)).to_list() if appt[1] >= appt[0]
                else ["", "; no appointment"])
    tail: list[str | None] = []
    for avail in ("", "; availability unknown", "; not available"):
        for stale in ("", "; stale data"):
            tail += [(avail + a + stale) or None for a in appt_txt]
    return _Phrases(
        first=first, o_empty=offsets[0], lo_empty=empty[0], o_picked=offsets[1],
        lo_picked=picked[0], o_est=offsets[2], lo_est=est[0], o_lfd=offsets[3], lo_lfd=d[0],
        tail=pl.Series(tail, dtype=pl.String), n_appt=len(appt_txt) - 2, lo_appt=appt[0],
    )


def compute_risk(
    frames: WarehouseFrames | Mapping[str, pl.LazyFrame],
    as_of: datetime,
    tariffs: pl.DataFrame,
) -> pl.LazyFrame:
    """One row per container with LFDs, readiness, fees, costs and a risk level at ``as_of``.

    ``as_of`` must be timezone-aware (a naive value is taken as UTC). ``tariffs`` is the frame
    :func:`pipelines.analytics.load_tariffs` returns. Output columns: see the README.
    """
    joined, layers = risk_plan(frames, as_of, tariffs)

    def rows(part: pl.DataFrame) -> pl.LazyFrame:
        lf = part.lazy()
        for layer in layers:
            lf = lf.with_columns(**layer)
        return lf.select(OUTPUT_COLUMNS)

    # every layer is row-wise: row blocks run in parallel (one expression such as risk_reason
    # would otherwise keep a single core busy while the others wait)
    parts = max(1, min(PARTS, joined.height // MIN_PART_ROWS))
    if parts == 1:
        return rows(joined)
    size = -(-joined.height // parts)
    return pl.concat([rows(joined.slice(i * size, size)) for i in range(parts)], parallel=True)


#: Row blocks compute_risk evaluates in parallel (at most; each of at least MIN_PART_ROWS).
#: Two per thread: blocks half the size keep each block's intermediate columns smaller (1M rows
#: on 2 threads: peak RSS of the benchmark 1.20-1.22 GB instead of 1.28-1.31 GB; time within
#: noise, 0.60-0.65 s either way).
PARTS = 2 * pl.thread_pool_size()
MIN_PART_ROWS = 50_000


def risk_plan(
    frames: WarehouseFrames | Mapping[str, pl.LazyFrame],
    as_of: datetime,
    tariffs: pl.DataFrame,
) -> tuple[pl.DataFrame, list[dict[str, pl.Expr]]]:
    """:func:`compute_risk` in parts: the containers and the ``with_columns`` layers.

    Runs the eager preparation (distinct zones, carriers and ports, value ranges, per-shipment
    and per-container aggregates, each container's row in those, as columns ``_s_idx`` and
    ``_e_idx``); the first layer gathers the aggregates' columns by them. Exposed for
    per-stage timing (``benchmarks/bench_risk.py``).
    """
    _mark(None)
    fr = frames if isinstance(frames, WarehouseFrames) else WarehouseFrames.from_mapping(frames)
    if as_of.tzinfo is None:
        as_of = as_of.replace(tzinfo=UTC)
    as_of = as_of.astimezone(UTC)
    cal = working_calendar()
    col = pl.col

    # --- eager: the inputs once, the small per-shipment / per-container tables, and the few
    # distinct values (zones, carriers, ports) and date ranges the row-level plan needs --------
    ship_q = fr.shipments.select(
        col("id").alias("shipment_id"), "bill_of_lading_number",
        col("shipping_line_scac").str.to_uppercase().alias("shipping_line_scac"),
        "port_of_discharge_locode", "destination_locode", "customer_name",
        col("pod_timezone").cast(pl.Categorical(_ZONE_NAMES)).alias("_s_pod_tz"),
        col("destination_timezone").cast(pl.Categorical(_ZONE_NAMES)).alias("_s_dest_tz"),
        ((pl.coalesce("pod_ata_at", "pod_eta_at") - col("pod_original_eta_at"))
         .dt.total_seconds() / 86400).round(1).alias("eta_slip_days"),
        col("line_tracking_stopped_at").is_not_null().alias("_line_stopped"),
    )
    term_q = fr.terminals.select(
        col("id").alias("pod_terminal_id"), col("name").alias("pod_terminal_name"),
        col("nickname").alias("pod_terminal_nickname"),
        col("firms_code").alias("pod_terminal_firms_code"),
    ).unique("pod_terminal_id", keep="first", maintain_order=True).drop_nulls("pod_terminal_id")
    # holds: one bit per (name, status) OR-ed per container (a numeric aggregation), decoded
    # from the few distinct masks after collecting; the names' dense rank (sorted, NULL first
    # as 0) gives the bit, so each list comes out unique and sorted.
    holds_in = fr.container_holds.filter(col("status").is_in(["hold", "pending"]))
    bit = col("name").rank("dense").fill_null(0).cast(pl.Int64) * 2 + (
        col("status") == "pending").cast(pl.Int64)
    masks_rows = holds_in.select(  # the rank over all holds, before grouping
        "container_id", _bit_values().gather(bit.clip(0, _MASK_BITS - 1)).alias("_mask"),
    )
    masks_aggs = [col("_mask").bitwise_or()]
    names_q = holds_in.select(col("name").drop_nulls().unique().sort())
    # the same lists by list aggregation (when there are too many names for the mask)
    holds_rows = holds_in.unique(["container_id", "status", "name"])
    holds_aggs = [
        col("name").filter(col("status") == "hold").sort().alias("blocking_holds"),
        col("name").filter(col("status") == "pending").sort().alias("pending_holds"),
    ]
    nb_h, np_h = col("blocking_holds").list.len(), col("pending_holds").list.len()
    holds_txt_cols = dict(
        _nb=nb_h,
        _holds_txt=pl.concat_str([
            pl.when(nb_h > 0).then(pl.concat_str(
                pl.lit("; "), col("blocking_holds").list.join(", "), pl.lit(" hold"))),
            pl.when(np_h > 0).then(pl.concat_str(
                pl.lit("; "), col("pending_holds").list.join(", "), pl.lit(" pending"))),
        ], ignore_nulls=True),
    )
    fees_rows = fr.container_fees.select(
        "container_id",
        pl.when(col("type") != "total").then(col("amount")).alias("_fees_sum"),
        pl.when(col("type") == "demurrage").then(col("amount")).alias("_dem_sum"),
    )
    fees_aggs = [col("_fees_sum").sum(), col("_dem_sum").sum(), pl.len().alias("_fee_rows")]

    def extras(holds: pl.DataFrame, fees: pl.DataFrame) -> pl.DataFrame:
        """Holds and fees aggregates of each container row that has either."""
        return holds.join(fees, on="_row", how="full", coalesce=True).with_columns(
            _nb=col("_nb").fill_null(0),
            _fees_sum=col("_fees_sum").fill_null(0.0), _dem_sum=col("_dem_sum").fill_null(0.0),
            _fee_rows=col("_fee_rows").fill_null(0),
            blocking_holds=col("blocking_holds").fill_null(pl.lit([], dtype=pl.List(pl.String))),
            pending_holds=col("pending_holds").fill_null(pl.lit([], dtype=pl.List(pl.String))),
        )
    # the zone names as categories: codes in the same pass that finds the distinct names (a
    # unique and then an Enum cast per row block cost twice as much)
    cont_q = fr.containers.with_columns(
        col(c).cast(pl.Categorical(_ZONE_NAMES)) for c in _CONTAINER_ZONES)
    stats_q = fr.containers.select(
        *[col(c).to_physical().min().alias(f"{c}_min") for c in _TS_STATS],
        *[col(c).to_physical().max().alias(f"{c}_max") for c in _TS_STATS],
    )
    cdf, sdf, tdf, ndf, sts = pl.collect_all(
        [cont_q, ship_q, term_q, names_q, stats_q], engine="in-memory")
    hold_names = ndf["name"].to_list()
    by_mask = 2 * (len(hold_names) + 1) <= _MASK_BITS
    _mark('prep: inputs, distinct values')
    stats: dict[str, int | None] = sts.row(0, named=True)
    # duplicate ids: keep the first row of each (distinct hashes prove the ids distinct)
    ids = sdf["shipment_id"]
    if ids.hash().n_unique() < ids.len() and ids.n_unique() < ids.len():
        sdf = sdf.unique("shipment_id", keep="first")
    # The joins and the holds and fees aggregates run in polars' threads (the GIL released)
    # while this thread builds the small tables below, which are mostly Python and serial
    # (1M rows: about 5% faster overall).
    pool = ThreadPoolExecutor(2, thread_name_prefix="freetime-risk-joins")
    joins = pool.submit(_row_indexes, [(cdf["shipment_id"], sdf["shipment_id"])])
    per_container = pool.submit(_per_container, cdf["id"], [
        (masks_rows, masks_aggs) if by_mask else (holds_rows, holds_aggs),
        (fees_rows, fees_aggs),
    ])
    pool.shutdown(wait=False)

    # zones: ZoneTable indices by category code (0, UTC, for an unknown name; NULL stays NULL)
    cats = pl.concat(
        [cdf[c].unique() for c in _CONTAINER_ZONES] + [sdf[c].unique() for c in _SHIPMENT_ZONES]
    ).unique().drop_nulls()
    cat_codes, cat_names = cats.to_physical().to_list(), cats.cast(pl.String).to_list()
    zt = ZoneTable(cat_names)
    by_cat = [0] * (max(cat_codes) + 1 if cat_codes else 0)
    for code, name in zip(cat_codes, cat_names, strict=True):
        by_cat[code] = zt.index.get(name, 0)

    def zcode(e: pl.Expr) -> pl.Expr:  # of a column of _ZONE_NAMES categories
        return _gather(by_cat, e.to_physical(), pl.Int32)

    todays = [(zt.today(as_of)[i] - _EPOCH).days for i in range(len(zt.zones))]

    # tariff keys (carrier, port, equipment) as dense codes; one tariff row per code and charge
    # (the distinct carriers and ports taken from sdf: a plan of their own ran ship_q again)
    scacs = sorted(sdf["shipping_line_scac"].drop_nulls().unique().to_list())
    ports = sorted(set(sdf["port_of_discharge_locode"].drop_nulls().unique().to_list())
                   | set(sdf["destination_locode"].drop_nulls().unique().to_list()))
    keys = pl.DataFrame(
        [(sc, p, e) for sc in [*scacs, None] for p in [*ports, None] for e in ("dry", "reefer")],
        schema={"scac": pl.String, "port": pl.String, "equip": pl.String}, orient="row",
    ).with_row_index("_code")
    dem, det = _charge(tariffs, "demurrage", keys), _charge(tariffs, "detention", keys)
    scac_code, port_code = _codes(scacs), _codes(ports)
    n_port = len(ports) + 1

    # terminals: a handful of rows, gathered by code instead of joined
    tids = tdf["pod_terminal_id"].to_list()
    place = tdf.select(
        pl.concat_str(pl.lit(" at "), pl.coalesce("pod_terminal_nickname", "pod_terminal_name"))
    ).to_series().to_list() + [None]
    place_src = [
        (p or "" if src != "rail" else "") + f" ({src})"
        for p in place for src in ("line", "terminal", "rail")
    ]
    _mark('prep: zones, tariff tables')
    rng = _ranges(stats, todays, cal, dem, det)
    ph = _phrases(rng)
    dem.use_width(_width((rng["today"], rng["cost_lfd"]), (rng["pickup"], rng["cost_lfd"])))
    det.use_width(_width((rng["det_end"], rng["det_lfd"])))
    dem.use_days(cal, rng["clock"])

    _mark('prep: ranges, phrase tables')
    ship = sdf.with_columns(
        _szi_pod=zcode(col("_s_pod_tz")), _szi_dest=zcode(col("_s_dest_tz")),
        _scac_c=scac_code(col("shipping_line_scac")),
        _pod_c=port_code(col("port_of_discharge_locode")),
        _dest_c=port_code(col("destination_locode")),
    ).drop("_s_pod_tz", "_s_dest_tz").rechunk()
    _mark('prep: shipment codes')
    hdf, fdf = per_container.result()
    hdf = (_decode_holds(hdf, hold_names) if by_mask
           else hdf.with_columns(**holds_txt_cols))
    edf = extras(hdf, fdf)
    # the holds text as a code into its few distinct values (0: none)
    holds_txt = sorted(t for t in edf["_holds_txt"].unique().to_list() if t)
    edf = edf.with_columns(
        _hcode=(_codes(holds_txt)(col("_holds_txt")) + 1).fill_null(0)).drop("_holds_txt")
    # containers without holds or fees get the defaults row, the last one (no lists to fill
    # per row); every other container its own row of edf
    edf = pl.concat([edf, pl.DataFrame([{
        "blocking_holds": [], "pending_holds": [], "_fees_sum": 0.0, "_dem_sum": 0.0,
        "_fee_rows": 0, "_nb": 0, "_hcode": 0,
    }], schema=edf.schema)]).rechunk()
    e_idx = pl.repeat(edf.height - 1, cdf.height, dtype=pl.UInt32, eager=True).scatter(
        edf["_row"][:-1], pl.int_range(edf.height - 1, dtype=pl.UInt32, eager=True))
    (s_idx,) = joins.result()  # ship keeps sdf's row order
    _mark('prep: joins, holds and fees')
    # the shipments' and extras' columns are gathered by the plan's first layer, in the
    # parallel row blocks (1M rows, 16 alternating runs: median 511 ms against 535 when they
    # were gathered here, one column after another)
    c = cdf.rename({"id": "container_id", "number": "container_number"}).with_columns(
        _s_idx=s_idx, _e_idx=e_idx)
    gathers = {
        **{k: pl.lit(v).gather(col("_s_idx"))
           for k, v in ship.drop("shipment_id").to_dict().items()},
        **{k: pl.lit(v).gather(col("_e_idx"))
           for k, v in edf.drop("_row").to_dict().items()},
    }

    _mark('prep: index columns')
    lo = [v for k, v in stats.items() if k.endswith("_min") and v is not None]
    hi = [v for k, v in stats.items() if k.endswith("_max") and v is not None]
    hourly = zt.hourly_dates(min(lo), max(hi)) if HOURLY_DATES and lo and hi else None
    ld = hourly or zt.local_date
    return c, [gathers, *_layers(as_of, cal, ld, zcode, todays, dem, det, len(scacs), n_port,
                                 tids, tdf, place_src, ph, ["", *holds_txt])]


def _layers(
    as_of: datetime, cal: WorkingCalendar, ld: Callable[[pl.Expr, pl.Expr], pl.Expr],
    zcode: Callable[[pl.Expr], pl.Expr],
    todays: Sequence[int], dem: _Charge, det: _Charge, n_scac: int, n_port: int,
    tids: Sequence[str], tdf: pl.DataFrame, place_src: Sequence[str], ph: _Phrases | None,
    holds_txt: Sequence[str],
) -> list[dict[str, pl.Expr]]:
    """The row-level plan as successive ``with_columns`` layers (wide, so they run in parallel).

    Every expression only reads columns of earlier layers.
    """
    col = pl.col
    layers: list[dict[str, pl.Expr]] = []

    # --- A: phases, zones, facts from the joined columns only -------------------------------
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
    fees_reported = col("fees_at_pod_terminal_known").fill_null(False) | (col("_fee_rows") > 0)
    dwell_end = pl.coalesce(
        "pod_full_out_at", "pod_rail_loaded_at", "pod_rail_departed_at", pl.lit(as_of, dtype=TS)
    )
    nb = col("_nb")
    # Zone fallbacks (README, "Dates and zones"): the port zone falls back to the shipment's,
    # then UTC (0); the destination zone to the shipment's destination, then the port's; the line
    # LFD's zone is the container's final-destination zone, else the port's; the empty return's
    # its own zone, else the destination's (inland) or the port's.
    # The zone codes are columns of this layer and the fallbacks a layer of their own: inlined
    # in several columns, each code (an enum cast and a gather) was evaluated up to four times
    # (1M rows: about 3% of the CPU).
    zi_pod = pl.coalesce(col("_zc_pod"), col("_szi_pod"), pl.lit(0, pl.Int32))
    zi_fd = pl.coalesce(col("_zc_fd"), col("_szi_dest"), zi_pod)
    layers.append(dict(
        _inland=inland,
        _zc_pod=zcode(col("pod_timezone")),
        _zc_fd=zcode(col("final_destination_timezone")),
        _zc_empty=zcode(col("empty_terminated_timezone")),
        _left_port=pl.any_horizontal(
            col(x).is_not_null()
            for x in ("pod_full_out_at", "pod_rail_loaded_at", "pod_rail_departed_at")
        ),
        _term=_codes(tids)(col("pod_terminal_id")).fill_null(len(tids)),
        _reefer=(col("equipment_type") == "reefer").fill_null(False),
        _status_done=col("current_status").is_in(DONE_STATUSES).fill_null(False),
        ready_for_pickup=col("available_for_pickup").fill_null(False) & (nb == 0),
        fees_reported=pl.when(fees_reported).then(col("_fees_sum")),
        demurrage_fee_reported=pl.when(fees_reported).then(col("_dem_sum")),
        dwell_days=pl.when(col("pod_discharged_at").is_not_null()).then(
            ((dwell_end - col("pod_discharged_at")).dt.total_seconds() / 86400).round(1)
        ),
        stale=(
            col("terminal_checked_at").is_null()
            | (col("terminal_checked_at") < pl.lit(as_of - STALE_AFTER, dtype=TS))
            | col("_line_stopped").fill_null(False)
        ),
        as_of=pl.lit(as_of, dtype=TS),
    ))
    layers.append(dict(
        _zi_pod=zi_pod,
        _zi_fd=zi_fd,
        _zi_line=pl.coalesce(col("_zc_fd"), zi_pod),
        _zi_empty=pl.coalesce(
            col("_zc_empty"), pl.when(col("_inland")).then(zi_fd).otherwise(zi_pod)),
    ))

    # --- B: local dates, tariff rows, done ----------------------------------------------------
    inl, left = col("_inland"), col("_left_port")
    full_out = pl.when(inl).then(col("final_destination_full_out_at")) \
        .otherwise(col("pod_full_out_at"))
    tkey = (
        col("_scac_c").fill_null(n_scac).cast(pl.Int64) * n_port
        + pl.when(inl & col("_dest_c").is_not_null()).then(col("_dest_c"))
        .otherwise(col("_pod_c")).fill_null(n_port - 1)
    ) * 2 + col("_reefer").cast(pl.Int64)
    term = col("_term")
    layers.append(dict(
        full_out_at=full_out,
        is_inland=inl,
        pod_terminal_name=_gather(tdf["pod_terminal_name"].to_list() + [None], term, pl.String),
        pod_terminal_firms_code=_gather(
            tdf["pod_terminal_firms_code"].to_list() + [None], term, pl.String),
        lfd_terminal=ld(col("pickup_lfd_terminal"), col("_zi_pod")),
        lfd_rail=ld(
            pl.coalesce("pickup_lfd_rail", "ind_facility_lfd_on"), col("_zi_fd")
        ),
        lfd_line=ld(col("pickup_lfd_line"), col("_zi_line")),
        _appt_date=ld(col("pickup_appointment_at"), col("_zi_pod")),
        _return_date=ld(col("empty_terminated_at"), col("_zi_empty")),
        _clock_start=ld(
            pl.when(inl & left).then(pl.coalesce("ind_rail_unloaded_at", "ind_ata_at"))
            .otherwise(col("pod_discharged_at")),
            pl.when(inl & left).then(col("_zi_fd")).otherwise(col("_zi_pod")),
        ),
        _full_out_date=ld(
            full_out, pl.when(inl).then(col("_zi_fd")).otherwise(col("_zi_pod"))),
        _today_pod=_gather(todays, col("_zi_pod"), pl.Int32).cast(pl.Date),
        _discharged=col("pod_discharged_at").is_not_null() | (
            inl & (col("ind_ata_at").is_not_null() | col("ind_rail_unloaded_at").is_not_null())
        ),
        _done=(
            full_out.is_not_null()
            | col("empty_terminated_at").is_not_null()
            | col("_status_done")
        ),
        _d=dem.at(dem.row_of_key, tkey),
        _x=det.at(det.row_of_key, tkey),
    ))

    # --- C: binding LFD, detention -------------------------------------------------------
    done = col("_done")
    rel_line = ~done
    rel_term = ~done & ~col("_left_port")
    rel_rail = ~done & col("_inland")
    det_end = pl.coalesce("_return_date", "_today_pod")
    lfds = ("lfd_line", "lfd_terminal", "lfd_rail")
    ln, tn, rn = (col(x).is_not_null() for x in lfds)
    first_lfd = pl.min_horizontal(*(
        _phys(x, _I32_MAX, rel) for x, rel in zip(lfds, (rel_line, rel_term, rel_rail), strict=True)
    ))
    layers.append(dict(
        # min/max over NULL-free Int32 (sentinels; dates never reach them): much cheaper
        lfd_date=pl.when(first_lfd < _I32_MAX).then(first_lfd).cast(pl.Date),
        lfd_disagreement_days=pl.when(  # at least two of the three
            (ln & tn) | (ln & rn) | (tn & rn)
        ).then(
            pl.max_horizontal(*(_phys(x, _I32_MIN) for x in lfds))
            - pl.min_horizontal(*(_phys(x, _I32_MAX) for x in lfds))
        ),
        detention_lfd=pl.when(det.at(det.working, col("_x")))
        .then(cal.add_working_days(col("_full_out_date"), det.at(det.free_days, col("_x"))))
        .otherwise(
            (col("_full_out_date").cast(pl.Int32) + det.at(det.free_days, col("_x")))
            .cast(pl.Date)),
        _det_end=det_end,
        days_out=_days(det_end, col("_full_out_date")),
        currency=dem.at(dem.currency, col("_d")),
        demurrage_tariff_line=dem.at(dem.line, col("_d")),
        detention_tariff_line=pl.when(col("full_out_at").is_not_null())
        .then(det.at(det.line, col("_x"))),
    ))

    # --- D: source of the binding LFD (0 line, 1 terminal, 2 rail; ties prefer that order) ---
    src = (
        pl.when(rel_line & (col("lfd_line") == col("lfd_date"))).then(pl.lit(0, pl.Int32))
        .when(rel_term & (col("lfd_terminal") == col("lfd_date"))).then(pl.lit(1, pl.Int32))
        .when(rel_rail & (col("lfd_rail") == col("lfd_date"))).then(pl.lit(2, pl.Int32))
    )
    layers.append(dict(
        _src=src,
        lfd_source=_gather(["line", "terminal", "rail"], src, pl.String),
        _zi_bind=pl.when(src == 1).then(col("_zi_pod"))
        .when(src == 2).then(col("_zi_fd"))
        .when(src == 0).then(col("_zi_line"))
        .when(col("_inland") & col("_left_port")).then(col("_zi_fd"))
        .otherwise(col("_zi_pod")),
        projected_detention=pl.when(col("detention_lfd").is_not_null()).then(det.cost(
            _days(col("_det_end"), col("detention_lfd")).clip(lower_bound=0), col("_x"))),
    ))

    # --- E: today in the binding zone; everything today-based is a per-zone constant -------
    zb = col("_zi_bind")
    today = _gather(todays, zb, pl.Int32)
    next_wd = [_add_working_days_py(cal, t, 1) for t in todays]
    hold_wd = [_add_working_days_py(cal, t, HOLD_CLEAR_WORKING_DAYS) for t in todays]
    cum_today = [int(cal.cum[min(max(t - _START_DAY, 0), _N_DAYS - 1)]) for t in todays]
    layers.append(dict(
        today_local=today.cast(pl.Date),
        days_to_lfd=col("lfd_date").cast(pl.Int32) - today,
        working_days_to_lfd=cal.cum_expr(col("lfd_date")) - _gather(cum_today, zb, pl.Int32),
        _pickup_date=pl.when(col("_appt_date").cast(pl.Int32) >= today).then(col("_appt_date"))
        .when(col("ready_for_pickup")).then(today.cast(pl.Date))
        .when(col("_nb") > 0).then(_gather(hold_wd, zb, pl.Int32).cast(pl.Date))
        .otherwise(_gather(next_wd, zb, pl.Int32).cast(pl.Date)),
        lfd_estimated=pl.when(col("lfd_date").is_null() & ~done).then(
            dem.estimate(cal, col("_clock_start"), col("_d"))),
    ))

    # --- F: costs, level, reason ----------------------------------------------------------
    cost_lfd = pl.coalesce("lfd_date", "lfd_estimated")
    has_tariff = col("_d").is_not_null()
    costed = has_tariff & (done | cost_lfd.is_not_null())
    accrued_days = pl.when(~done).then(
        _days(col("today_local"), cost_lfd).clip(lower_bound=0)).otherwise(0)
    proj_days = pl.when(~done).then(
        _days(col("_pickup_date"), cost_lfd).clip(lower_bound=0)).otherwise(0)
    d = col("days_to_lfd")
    unknown = ~done & col("lfd_date").is_null() & col("_discharged")
    level = (  # index into LEVELS
        pl.when(done).then(6)
        .when(unknown).then(5)
        .when(col("lfd_date").is_null()).then(4)
        .when(d < 0).then(0)
        .when(d == 0).then(1)
        .when(d <= 3).then(2)
        .when(d <= 7).then(3)
        .otherwise(4)
    )
    layers.append(dict(
        costed=costed,
        uncosted_reason=pl.when(~has_tariff).then(pl.lit("no tariff"))
        .when(~costed).then(pl.lit("no LFD")),
        accrued_demurrage=pl.when(costed).then(dem.cost(accrued_days, col("_d"))),
        projected_demurrage=pl.when(costed).then(dem.cost(proj_days, col("_d"))),
        projected_pickup_date=pl.when(~done).then(col("_pickup_date")),
        risk_level=_gather(LEVELS, level.cast(pl.UInt32), pl.String),
    ))
    fast = _reason_fast(ph, place_src, holds_txt, unknown) if ph is not None else None
    if fast is None:
        layers[-1]["risk_reason"] = _reason_generic(tdf, unknown)
        return layers
    # --- G: the sentence, built once per distinct sentence code ---------------------------
    code, reason = fast
    layers[-1]["_reason_code"] = code
    layers.append(dict(risk_reason=reason))
    return layers


#: Largest sentence code :func:`_reason_fast` packs into Int64 (else the generic path).
MAX_REASON_CODE = 2**62


def _reason_fast(
    ph: _Phrases, place_src: Sequence[str], holds_txt: Sequence[str], unknown: pl.Expr
) -> tuple[pl.Expr, pl.Expr] | None:
    """``risk_reason`` as ``(code, sentence)``: an Int64 code per row that fixes its sentence
    (to be computed first, as column ``_reason_code``), and the sentence from that column.

    A sentence is four pieces: the first phrase, the status or LFD place, the holds, and the
    availability / appointment / stale tail, each an index into a small phrase table; the code
    packs the four indices. The sentences are built once per distinct code in the row block
    and gathered (1M rows hold about 78,000 distinct sentences: about 3% less CPU than building
    a string per row; when every row differs it costs one hash pass more). None when the
    codes would not fit in :data:`MAX_REASON_CODE` (then the generic path builds each row's).
    """
    col = pl.col
    done, d = col("_done"), col("days_to_lfd")
    first = (
        pl.when(done).then(
            pl.when(col("empty_terminated_at").is_not_null())
            .then(ph.o_empty + col("_return_date").cast(pl.Int64) - ph.lo_empty)
            .when(col("full_out_at").is_not_null())
            .then(ph.o_picked + col("_full_out_date").cast(pl.Int64) - ph.lo_picked)
            .otherwise(2)
        )
        .when(unknown).then(
            pl.when(col("lfd_estimated").is_not_null())
            .then(ph.o_est + col("lfd_estimated").cast(pl.Int64) - ph.lo_est).otherwise(1))
        .when(col("lfd_date").is_null()).then(0)
        .otherwise(ph.o_lfd + d.cast(pl.Int64) - ph.lo_lfd)
    )
    is_status = done & col("empty_terminated_at").is_null() & col("full_out_at").is_null()
    # a place (terminal x LFD source), a done status (is_status implies one), or nothing
    mid_txt = [*place_src, *DONE_STATUSES, None]
    n_mid = len(mid_txt)
    mid = (
        pl.when(is_status).then(len(place_src) + _codes(DONE_STATUSES)(col("current_status")))
        .when(~done & col("lfd_date").is_not_null()).then(col("_term") * 3 + col("_src"))
        .fill_null(n_mid - 1).cast(pl.Int64)
    )
    active = ~done & (col("lfd_date").is_not_null() | col("_discharged"))
    avail = (
        pl.when(active & (col("_nb") == 0) & ~col("ready_for_pickup")).then(
            pl.when(col("availability_known") == False)  # noqa: E712 (NULL must stay NULL)
            .then(1).otherwise(2))
        .otherwise(0)
    )
    appt = (
        pl.when(active).then(
            pl.when(col("_appt_date").cast(pl.Int32) >= col("today_local").cast(pl.Int32))
            .then(2 + col("_appt_date").cast(pl.Int64) - ph.lo_appt)
            .otherwise(1))
        .otherwise(0)
    )
    stale = (col("stale") & ~done).cast(pl.Int64)
    tail = (avail * 2 + stale) * (ph.n_appt + 2) + appt
    holds = pl.when(active).then(col("_hcode")).otherwise(0).cast(pl.Int64)
    n_tail = ph.tail.len()
    n_rest = len(holds_txt) * n_tail
    if ph.first.len() * n_mid * n_rest > MAX_REASON_CODE:
        return None
    code = (first.cast(pl.Int64) * n_mid + mid) * n_rest + holds * n_tail + tail
    u = col("_reason_code").unique(maintain_order=True)  # hashed; the unordered one sorts
    sentences = pl.concat_str([
        pl.lit(ph.first).gather(u // (n_mid * n_rest)),
        _gather(mid_txt, (u // n_rest) % n_mid, pl.String),
        _gather([t or None for t in holds_txt], (u % n_rest) // n_tail, pl.String),
        pl.lit(ph.tail).gather(u % n_tail),
    ], ignore_nulls=True)
    return code, col("_reason_code").replace_strict(u, sentences, return_dtype=pl.String)


def _reason_generic(tdf: pl.DataFrame, unknown: pl.Expr) -> pl.Expr:
    """``risk_reason`` built by formatting per row (any date range; slower)."""
    col = pl.col
    d = col("days_to_lfd")
    src = _gather(["line", "terminal", "rail"], col("_src"), pl.String)
    nick = pl.lit(tdf["pod_terminal_nickname"].append(pl.Series([None], dtype=pl.String)))
    name = pl.lit(tdf["pod_terminal_name"].append(pl.Series([None], dtype=pl.String)))
    place = pl.when(src != "rail").then(
        pl.concat_str(pl.lit(" at "), pl.coalesce(nick.gather(col("_term")),
                                                  name.gather(col("_term"))))
    ).otherwise(pl.lit(""))
    lfd_phrase = pl.concat_str(
        _when_txt(d), place.fill_null(""), pl.lit(" ("), src, pl.lit(")")
    )
    first = (
        pl.when(col("_done")).then(
            pl.when(col("empty_terminated_at").is_not_null())
            .then(pl.concat_str(pl.lit("empty returned "), _s(col("_return_date"))))
            .when(col("full_out_at").is_not_null())
            .then(pl.concat_str(pl.lit("picked up "), _s(col("_full_out_date"))))
            .otherwise(pl.concat_str(pl.lit("status "), col("current_status")))
        )
        .when(unknown).then(
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
    nb = col("_nb")
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
    return pl.concat_str(parts, separator="; ", ignore_nulls=True)


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
