"""Evidence for a demurrage dispute: one container's facts from the warehouse and its history.

:func:`gather` reads the facts (:class:`Evidence`); :func:`render_html` writes them as one
self-contained HTML page (no script, no external resource, prints on A4/Letter) and
:func:`render_csv` as CSV rows of the same facts (``section, item, value, observed_at, how,
notification_id``). Days charged come from ``terminal49.charged_days``; their rate from the
tariff row that applies (:mod:`pipelines.analytics.tariffs`), when one does.
"""

from __future__ import annotations

import csv
import datetime as dt
import html
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from pipelines.analytics.tariffs import load_tariffs
from pipelines.config import DATASET
from pipelines.history import HISTORY_TABLE, q
from pipelines.warehouse import reading

D = q(DATASET)
HOW = {"full": "full load", "incremental": "incremental load", "webhook": "webhook"}


class EvidenceError(ValueError):
    """The container cannot be found, or the warehouse has no history; user-safe text."""


@dataclass
class ChargedDay:
    day: dt.date
    rate: float | None
    not_available_or_held: bool
    reasons: str | None
    before_first_seen: bool


@dataclass
class Change:
    observed_at: dt.datetime
    field: str
    old: str | None
    new: str | None
    how: str
    notification_id: str | None


@dataclass
class Evidence:
    """What freetime knows of one container, for a dispute."""

    container_id: str
    facts: dict[str, Any]  # the free_time_used row plus identity columns
    tariff: dict[str, Any] | None
    days: list[ChargedDay] = field(default_factory=list)
    timeline: list[Change] = field(default_factory=list)
    unknowns: list[str] = field(default_factory=list)

    @property
    def number(self) -> str:
        return str(self.facts.get("container_number") or self.container_id)

    @property
    def total(self) -> float | None:
        if not self.days or any(d.rate is None for d in self.days):
            return None
        return float(sum(d.rate or 0.0 for d in self.days))

    @property
    def zone(self) -> str:
        return str(self.facts.get("pod_timezone") or "UTC")


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> dict[str, Any] | None:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description or []]
    row = cur.fetchone()
    return dict(zip(names, row, strict=True)) if row else None


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = ? UNION "
        "SELECT view_name FROM duckdb_views() WHERE schema_name = ?",
        [DATASET, DATASET],
    ).fetchall()
    return {r[0] for r in rows}


def gather(
    con: duckdb.DuckDBPyConnection, container: str, tariffs: pl.DataFrame | None = None
) -> Evidence:
    """The evidence of ``container`` (its number or id). Raises :class:`EvidenceError`."""
    present = _tables(con)
    if "free_time_used" not in present or HISTORY_TABLE not in present:
        raise EvidenceError("the warehouse has no history yet: run `freetime load` first")
    ship = "shipments" in present
    term = "terminals" in present
    facts = _one(
        con,
        f"""SELECT f.*, c.equipment_type,
                   {
            "s.bill_of_lading_number, s.shipping_line_scac, s.port_of_discharge_locode, "
            "s.port_of_discharge_name"
            if ship
            else "NULL AS bill_of_lading_number, "
            "NULL AS shipping_line_scac, NULL AS port_of_discharge_locode, "
            "NULL AS port_of_discharge_name"
        },
                   {"t.name AS terminal_name" if term else "NULL AS terminal_name"}
            FROM {D}.free_time_used f JOIN {D}.containers c ON c.id = f.container_id
            {f"LEFT JOIN {D}.shipments s ON s.id = c.shipment_id" if ship else ""}
            {f"LEFT JOIN {D}.terminals t ON t.id = c.pod_terminal_id" if term else ""}
            WHERE c.id = ? OR upper(c.number) = upper(?)
            ORDER BY c.id LIMIT 1""",
        [container, container],
    )
    if facts is None:
        raise EvidenceError(f"no container {container!r} in the warehouse (give its number or id)")
    cid = str(facts["container_id"])
    tariff = match_tariff(tariffs if tariffs is not None else load_tariffs(), facts)
    ev = Evidence(cid, facts, tariff)
    days = con.execute(
        f"SELECT day, not_available_or_held, reasons, before_first_seen FROM {D}.charged_days "
        "WHERE container_id = ? ORDER BY day",
        [cid],
    ).fetchall()
    for k, (day, held, reasons, before) in enumerate(days, start=1):
        ev.days.append(ChargedDay(day, rate_of_day(tariff, k), bool(held), reasons, bool(before)))
    for row in con.execute(
        f"SELECT observed_at, field, old_value, new_value, how, notification_id FROM {D}."
        f"{HISTORY_TABLE} WHERE entity = 'container' AND entity_id = ? "
        "ORDER BY observed_at, load_id, field",
        [cid],
    ).fetchall():
        ev.timeline.append(Change(*row))
    ev.unknowns = _unknowns(ev)
    return ev


