"""Read the risk picture for notebooks and the report: brief read-only connections only.

Every read goes through :func:`pipelines.warehouse.reading` (short, read-only, lock-aware): the
data is copied into polars and the connection is closed before any chart is drawn, so an open
notebook never blocks a load for longer than one query.

``as_of=None`` reads the published ``analytics.demurrage_risk`` (what ``freetime risk`` or the
``sync`` flow last wrote). Any other instant recomputes the risk in memory from the
``terminal49`` tables with :func:`pipelines.analytics.compute_risk`: nothing is written.

``duckdb_path`` is any warehouse (a path, a ``postgresql://`` URL, None for the setting
``FREETIME_WAREHOUSE``...); on PostgreSQL each read is a read-only snapshot
(:func:`pipelines.pg.read.reading`), so a reader never sees half a publish.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path

import duckdb
import polars as pl

from pipelines.analytics import AT_RISK_LEVELS, LEVELS, compute_risk, load_tariffs, read_warehouse
from pipelines.analytics.publish import (
    CALENDAR_DAYS,
    CARRIER_KEYS,
    TERMINAL_KEYS,
    exposure_sql,
    lfd_calendar_sql,
)
from pipelines.config import ANALYTICS_SCHEMA, DATASET, Warehouse, resolve_warehouse
from pipelines.warehouse import WarehouseMissing, reading, table_names

ACTIVE = pl.col("risk_level") != "done"


@dataclass(frozen=True)
class RiskData:
    """One container per row (``analytics.demurrage_risk`` columns) and where it came from."""

    risk: pl.DataFrame
    as_of: datetime
    source: str  # "published" or "computed"
    duckdb_path: Path | str  # the warehouse's display form on PostgreSQL

    @property
    def today(self) -> date:
        """The local date at ``as_of`` (the most common ``today_local``; UTC date if none)."""
        return risk_today(self.risk, self.as_of)

    @property
    def currency(self) -> str:
        """The currency of the costed rows (joined if several; USD when nothing is costed)."""
        return currency_label(self.risk)

    def filtered(self, **criteria: Iterable[str] | None) -> RiskData:
        """The same picture restricted by :func:`filter_risk` criteria."""
        return RiskData(
            filter_risk(self.risk, **criteria), self.as_of, self.source, self.duckdb_path
        )


def _path(duckdb_path: str | Path | None) -> Path:
    warehouse = resolve_warehouse(duckdb_path)
    assert warehouse.path is not None  # callers dispatch PostgreSQL first
    return warehouse.path


def _postgres(duckdb_path: str | Path | None) -> Warehouse | None:
    """The PostgreSQL warehouse chosen, None for a DuckDB file."""
    warehouse = resolve_warehouse(duckdb_path)
    return warehouse if warehouse.is_postgres else None


def _utc(as_of: datetime) -> datetime:
    return (as_of if as_of.tzinfo else as_of.replace(tzinfo=UTC)).astimezone(UTC)


def published_as_of(duckdb_path: str | Path | None = None) -> datetime | None:
    """The ``as_of`` of the published risk table, or None when nothing was published."""
    pg = _postgres(duckdb_path)
    if pg is not None:
        from pipelines.pg import read

        with read.reading(pg) as cur:
            if not read.has_table(cur, ANALYTICS_SCHEMA, "demurrage_risk"):
                return None
            stamp = read.frame(cur, f"SELECT max(as_of) FROM {ANALYTICS_SCHEMA}.demurrage_risk")
        value = stamp.item() if stamp.height else None
        return _utc(value) if isinstance(value, datetime) else None
    with reading(_path(duckdb_path)) as con:
        if "demurrage_risk" not in table_names(con, ANALYTICS_SCHEMA):
            return None
        con.execute("SET TimeZone = 'UTC'")
        row = con.execute(f"SELECT max(as_of) FROM {ANALYTICS_SCHEMA}.demurrage_risk").fetchone()
    value = row[0] if row else None
    return _utc(value) if isinstance(value, datetime) else None


def load_risk(
    duckdb_path: str | Path | None = None,
    as_of: datetime | None = None,
    tariffs_path: str | Path | None = None,
) -> RiskData:
    """The risk rows: published (``as_of=None``) or recomputed in memory at ``as_of``.

    With ``as_of=None`` and nothing published yet, the risk is computed at the current time.
    Raises ``WarehouseMissing`` (no file or no ``terminal49.containers``) or ``WarehouseLocked``.
    """
    pg = _postgres(duckdb_path)
    if pg is not None:
        return _load_risk_postgres(pg, as_of, tariffs_path)
    path = _path(duckdb_path)
    if as_of is None:
        with reading(path) as con:
            if "demurrage_risk" in table_names(con, ANALYTICS_SCHEMA):
                con.execute("SET TimeZone = 'UTC'")
                df = con.sql(f"SELECT * FROM {ANALYTICS_SCHEMA}.demurrage_risk").pl()
                stamp = df["as_of"].max() if df.height else None
                when = _utc(stamp) if isinstance(stamp, datetime) else datetime.now(UTC)
                return RiskData(df, when, "published", path)
        as_of = datetime.now(UTC)
    when = _utc(as_of)
    tariffs = load_tariffs(tariffs_path)
    with reading(path) as con:
        if "containers" not in table_names(con, DATASET):
            raise WarehouseMissing(
                f"the warehouse {path} has no {DATASET}.containers table: run `freetime load` first"
            )
        frames = read_warehouse(con)  # eager copies: the connection can close now
    df = compute_risk(frames, when, tariffs).collect(engine="in-memory")
    return RiskData(df, when, "computed", path)


def _load_risk_postgres(
    warehouse: Warehouse, as_of: datetime | None, tariffs_path: str | Path | None
) -> RiskData:
    """:func:`load_risk` on PostgreSQL: the published rows, or the inputs read in one snapshot
    and the risk computed in memory."""
    from pipelines.pg import read
    from pipelines.pg.risk import read_warehouse as read_postgres

    tariffs = load_tariffs(tariffs_path) if as_of is not None else None
    with read.reading(warehouse) as cur:
        if as_of is None and read.has_table(cur, ANALYTICS_SCHEMA, "demurrage_risk"):
            df = read.frame(cur, f"SELECT * FROM {ANALYTICS_SCHEMA}.demurrage_risk")
            stamp = df["as_of"].max() if df.height else None
            when = _utc(stamp) if isinstance(stamp, datetime) else datetime.now(UTC)
            return RiskData(df, when, "published", warehouse.display)
        if not read.has_table(cur, DATASET, "containers"):
            raise WarehouseMissing(
                f"the warehouse {warehouse.display} has no {DATASET}.containers table: run "
                "`freetime load` first"
            )
        frames = read_postgres(cur)
    when = _utc(as_of or datetime.now(UTC))
    df = compute_risk(frames, when, tariffs or load_tariffs(tariffs_path)).collect(
        engine="in-memory"
    )
    return RiskData(df, when, "computed", warehouse.display)


def query(
    duckdb_path: str | Path | None, sql: str, params: Sequence[object] | None = None
) -> pl.DataFrame:
    """Run one read-only query on a brief connection; the result as a polars frame."""
    pg = _postgres(duckdb_path)
    if pg is not None:
        from pipelines.pg import read

        with read.reading(pg) as cur:
            return read.frame(cur, sql, params)
    with reading(_path(duckdb_path)) as con:
        con.execute("SET TimeZone = 'UTC'")
        frame: pl.DataFrame = con.sql(sql, params=list(params) if params else None).pl()
        return frame


# ---- pure helpers on the risk frame ---------------------------------------------------------


def risk_today(risk: pl.DataFrame, as_of: datetime) -> date:
    if risk.height and "today_local" in risk.columns:
        mode = risk["today_local"].drop_nulls().mode()
        if mode.len():
            return mode.sort()[0]  # type: ignore[no-any-return]
    return _utc(as_of).date()


def currency_label(risk: pl.DataFrame) -> str:
    if "currency" not in risk.columns:
        return "USD"
    found = sorted(risk["currency"].drop_nulls().unique().to_list())
    return "/".join(found) if found else "USD"


def options(risk: pl.DataFrame, column: str) -> list[str]:
    """Distinct non-null values of ``column``, sorted: the choices for a filter."""
    if column not in risk.columns:
        return []
    return sorted(str(v) for v in risk[column].drop_nulls().unique().to_list())


FILTER_COLUMNS = {
    "ports": "port_of_discharge_locode",
    "terminals": "pod_terminal_name",
    "carriers": "shipping_line_scac",
    "customers": "customer_name",
    "levels": "risk_level",
}


def filter_risk(risk: pl.DataFrame, **criteria: Iterable[str] | None) -> pl.DataFrame:
    """Keep rows whose column is in the chosen values; an empty or None choice keeps all.

    Keywords: ``ports``, ``terminals``, ``carriers``, ``customers``, ``levels``.
    """
    unknown = set(criteria) - set(FILTER_COLUMNS)
    if unknown:
        raise ValueError(
            f"unknown filter(s) {', '.join(sorted(unknown))}; use {', '.join(FILTER_COLUMNS)}"
        )
    out = risk
    for key, values in criteria.items():
        chosen = list(values or [])
        if chosen:
            out = out.filter(pl.col(FILTER_COLUMNS[key]).is_in(chosen))
    return out


def _over_frame(risk: pl.DataFrame, sql: str) -> pl.DataFrame:
    """``sql`` over ``risk`` registered as relation ``risk`` (in-memory DuckDB, no file)."""
    with duckdb.connect() as con:
        con.register("risk", risk)
        frame: pl.DataFrame = con.sql(sql).pl()
        return frame


def exposure_by_terminal(risk: pl.DataFrame) -> pl.DataFrame:
    """``analytics.exposure_by_terminal`` of these rows (the view's own SQL)."""
    return _over_frame(risk, exposure_sql("risk", TERMINAL_KEYS))


def exposure_by_carrier(risk: pl.DataFrame) -> pl.DataFrame:
    """``analytics.exposure_by_carrier`` of these rows (the view's own SQL)."""
    return _over_frame(risk, exposure_sql("risk", CARRIER_KEYS))


def lfd_calendar(risk: pl.DataFrame, today: date, days: int = CALENDAR_DAYS) -> pl.DataFrame:
    """Active boxes whose binding LFD falls on each of the next ``days`` days (today first):
    ``analytics.lfd_calendar``'s SQL, from ``today``."""
    return _over_frame(risk, lfd_calendar_sql("risk", f"DATE '{today.isoformat()}'", days))


def holds_breakdown(risk: pl.DataFrame) -> pl.DataFrame:
    """Active containers per hold name and status (``blocking`` or ``pending``)."""
    parts = []
    for column, status in (("blocking_holds", "blocking"), ("pending_holds", "pending")):
        parts.append(
            risk.filter(ACTIVE)
            .select(pl.col(column).alias("hold"), "container_id")
            .explode("hold")
            .drop_nulls("hold")
            .unique()
            .group_by("hold")
            .agg(containers=pl.len().cast(pl.Int64))
            .with_columns(status=pl.lit(status))
        )
    out = pl.concat(parts).select("hold", "status", "containers")
    return out.sort(["containers", "hold"], descending=[True, False])


def level_counts(risk: pl.DataFrame) -> pl.DataFrame:
    """Containers per risk level, in urgency order (levels with none included)."""
    counts = dict(risk.group_by("risk_level").len().iter_rows()) if risk.height else {}
    return pl.DataFrame(
        {
            "risk_level": list(LEVELS),
            "containers": [int(counts.get(lv, 0)) for lv in LEVELS],
            "order": list(range(len(LEVELS))),
        },
        schema={"risk_level": pl.String, "containers": pl.Int64, "order": pl.Int64},
    )


AT_RISK_COLUMNS = [
    "risk_level",
    "container_number",
    "lfd_date",
    "lfd_source",
    "days_to_lfd",
    "working_days_to_lfd",
    "ready_for_pickup",
    "blocking_holds",
    "pending_holds",
    "pickup_appointment_at",
    "accrued_demurrage",
    "projected_demurrage",
    "pod_terminal_name",
    "port_of_discharge_locode",
    "shipping_line_scac",
    "customer_name",
    "risk_reason",
]


def at_risk_table(risk: pl.DataFrame, levels: Sequence[str] = AT_RISK_LEVELS) -> pl.DataFrame:
    """The at-risk rows, most urgent first (the ``at_risk_containers`` order), with reasons."""
    c = pl.col
    rank = {lv: i for i, lv in enumerate(LEVELS)}
    return (
        risk.filter(c("risk_level").is_in(list(levels)))
        .with_columns(_rank=c("risk_level").replace_strict(rank, default=len(LEVELS)))
        .sort(
            ["_rank", "days_to_lfd", "ready_for_pickup", "projected_demurrage", "container_number"],
            descending=[False, False, True, True, False],
            nulls_last=True,
        )
        .select([x for x in AT_RISK_COLUMNS if x in risk.columns])
        .with_columns(c("blocking_holds").list.join(", "), c("pending_holds").list.join(", "))
    )


def summary(risk: pl.DataFrame) -> dict[str, float | int]:
    """Headline numbers for active containers (costed rows only for money)."""
    active = risk.filter(ACTIVE)
    counts = dict(risk.group_by("risk_level").len().iter_rows()) if risk.height else {}
    return {
        "containers": risk.height,
        "active": active.height,
        **{lv: int(counts.get(lv, 0)) for lv in LEVELS},
        "accrued_demurrage": float(active["accrued_demurrage"].sum() or 0.0),
        "projected_demurrage": float(active["projected_demurrage"].sum() or 0.0),
        "uncosted": int((~active["costed"].fill_null(False)).sum()),
    }
