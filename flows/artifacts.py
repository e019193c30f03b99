"""What the flows publish, as plain data: the at-risk table rows and the summary markdown.

Pure functions of what :mod:`pipelines` returns (no Prefect, no warehouse access), so they are
tested without an engine; :mod:`flows.tasks` hands the results to Prefect's artifact API and the
``freetime run`` command prints the same rows.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Artifact keys: one key per kind, so the UI's Artifacts page shows the latest of each with its
# history, whichever flow (sync, full sync, risk) produced it.
AT_RISK_KEY = "freetime-at-risk"
SUMMARY_KEY = "freetime-risk-summary"

# The HTML report a later issue adds; linked from the markdown only when the file exists.
REPORT_NAME = "report.html"
REPORT_MARKER = "<!-- freetime:report-link -->"

# Columns of the at-risk table artifact (and of the `freetime run` table), in display order.
AT_RISK_COLUMNS = (
    "rank",
    "container",
    "risk_level",
    "lfd",
    "lfd_source",
    "days_to_lfd",
    "working_days_to_lfd",
    "terminal",
    "terminal_code",
    "port",
    "carrier",
    "reason",
    "projected_demurrage",
    "accrued_demurrage",
    "currency",
    "blocking_holds",
    "ready_for_pickup",
    "pickup_appointment_at",
)

MAX_LISTED_CHANGES = 25  # per change list in the markdown; the counts are always complete


def _plain(value: Any) -> Any:
    """JSON-friendly scalars for artifacts: ISO dates, lists joined, NaN as None."""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return value


def at_risk_rows(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows of ``pipelines.analytics.at_risk`` (already most urgent first) as table rows.

    The order is kept as given: urgency is defined once, in the analytics package.
    """
    rows: list[dict[str, Any]] = []
    for i, r in enumerate(records, start=1):
        projected = r.get("projected_demurrage")
        accrued = r.get("accrued_demurrage")
        rows.append(
            {
                "rank": i,
                "container": r.get("container_number"),
                "risk_level": r.get("risk_level"),
                "lfd": _plain(r.get("lfd_date")),
                "lfd_source": r.get("lfd_source"),
                "days_to_lfd": r.get("days_to_lfd"),
                "working_days_to_lfd": r.get("working_days_to_lfd"),
                "terminal": r.get("pod_terminal_name") or r.get("pod_terminal_firms_code"),
                "terminal_code": r.get("pod_terminal_firms_code"),
                "port": r.get("port_of_discharge_locode"),
                "carrier": r.get("shipping_line_scac"),
                "reason": r.get("risk_reason"),
                "projected_demurrage": None if projected is None else round(float(projected), 2),
                "accrued_demurrage": None if accrued is None else round(float(accrued), 2),
                "currency": r.get("currency"),
                "blocking_holds": _plain(r.get("blocking_holds") or []),
                "ready_for_pickup": r.get("ready_for_pickup"),
                "pickup_appointment_at": _plain(r.get("pickup_appointment_at")),
            }
        )
    return rows


def money(amount: float | None, currency: str | None = None) -> str:
    """``1234.5`` -> ``"1,235 USD"``; ``None`` (uncosted) -> ``"n/a"``."""
    if amount is None:
        return "n/a"
    text = f"{amount:,.0f}"
    return f"{text} {currency}" if currency else text