def match_tariff(tariffs: pl.DataFrame, facts: dict[str, Any]) -> dict[str, Any] | None:
    """The demurrage tariff row that applies (most specific: carrier+port > carrier > port >
    any; a row naming the equipment beats a blank one), or None."""
    equipment = "reefer" if "reefer" in str(facts.get("equipment_type") or "").lower() else "dry"
    best: tuple[float, dict[str, Any]] | None = None
    for row in tariffs.filter(pl.col("charge") == "demurrage").to_dicts():
        carrier, port, eq = row["carrier_scac"], row["port_locode"], row["equipment"]
        if carrier not in (None, facts.get("shipping_line_scac")):
            continue
        if port not in (None, facts.get("port_of_discharge_locode")):
            continue
        if eq not in (None, equipment):
            continue
        rank = (2 if carrier else 0) + (1 if port else 0) + (0.5 if eq else 0)
        if best is None or rank > best[0]:
            best = (rank, row)
    return best[1] if best else None


def rate_of_day(tariff: dict[str, Any] | None, k: int) -> float | None:
    """The rate of the ``k``-th chargeable day (1 = the day after the LFD) by the tariff."""
    if tariff is None:
        return None
    for tier in tariff["tiers"] or []:
        if tier["start"] <= k and (tier["end"] is None or k <= tier["end"]):
            return float(tier["rate"])
    return None


def _unknowns(ev: Evidence) -> list[str]:
    f = ev.facts
    out = []
    seen = f.get("first_seen_at")
    if seen is not None:
        out.append(
            f"freetime first saw this container on {_when(seen, ev.zone)}: what happened "
            "before (holds, availability, LFDs reported earlier) is not known to it."
        )
    out.append(
        "Times in the timeline are when freetime observed a change (a load or a webhook), not "
        "when it happened at the terminal or line: a change between two observations is dated "
        "by the later one."
    )
    if any(d.before_first_seen for d in ev.days):
        out.append(
            "Some charged days ended before freetime first saw the container: their "
            "availability and holds are unknown."
        )
    if f.get("lfd_date") is None:
        out.append(
            "No LFD was reported: the end of free time is unknown, so no day is counted as charged."
        )
    if f.get("discharged_at") is None:
        out.append("No discharge was reported: free time has not started as far as freetime knows.")
    if f.get("picked_up_at") is None and f.get("discharged_at") is not None:
        out.append("The box has not been picked up: charged days run up to today.")
    if ev.tariff is None:
        out.append(
            "No tariff row applies (data/tariffs.csv): the days charged carry no rate "
            "and no total is computed."
        )
    return out


# -- rendering -------------------------------------------------------------------------------
def _when(value: Any, zone: str) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, dt.datetime):
        from zoneinfo import ZoneInfo

        local = value.astimezone(ZoneInfo(zone))
        return f"{value.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC ({local:%Y-%m-%d %H:%M} local)"
    return str(value)


def _how(c: Change) -> str:
    text = HOW.get(c.how, c.how)
    return f"{text} {c.notification_id}" if c.notification_id else text


LABELS = {
    "current_status": "status",
    "available_for_pickup": "available for pickup",
    "pickup_appointment_at": "pickup appointment",
    "pod_discharged_at": "discharged",
    "pod_full_out_at": "full out (picked up)",
    "empty_terminated_at": "empty returned",
    "pod_arrived_at": "vessel arrived",
    "pod_terminal_id": "terminal",
    "listed": "listed by the API",
}


