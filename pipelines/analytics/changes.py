"""What changed between two risk tables (e.g. the previous and the current run), and the
published run's changes read from either warehouse (:func:`published_changes`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import polars as pl

from pipelines.config import ANALYTICS_SCHEMA, Warehouse, resolve_warehouse

_KEY = ["container_id", "container_number"]
RISK, PREVIOUS, EXPOSURE = "demurrage_risk", "demurrage_risk_previous", "exposure_by_terminal"


@dataclass(frozen=True)
class PublishedChanges:
    """What a run summary shows of the published risk run: :func:`risk_changes` since the
    previous run (None on the first risk run of the warehouse: nothing to compare with) and
    the rows of ``analytics.exposure_by_terminal`` (None when the view is missing)."""

    changes: dict[str, Any] | None
    exposure: pl.DataFrame | None


def published_changes(
    warehouse: str | os.PathLike[str] | Warehouse | None, *, retry_seconds: float = 30.0
) -> PublishedChanges:
    """The published risk run's changes since the previous one and its exposure by terminal,
    read from the warehouse (a DuckDB file, waiting up to ``retry_seconds`` for a writer to
    let go of it; or PostgreSQL, in one read-only snapshot). WarehouseMissing before any risk
    run."""
    from pipelines.warehouse import WarehouseMissing

    wh = resolve_warehouse(warehouse)
    if wh.is_postgres:
        from pipelines.pg.tables import read_tables

        names = [(ANALYTICS_SCHEMA, t) for t in (RISK, PREVIOUS, EXPOSURE)]
        read = read_tables(wh, names)
        current, previous, exposure = (read[n] for n in names)
        if current is None:
            raise WarehouseMissing(
                f"no {ANALYTICS_SCHEMA}.{RISK} in {wh.display}: run `freetime risk` first"
            )
    else:
        from pipelines.analytics.publish import at_risk
        from pipelines.analytics.risk import LEVELS
        from pipelines.warehouse import read_table

        assert wh.path is not None
        current = at_risk(wh.path, levels=LEVELS)  # every published row: changes need them all
        previous = read_table(wh.path, ANALYTICS_SCHEMA, PREVIOUS, retry_seconds=retry_seconds)
        exposure = read_table(wh.path, ANALYTICS_SCHEMA, EXPOSURE, retry_seconds=retry_seconds)
    changes = risk_changes(previous, current) if previous is not None else None
    return PublishedChanges(changes, exposure)


def risk_changes(previous: pl.DataFrame | None, current: pl.DataFrame) -> dict[str, Any]:
    """Newly overdue, newly ready and moved LFDs between two ``demurrage_risk`` frames.

    Returns ``{"newly_overdue": [...], "newly_ready": [...], "lfd_moved": [...], "counts": {...}}``
    where each list holds plain dicts (JSON-friendly, dates as ISO strings). Without a previous
    frame every overdue / ready container counts as new and no LFD has moved. An LFD moved when a
    source (line, terminal, rail) or the binding ``lfd_date`` had a date in both runs and the two
    differ: ``{"container_id", "container_number", "source", "old", "new"}``. A source that
    appears or disappears is not a move.
    """
    cur = current
    if previous is None or previous.height == 0:
        prev = pl.DataFrame(
            schema={
                "container_id": pl.String,
                "risk_level": pl.String,
                "ready_for_pickup": pl.Boolean,
                **{c: pl.Date for c in ("lfd_date", "lfd_line", "lfd_terminal", "lfd_rail")},
            }
        )
    else:
        prev = previous
    p = prev.select(
        "container_id",
        pl.col("risk_level").alias("_old_level"),
        pl.col("ready_for_pickup").alias("_old_ready"),
        *[
            pl.col(c).alias(f"_old_{c}")
            for c in ("lfd_date", "lfd_line", "lfd_terminal", "lfd_rail")
        ],
    )
    j = cur.join(p, on="container_id", how="left")
    overdue = j.filter(
        (pl.col("risk_level") == "overdue") & pl.col("_old_level").ne_missing("overdue")
    ).select(*_KEY, "lfd_date", "days_to_lfd", "risk_reason")
    ready = j.filter(pl.col("ready_for_pickup") & ~pl.col("_old_ready").fill_null(False)).select(
        *_KEY, "lfd_date", "days_to_lfd", "risk_reason"
    )
    moved = pl.concat(
        [
            j.filter(
                pl.col(c).is_not_null()
                & pl.col(f"_old_{c}").is_not_null()
                & (pl.col(c) != pl.col(f"_old_{c}"))
            ).select(
                *_KEY,
                pl.lit(c.removeprefix("lfd_") if c != "lfd_date" else "binding").alias("source"),
                pl.col(f"_old_{c}").alias("old"),
                pl.col(c).alias("new"),
            )
            for c in ("lfd_date", "lfd_line", "lfd_terminal", "lfd_rail")
        ]
    ).sort("container_number", "source")

    def records(df: pl.DataFrame) -> list[dict[str, Any]]:
        return [
            {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in r.items()}
            for r in df.to_dicts()
        ]

    return {
        "newly_overdue": records(overdue.sort("container_number")),
        "newly_ready": records(ready.sort("container_number")),
        "lfd_moved": records(moved),
        "counts": {
            "newly_overdue": overdue.height,
            "newly_ready": ready.height,
            "lfd_moved": moved.height,
        },
    }