def single_currency(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The currency when every costed row shares one, else None (totals then carry no unit)."""
    found = {r.get("currency") for r in rows if r.get("currency")}
    return found.pop() if len(found) == 1 else None


def level_counts_line(levels: Mapping[str, int]) -> str:
    """``overdue 3 · due_today 1 · imminent 7 · ...`` in the given (urgency) order."""
    return " · ".join(f"{level} {n}" for level, n in levels.items())


@dataclass
class Reconciliation:
    """One list of the API against the warehouse after a reconciled scan."""

    table: str
    api_total: int
    distinct_seen: int
    warehouse_rows: int

    @property
    def matches(self) -> bool:
        return self.api_total == self.distinct_seen == self.warehouse_rows


@dataclass
class SummaryInput:
    """Everything the summary markdown shows; built by the publish task from pipeline results."""

    flow: str
    as_of: dt.datetime
    duckdb_path: Path | str  # str: a PostgreSQL URL, its password masked
    levels: dict[str, int]
    rows: int
    accrued_demurrage: float
    projected_demurrage: float
    projected_detention: float
    uncosted: int
    at_risk: list[dict[str, Any]]
    exposure_by_terminal: list[dict[str, Any]]
    changes: dict[str, Any] | None  # None: no previous risk table to compare with
    load_line: str | None = None
    reconciliation: list[Reconciliation] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)  # step -> seconds, in run order
    requests: dict[str, int] = field(default_factory=dict)  # step -> API requests


def _md_cell(value: Any) -> str:
    text = "" if value is None else str(_plain(value))
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines


def report_link_section(duckdb_path: Path) -> list[str]:
    """The marked place for the HTML report: a link only when ``<warehouse dir>/report.html``
    exists (a later issue writes it); otherwise a note, so the marker is always present."""
    report = duckdb_path.parent / REPORT_NAME
    lines = ["## HTML report", REPORT_MARKER]
    if report.exists():
        lines.append(f"[Open the HTML report]({report.resolve().as_uri()})")
    else:
        lines.append(f"_No HTML report yet (`{report}`)._")
    lines.append("<!-- /freetime:report-link -->")
    return lines


def summary_markdown(s: SummaryInput) -> str:
    """The run's summary: counts per level, exposure by terminal, what changed, (full sync)."""
    cur = single_currency(s.at_risk) or single_currency(s.exposure_by_terminal)
    at_risk_n = len(s.at_risk)
    when = s.as_of.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# Demurrage risk ({s.flow}), as of {when}",
        "",
        f"**{at_risk_n} containers at risk** (overdue, due today or imminent) of {s.rows}. "
        f"Accrued demurrage {money(s.accrued_demurrage, cur)}, projected "
        f"{money(s.projected_demurrage, cur)}, projected detention "
        f"{money(s.projected_detention, cur)}"
        + (f"; {s.uncosted} active containers could not be costed." if s.uncosted else "."),
        "",
        f"Warehouse: `{s.duckdb_path}`" + (f". Load: {s.load_line}" if s.load_line else ""),
        "",
        "## Containers per risk level",
        *_md_table(["risk level", "containers"], s.levels.items()),
        "",
        "## Exposure by terminal",
    ]
    if s.exposure_by_terminal:
        lines += _md_table(
            [
                "port",
                "terminal",
                "active",
                "overdue",
                "due today",
                "imminent",
                "accrued",
                "projected",
                "uncosted",
            ],
            (
                [
                    e.get("port_of_discharge_locode"),
                    e.get("pod_terminal_name") or e.get("pod_terminal_firms_code"),
                    e.get("containers"),
                    e.get("overdue"),
                    e.get("due_today"),
                    e.get("imminent"),
                    money(e.get("accrued_demurrage")),
                    money(e.get("projected_demurrage")),
                    e.get("uncosted"),
                ]
                for e in s.exposure_by_terminal
            ),
        )
    else:
        lines.append("_No containers._")
    lines += ["", "## Since the last run", *changes_section(s.changes)]
    if s.timings:
        lines += [
            "",
            "## Steps",
            *_md_table(
                ["step", "seconds", "API requests"],
                ([k, f"{v:.1f}", s.requests.get(k, "")] for k, v in s.timings.items()),
            ),
        ]
    if s.reconciliation:
        lines += [
            "",
            "## Reconciliation: warehouse against the API",
            *_md_table(
                ["table", "API total", "distinct ids scanned", "warehouse rows", "matches"],
                (
                    [
                        r.table,
                        r.api_total,
                        r.distinct_seen,
                        r.warehouse_rows,
                        "yes" if r.matches else "**no**",
                    ]
                    for r in s.reconciliation
                ),
            ),
        ]
    if isinstance(s.duckdb_path, Path):  # no HTML report of a PostgreSQL warehouse yet
        lines += ["", *report_link_section(s.duckdb_path), ""]
    return "\n".join(lines)


def changes_section(changes: Mapping[str, Any] | None) -> list[str]:
    """Newly overdue, newly ready, LFDs that moved (from ``pipelines.analytics.risk_changes``)."""
    if changes is None:
        return ["_First run on this warehouse: nothing to compare with yet._"]
    counts = changes.get("counts", {})
    lines = [
        f"- newly overdue: **{counts.get('newly_overdue', 0)}**",
        f"- newly ready for pickup: **{counts.get('newly_ready', 0)}**",
        f"- last free days that moved: **{counts.get('lfd_moved', 0)}**",
    ]
    for title, key, headers, cols in (
        (
            "Newly overdue",
            "newly_overdue",
            ["container", "LFD", "days", "reason"],
            ["container_number", "lfd_date", "days_to_lfd", "risk_reason"],
        ),
        (
            "Newly ready",
            "newly_ready",
            ["container", "LFD", "days", "reason"],
            ["container_number", "lfd_date", "days_to_lfd", "risk_reason"],
        ),
        (
            "LFDs that moved",
            "lfd_moved",
            ["container", "source", "was", "now"],
            ["container_number", "source", "old", "new"],
        ),
    ):
        items = list(changes.get(key) or [])
        if not items:
            continue
        lines += [
            "",
            f"### {title}",
            *_md_table(
                headers, ([item.get(c) for c in cols] for item in items[:MAX_LISTED_CHANGES])
            ),
        ]
        if len(items) > MAX_LISTED_CHANGES:
            lines.append(f"_... and {len(items) - MAX_LISTED_CHANGES} more._")
    return lines