def label(field_name: str) -> str:
    if field_name.startswith("hold:"):
        return f"{field_name[5:]} hold"
    if field_name.startswith("fee:"):
        return f"{field_name[4:]} fee reported"
    if "lfd" in field_name:
        return f"LFD ({field_name})"
    return LABELS.get(field_name, field_name)


def _span(start: int, end: int | None) -> str:
    return f"{start}-{end}" if end is not None else f"{start}+"


def key_facts(ev: Evidence) -> list[tuple[str, str]]:
    f, z = ev.facts, ev.zone
    basis = f.get("lfd_basis")
    seen = next((c for c in reversed(ev.timeline) if c.field == basis and c.new is not None), None)
    reported = f"the LFD reported as {basis}" if basis else "no LFD reported"
    if seen is not None:
        reported += f", last set {_when(seen.observed_at, z)} by {_how(seen)}"
    tariff = ev.tariff
    tariff_text = (
        f"{tariff['free_days']} {tariff['free_basis']} days, tiers "
        + "; ".join(
            f"days {_span(t['start'], t['end'])}: {t['rate']:g} {tariff['currency']}/day"
            for t in tariff["tiers"] or []
        )
        + f" (tariff line {tariff['tariff_line']}: {tariff['source']})"
        if tariff
        else "none applies"
    )
    total = ev.total
    return [
        ("Container", ev.number),
        ("Bill of lading", str(f.get("bill_of_lading_number") or "unknown")),
        (
            "Port of discharge",
            " ".join(
                str(x)
                for x in (f.get("port_of_discharge_name"), f.get("port_of_discharge_locode"))
                if x
            )
            or "unknown",
        ),
        ("Terminal", str(f.get("terminal_name") or "unknown")),
        ("Time zone of the port", z),
        ("First seen by freetime", _when(f.get("first_seen_at"), z)),
        ("Discharged", _when(f.get("discharged_at"), z)),
        ("First seen available", _when(f.get("first_available_at"), z)),
        (
            "Free time allowed",
            f"{f['free_days']} days" if f.get("free_days") is not None else "unknown",
        ),
        ("Basis of free time", reported),
        ("Tariff", tariff_text),
        ("Start of free time", str(f.get("free_time_start") or "unknown")),
        ("End of free time (LFD)", str(f.get("free_time_end") or "unknown")),
        ("Picked up (full out)", _when(f.get("picked_up_at"), z)),
        ("Empty returned", _when(f.get("empty_returned_at"), z)),
        ("Days charged", str(len(ev.days))),
        (
            "Days charged while not available or on hold",
            str(sum(d.not_available_or_held for d in ev.days)),
        ),
        (
            "Total freetime computes",
            f"{total:,.2f} {tariff['currency']}"
            if total is not None and tariff
            else "not computed",
        ),
    ]


CSS = """
body { font: 14px/1.45 system-ui, sans-serif; color: #111; margin: 2em auto; max-width: 60em; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; width: 100%; }
th, td { border: 1px solid #bbb; padding: 3px 6px; text-align: left; vertical-align: top; }
th { background: #eee; } td.num { text-align: right; }
tr.flag td { background: #fde2e2; font-weight: 600; }
.note { color: #444; } ul.unknowns li { margin-bottom: 0.3em; }
@media print {
  body { margin: 0; max-width: none; font-size: 10.5pt; }
  tr, li { page-break-inside: avoid; } th { background: #eee !important; }
  tr.flag td { background: #fde2e2 !important; -webkit-print-color-adjust: exact;
               print-color-adjust: exact; }
}
@page { margin: 15mm; }
"""


