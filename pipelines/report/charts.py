"""Altair charts of the risk picture, shared by the notebooks and the HTML report.

Each builder takes the risk frame (``analytics.demurrage_risk`` columns, possibly filtered) and
returns a chart with a title, axis titles and units. Data is embedded as plain JSON values
(dates as ISO strings, days as ordinal labels) so a chart renders the same in a notebook, in
the report and in any browser time zone.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import altair as alt
import polars as pl

from pipelines.analytics import LEVELS
from pipelines.analytics.publish import CALENDAR_DAYS
from pipelines.report import data as d

WIDTH = 560
LEVEL_COLORS = {
    "overdue": "#c62828",
    "due_today": "#ef6c00",
    "imminent": "#f9a825",
    "watch": "#9e9d24",
    "ok": "#2e7d32",
    "unknown": "#757575",
    "done": "#bdbdbd",
}
TOP_N = 15


def _values(df: pl.DataFrame) -> alt.Data:
    """Rows as JSON-ready dicts: dates and instants become ISO strings."""

    def conv(v: Any) -> Any:
        return v.isoformat() if isinstance(v, date | datetime) else v

    return alt.Data(
        values=[{k: conv(v) for k, v in row.items()} for row in df.iter_rows(named=True)]
    )


def _title(text: str, subtitle: str | None = None) -> alt.TitleParams:
    return alt.TitleParams(text, subtitle=subtitle or alt.Undefined, anchor="start")


def risk_levels_chart(risk: pl.DataFrame) -> alt.Chart:
    """Containers per risk level, most urgent first."""
    df = d.level_counts(risk)
    return (
        alt.Chart(_values(df), width=WIDTH, height=220)
        .mark_bar()
        .encode(
            x=alt.X("containers:Q", title="Containers (count)"),
            y=alt.Y("risk_level:N", title="Risk level", sort=list(LEVELS)),
            color=alt.Color(
                "risk_level:N",
                legend=None,
                scale=alt.Scale(domain=list(LEVEL_COLORS), range=list(LEVEL_COLORS.values())),
            ),
            tooltip=[
                alt.Tooltip("risk_level:N", title="Risk level"),
                alt.Tooltip("containers:Q", title="Containers"),
            ],
        )
        .properties(title=_title("Containers by risk level", "count of containers"))
    )


def _exposure_chart(
    df: pl.DataFrame, label: str, label_title: str, title: str, currency: str
) -> alt.Chart:
    # the label breaks ties: the same warehouse gives the same page (and the same top N)
    ranked = df.sort(["projected_demurrage", label], descending=[True, False], nulls_last=True)
    df = ranked.head(TOP_N)
    order = df[label].to_list()
    money = f"Demurrage ({currency})"
    base = alt.Chart(_values(df), width=WIDTH, height=max(120, 22 * max(df.height, 1)))
    return (
        base.transform_fold(["projected_demurrage", "accrued_demurrage"], as_=["measure", "amount"])
        .transform_calculate(
            measure="datum.measure === 'projected_demurrage' ? 'projected' : 'accrued so far'"
        )
        .mark_bar(opacity=0.85)
        .encode(
            x=alt.X("amount:Q", title=money, stack=None, axis=alt.Axis(format=",.0f")),
            y=alt.Y(f"{label}:N", title=label_title, sort=order),
            color=alt.Color(
                "measure:N",
                title="Demurrage",
                scale=alt.Scale(
                    domain=["projected", "accrued so far"], range=["#90caf9", "#1565c0"]
                ),
            ),
            tooltip=[
                alt.Tooltip(f"{label}:N", title=label_title),
                alt.Tooltip("containers:Q", title="Active containers"),
                alt.Tooltip("overdue:Q", title="Overdue"),
                alt.Tooltip("due_today:Q", title="Due today"),
                alt.Tooltip("imminent:Q", title="Imminent (1-3 days)"),
                alt.Tooltip("accrued_demurrage:Q", title=f"Accrued ({currency})", format=",.0f"),
                alt.Tooltip(
                    "projected_demurrage:Q", title=f"Projected ({currency})", format=",.0f"
                ),
                alt.Tooltip("uncosted:Q", title="Uncosted containers"),
            ],
        )
        .properties(
            title=_title(
                title,
                f"active containers, {currency}; top {TOP_N} by "
                "projected demurrage; uncosted boxes not included",
            )
        )
    )


def exposure_by_terminal_chart(risk: pl.DataFrame, currency: str | None = None) -> alt.Chart:
    df = d.exposure_by_terminal(risk).with_columns(
        terminal=pl.concat_str(
            [
                pl.col("pod_terminal_name").fill_null("(no terminal)"),
                pl.lit(" ("),
                pl.col("port_of_discharge_locode").fill_null("?"),
                pl.lit(")"),
            ]
        )
    )
    return _exposure_chart(
        df,
        "terminal",
        "Terminal (port)",
        "Demurrage exposure by terminal",
        currency or d.currency_label(risk),
    )


def exposure_by_carrier_chart(risk: pl.DataFrame, currency: str | None = None) -> alt.Chart:
    df = d.exposure_by_carrier(risk).with_columns(
        pl.col("shipping_line_scac").fill_null("(unknown)")
    )
    return _exposure_chart(
        df,
        "shipping_line_scac",
        "Carrier (SCAC)",
        "Demurrage exposure by carrier",
        currency or d.currency_label(risk),
    )


def lfd_calendar_chart(
    risk: pl.DataFrame, today: date, currency: str | None = None, days: int = CALENDAR_DAYS
) -> alt.LayerChart:
    """Boxes whose LFD falls on each of the next ``days`` days (by state) and their cost."""
    currency = currency or d.currency_label(risk)
    cal = d.lfd_calendar(risk, today, days).with_columns(
        day=pl.col("lfd_date").dt.strftime("%a %m-%d"),
        other=(pl.col("boxes") - pl.col("ready") - pl.col("on_hold")).clip(lower_bound=0),
    )
    order = cal["day"].to_list()
    bars = (
        alt.Chart(_values(cal))
        .transform_fold(["ready", "on_hold", "other"], as_=["state", "count"])
        .transform_calculate(
            state="datum.state === 'on_hold' ? 'on hold' : "
            "(datum.state === 'ready' ? 'ready' : 'not ready yet')"
        )
        .mark_bar()
        .encode(
            x=alt.X(
                "day:O",
                title="Last free day (local date)",
                sort=order,
                axis=alt.Axis(labelAngle=-40),
            ),
            y=alt.Y("count:Q", title="Containers with LFD that day (count)", stack="zero"),
            color=alt.Color(
                "state:N",
                title="Container state",
                scale=alt.Scale(
                    domain=["ready", "on hold", "not ready yet"],
                    range=["#66bb6a", "#e53935", "#bdbdbd"],
                ),
            ),
            tooltip=[
                alt.Tooltip("lfd_date:N", title="LFD"),
                alt.Tooltip("state:N", title="State"),
                alt.Tooltip("count:Q", title="Containers"),
            ],
        )
    )
    cost = (
        alt.Chart(_values(cal))
        .mark_line(point=True, color="#1565c0")
        .encode(
            x=alt.X("day:O", sort=order),
            y=alt.Y(
                "projected_demurrage:Q",
                title=f"Projected demurrage ({currency})",
                axis=alt.Axis(format=",.0f", titleColor="#1565c0"),
            ),
            tooltip=[
                alt.Tooltip("lfd_date:N", title="LFD"),
                alt.Tooltip("boxes:Q", title="Containers"),
                alt.Tooltip(
                    "projected_demurrage:Q", title=f"Projected ({currency})", format=",.0f"
                ),
            ],
        )
    )
    return (
        alt.layer(bars, cost)
        .resolve_scale(y="independent")
        .properties(
            width=WIDTH,
            height=260,
            title=_title(
                f"LFD calendar: next {days} days from {today:%Y-%m-%d}",
                f"bars: containers by state (left axis); line: projected demurrage "
                f"in {currency} (right axis)",
            ),
        )
    )


def holds_chart(risk: pl.DataFrame) -> alt.Chart:
    """Active containers per hold type: blocking holds and pending (warning) holds."""
    df = d.holds_breakdown(risk)
    order = (
        df.group_by("hold")
        .agg(pl.col("containers").sum())
        .sort(["containers", "hold"], descending=[True, False])["hold"]
        .to_list()
    )
    return (
        alt.Chart(_values(df), width=WIDTH, height=max(120, 26 * max(len(order), 1)))
        .mark_bar()
        .encode(
            x=alt.X(
                "containers:Q", title="Active containers (count)", axis=alt.Axis(tickMinStep=1)
            ),
            y=alt.Y("hold:N", title="Hold", sort=order),
            color=alt.Color(
                "status:N",
                title="Hold status",
                scale=alt.Scale(domain=["blocking", "pending"], range=["#e53935", "#ffb300"]),
            ),
            tooltip=[
                alt.Tooltip("hold:N", title="Hold"),
                alt.Tooltip("status:N", title="Status"),
                alt.Tooltip("containers:Q", title="Containers"),
            ],
        )
        .properties(
            title=_title(
                "Holds on active containers",
                "blocking holds stop pickup; pending holds are a warning",
            )
        )
    )


def _boxplot(
    df: pl.DataFrame, value: str, group: str, x_title: str, y_title: str, title: str, subtitle: str
) -> alt.Chart:
    order = (
        df.group_by(group).agg(pl.col(value).median()).sort(value, descending=True)[group].to_list()
    )
    return (
        alt.Chart(_values(df), width=WIDTH, height=max(120, 24 * max(len(order), 1)))
        .mark_boxplot(extent=1.5, color="#5c6bc0")
        .encode(
            x=alt.X(f"{value}:Q", title=x_title),
            y=alt.Y(f"{group}:N", title=y_title, sort=order),
        )
        .properties(title=_title(title, subtitle))
    )


def dwell_chart(risk: pl.DataFrame) -> alt.Chart:
    """Days from discharge to leaving the port (or to as-of, still there), per port."""
    df = risk.select(
        pl.col("port_of_discharge_locode").fill_null("(unknown)").alias("port"), "dwell_days"
    ).drop_nulls("dwell_days")
    return _boxplot(
        df,
        "dwell_days",
        "port",
        "Dwell at port of discharge (days)",
        "Port of discharge (UN/LOCODE)",
        "Dwell distribution by port",
        "discharge to port exit, or to the as-of time if still there; "
        "box = quartiles, whiskers = 1.5 IQR",
    )


def eta_slip_chart(risk: pl.DataFrame) -> alt.Chart:
    """Arrival (or latest ETA) minus the original ETA, per carrier."""
    df = risk.select(
        pl.col("shipping_line_scac").fill_null("(unknown)").alias("carrier"), "eta_slip_days"
    ).drop_nulls("eta_slip_days")
    return _boxplot(
        df,
        "eta_slip_days",
        "carrier",
        "ETA slip (days; positive = late)",
        "Carrier (SCAC)",
        "ETA slip by carrier",
        "actual (else latest) arrival minus original ETA at the port of discharge",
    )


def all_charts(rd: d.RiskData) -> dict[str, alt.TopLevelMixin]:
    """Every chart of the risk picture, in report order, keyed by a stable id."""
    risk, cur = rd.risk, rd.currency
    return {
        "risk-levels": risk_levels_chart(risk),
        "lfd-calendar": lfd_calendar_chart(risk, rd.today, cur),
        "exposure-terminal": exposure_by_terminal_chart(risk, cur),
        "exposure-carrier": exposure_by_carrier_chart(risk, cur),
        "holds": holds_chart(risk),
        "dwell": dwell_chart(risk),
        "eta-slip": eta_slip_chart(risk),
    }