def render_html(ev: Evidence, generated_at: dt.datetime | None = None) -> str:
    """One self-contained HTML page of ``ev``'s facts."""
    e = html.escape
    at = generated_at or dt.datetime.now(dt.UTC)
    facts = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in key_facts(ev))
    cur = ev.tariff["currency"] if ev.tariff else ""
    day_rows = "".join(
        f"<tr{' class=flag' if d.not_available_or_held else ''}>"
        f"<td>{d.day.isoformat()}</td><td class=num>{k}</td>"
        f"<td class=num>{'' if d.rate is None else f'{d.rate:,.2f} {e(cur)}'}</td>"
        f"<td>{'yes: ' + e(d.reasons or '') if d.not_available_or_held else 'no'}"
        f"{' (before freetime first saw the box: unknown)' if d.before_first_seen else ''}"
        "</td></tr>"
        for k, d in enumerate(ev.days, start=1)
    )
    timeline = "".join(
        f"<tr><td>{e(_when(c.observed_at, ev.zone))}</td><td>{e(label(c.field))}</td>"
        f"<td>{e(c.old if c.old is not None else '(none)')}</td>"
        f"<td>{e(c.new if c.new is not None else '(none)')}</td><td>{e(_how(c))}</td></tr>"
        for c in ev.timeline
    )
    unknowns = "".join(f"<li>{e(u)}</li>" for u in ev.unknowns)
    total = ev.total
    total_row = (
        f"<tr><th colspan=2>Total</th><td class=num>{total:,.2f} {e(cur)}</td><td></td></tr>"
        if total is not None
        else ""
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Demurrage evidence: container {e(ev.number)}</title>
<style>{CSS}</style></head>
<body>
<h1>Demurrage evidence: container {e(ev.number)}</h1>
<p class="note">Written by freetime on {at:%Y-%m-%d %H:%M} UTC from its warehouse history.
Local times are in the port's zone ({e(ev.zone)}).</p>
<h2>Facts</h2>
<table id="facts">{facts}</table>
<h2>Days charged</h2>
<table id="charged-days"><tr><th>Day (local)</th><th>Chargeable day</th><th>Rate</th>
<th>Not available or on hold that day</th></tr>{day_rows}{total_row}</table>
<h2>Timeline</h2>
<table id="timeline"><tr><th>Observed</th><th>What</th><th>Before</th><th>After</th>
<th>Reported through</th></tr>{timeline}</table>
<h2>What freetime cannot know</h2>
<ul class="unknowns">{unknowns}</ul>
</body></html>
"""


def render_csv(ev: Evidence) -> str:
    """The same facts as CSV: ``section, item, value, observed_at, how, notification_id``."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["section", "item", "value", "observed_at", "how", "notification_id"])
    for k, v in key_facts(ev):
        w.writerow(["fact", k, v, "", "", ""])
    for n, d in enumerate(ev.days, start=1):
        flag = f"not available or on hold: {d.reasons}" if d.not_available_or_held else ""
        rate = "" if d.rate is None else f"{d.rate:.2f}"
        w.writerow(
            ["charged_day", d.day.isoformat(), f"day {n}; rate {rate}; {flag}".strip(), "", "", ""]
        )
    for c in ev.timeline:
        w.writerow(
            [
                "timeline",
                label(c.field),
                f"{c.old or ''} -> {c.new or ''}",
                c.observed_at.astimezone(dt.UTC).isoformat(),
                c.how,
                c.notification_id or "",
            ]
        )
    for u in ev.unknowns:
        w.writerow(["unknown", "", u, "", "", ""])
    return buf.getvalue()


def write_evidence(
    duckdb_path: Path,
    containers: list[str],
    out: Path | None = None,
    tariffs_path: str | Path | None = None,
) -> list[tuple[Path, Path]]:
    """Write an HTML page and a CSV per container; returns the (html, csv) paths written.

    ``out``: the HTML file for one container; with several, each is written beside it as
    ``<stem>-<container number>.html``. Default ``data/evidence/<container number>.html``.
    Raises :class:`EvidenceError`, TariffError, WarehouseError, OSError.
    """
    tariffs = load_tariffs(tariffs_path)
    with reading(duckdb_path) as con:
        found = [gather(con, c, tariffs) for c in containers]
    written = []
    for ev in found:
        if out is None:
            page = Path("data") / "evidence" / f"{_safe(ev.number)}.html"
        elif len(found) == 1:
            page = out
        else:
            page = out.with_name(f"{out.stem}-{_safe(ev.number)}{out.suffix or '.html'}")
        page.parent.mkdir(parents=True, exist_ok=True)
        sheet = page.with_suffix(".csv")
        page.write_text(render_html(ev), encoding="utf-8")
        sheet.write_text(render_csv(ev), encoding="utf-8")
        written.append((page, sheet))
    return written


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)
