"""Evidence for a demurrage dispute: one container's facts from the warehouse and its history.

:func:`gather` reads the facts (:class:`Evidence`); :func:`render_html` writes them as one
self-contained HTML page (no script, no external resource, prints on A4/Letter) and
:func:`render_csv` as CSV rows of the same facts (``section, item, value, observed_at, how,
notification_id``). Who charges what, and which days, comes from the charge engine
(:func:`pipelines.analytics.charges.compute_charges`, the engine the risk table and the views
read), computed for this container at the instant of the last risk run (now, without one);
each day's availability and holds from history (:func:`pipelines.history.views.day_flags_sql`).
"""

from __future__ import annotations

import csv
import datetime as dt
import html
import io
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from pipelines.analytics.charges import PARTIES, compute_charges
from pipelines.analytics.publish import read_warehouse
from pipelines.analytics.tariffs import load_tariffs
from pipelines.config import ANALYTICS_SCHEMA, DATASET, resolve_warehouse
from pipelines.history import HISTORY_TABLE
from pipelines.history.views import day_flags_sql
from pipelines.warehouse import quote as q
from pipelines.warehouse import reading, table_names

D = q(DATASET)
HOW = {"full": "full load", "incremental": "incremental load", "webhook": "webhook"}
#: How each (party, charge) of the engine is named in the evidence.
PARTY_LABELS = {
    ("terminal", "demurrage"): "Terminal demurrage",
    ("line", "demurrage"): "Line demurrage",
    ("rail", "storage"): "Rail storage",
    ("line", "detention"): "Line detention",
}


class EvidenceError(ValueError):
    """The container cannot be found, or the warehouse has no history; user-safe text."""


@dataclass
class ChargedDay:
    party: str
    charge: str
    day: dt.date
    day_number: int
    tier: str | None
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
class Party:
    """One charging party's row of the engine (``analytics.charges`` columns), its tariff row
    (a dict of the tariff table, or None) and its charged days."""

    row: dict[str, Any]
    tariff: dict[str, Any] | None
    days: list[ChargedDay] = field(default_factory=list)

    @property
    def label(self) -> str:
        return PARTY_LABELS[(self.row["party"], self.row["charge"])]

    @property
    def total(self) -> float | None:
        """The engine's amount for these days (None when uncosted)."""
        return None if self.row["amount"] is None else float(self.row["amount"])


@dataclass
class Evidence:
    """What freetime knows of one container, for a dispute."""

    container_id: str
    facts: dict[str, Any]  # identity, dates, the binding LFD
    as_of: dt.datetime
    parties: list[Party] = field(default_factory=list)
    timeline: list[Change] = field(default_factory=list)
    unknowns: list[str] = field(default_factory=list)

    @property
    def number(self) -> str:
        return str(self.facts.get("container_number") or self.container_id)

    @property
    def days(self) -> list[ChargedDay]:
        """Every party's charged days, party by party."""
        return [d for p in self.parties for d in p.days]

    @property
    def zone(self) -> str:
        return str(self.facts.get("pod_timezone") or "UTC")


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> dict[str, Any] | None:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description or []]
    row = cur.fetchone()
    return dict(zip(names, row, strict=True)) if row else None


def _risk_as_of(con: duckdb.DuckDBPyConnection) -> dt.datetime | None:
    if "demurrage_risk" not in table_names(con, ANALYTICS_SCHEMA):
        return None
    row = con.execute(f"SELECT max(as_of) FROM {ANALYTICS_SCHEMA}.demurrage_risk").fetchone()
    return row[0] if row and isinstance(row[0], dt.datetime) else None


def gather(
    con: duckdb.DuckDBPyConnection,
    container: str,
    tariffs: pl.DataFrame | None = None,
    as_of: dt.datetime | None = None,
) -> Evidence:
    """The evidence of ``container`` (its number or id) at ``as_of`` (default: the instant of
    the published risk run, else now) with ``tariffs`` (default ``data/tariffs.csv``).
    Raises :class:`EvidenceError`, or ``WarehouseIncompatible`` for a warehouse the engine
    cannot read."""
    present = set(table_names(con, DATASET))
    if "containers" not in present or HISTORY_TABLE not in present:
        raise EvidenceError("the warehouse has no history yet: run `freetime load` first")
    ship = "shipments" in present
    term = "terminals" in present
    facts = _one(
        con,
        f"""SELECT c.id AS container_id, c.number AS container_number,
                   coalesce(c.pod_timezone, 'UTC') AS pod_timezone,
                   {
            "s.bill_of_lading_number, s.port_of_discharge_locode, s.port_of_discharge_name"
            if ship
            else "NULL AS bill_of_lading_number, NULL AS port_of_discharge_locode, "
            "NULL AS port_of_discharge_name"
        },
                   {"t.name AS terminal_name" if term else "NULL AS terminal_name"}
            FROM {D}.containers c
            {f"LEFT JOIN {D}.shipments s ON s.id = c.shipment_id" if ship else ""}
            {f"LEFT JOIN {D}.terminals t ON t.id = c.pod_terminal_id" if term else ""}
            WHERE c.id = ? OR upper(c.number) = upper(?)
            ORDER BY c.id LIMIT 1""",
        [container, container],
    )
    if facts is None:
        raise EvidenceError(f"no container {container!r} in the warehouse (give its number or id)")
    cid = str(facts["container_id"])
    h = f"{D}.{HISTORY_TABLE}"
    facts.update(
        _one(
            con,
            f"""SELECT min(observed_at) AS first_seen_at,
                   min(observed_at) FILTER (WHERE
                       (field = 'current_status' AND new_value = 'available')
                       OR (field = 'available_for_pickup' AND new_value = 'true'))
                     AS first_available_at
                FROM {h} WHERE entity = 'container' AND entity_id = ?""",
            [cid],
        )
        or {}
    )
    tariffs = tariffs if tariffs is not None else load_tariffs()
    at = as_of or _risk_as_of(con) or dt.datetime.now(dt.UTC)
    frames = read_warehouse(con, [cid])
    parties, days = compute_charges(frames, at, tariffs).collect()
    facts.update(_container_dates(frames, cid))
    ev = Evidence(cid, facts, at)
    by_line = {r["tariff_line"]: r for r in tariffs.to_dicts()}
    flagged = _flagged(con, days, h)
    order = {key: n for n, key in enumerate(PARTIES)}
    for row in sorted(parties.to_dicts(), key=lambda r: order[(r["party"], r["charge"])]):
        key = (row["party"], row["charge"])
        party = Party(row, by_line.get(row["tariff_line"]))
        party.days = [d for d in flagged if (d.party, d.charge) == key]
        ev.parties.append(party)
    names = _terminal_names(con) if term else {}
    for observed_at, name, old, new, how, notification in con.execute(
        f"SELECT observed_at, field, old_value, new_value, how, notification_id FROM {h} "
        "WHERE entity = 'container' AND entity_id = ? ORDER BY observed_at, load_id, field",
        [cid],
    ).fetchall():
        if name == "pod_terminal_id":  # the terminal's name, not its internal id
            old, new = names.get(old, old), names.get(new, new)
        ev.timeline.append(Change(observed_at, name, old, new, how, notification))
    ev.unknowns = _unknowns(ev)
    return ev


def _container_dates(frames: Any, cid: str) -> dict[str, Any]:
    row = (
        frames.containers.filter(pl.col("id") == cid)
        .select(
            discharged_at="pod_discharged_at",
            picked_up_at="pod_full_out_at",
            rail_departed_at="pod_rail_departed_at",
            inland_picked_up_at="final_destination_full_out_at",
            empty_returned_at="empty_terminated_at",
        )
        .collect()
    )
    return row.to_dicts()[0] if row.height else {}


def _flagged(con: duckdb.DuckDBPyConnection, days: pl.DataFrame, h: str) -> list[ChargedDay]:
    """``days`` (engine rows) with their history flags, in party and day order."""
    if days.is_empty():
        return []
    name = f"_evidence_days_{uuid.uuid4().hex}"
    with con.cursor() as cur:
        cur.register(name, days.to_arrow())
        try:
            rows = cur.execute(
                "SELECT party, charge, day, day_number, tier, rate, not_available_or_held, "
                f"reasons, before_first_seen FROM ({day_flags_sql(name, h)}) "
                "ORDER BY party DESC, charge, day"
            ).fetchall()
        finally:
            cur.unregister(name)
    return [
        ChargedDay(p, c, d, int(n), t, r, bool(held), why, bool(before))
        for p, c, d, n, t, r, held, why, before in rows
    ]


def _terminal_names(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    return {
        str(i): str(n)
        for i, n in con.execute(
            f"SELECT id, name FROM {D}.terminals WHERE name IS NOT NULL"
        ).fetchall()
    }


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
    out.append(
        f"Charges are computed as of {_when(ev.as_of, ev.zone)} (the last risk run, else "
        "now): for a box still in a party's care, its days run to that day."
    )
    if any(d.before_first_seen for d in ev.days):
        out.append(
            "Some charged days ended before freetime first saw the container: their "
            "availability and holds are unknown."
        )
    for p in ev.parties:
        r = p.row
        if r["lfd_date"] is None and r["charge"] != "detention":
            out.append(f"{p.label}: no LFD was reported, so no day is counted as charged.")
        elif r["end_reason"] == "today":
            out.append(f"{p.label}: the box has not left that party's care.")
        elif r["end_reason"] == "done, no date":
            out.append(f"{p.label}: the box is done but its pickup date is unknown: no day.")
        if p.tariff is None and r["lfd_date"] is not None:
            out.append(
                f"{p.label}: no tariff row applies (data/tariffs.csv): its days carry no rate "
                "and no total is computed."
            )
    if f.get("discharged_at") is None:
        out.append("No discharge was reported: free time has not started as far as freetime knows.")
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


def timeline_cells(c: Change, zone: str) -> tuple[str, str, str, str, str]:
    """One timeline row as the evidence prints it: observed (UTC and local), what, before,
    after, reported through (other documents that cite history use the same words)."""
    return (
        _when(c.observed_at, zone),
        label(c.field),
        c.old if c.old is not None else "(none)",
        c.new if c.new is not None else "(none)",
        _how(c),
    )


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


def _tariff_text(p: Party) -> str:
    t = p.tariff
    if t is None:
        return "none applies"
    free = "" if t["free_days"] is None else f"{t['free_days']} {t['free_basis']} days, "
    tiers = "; ".join(
        f"days {_span(x['start'], x['end'])}: {x['rate']:g} {t['currency']}/day"
        for x in t["tiers"] or []
    )
    return f"{free}tiers {tiers} (tariff line {t['tariff_line']}: {t['source']})"


def _money(amount: float | None, currency: str | None) -> str:
    return "not computed" if amount is None else f"{amount:,.2f} {currency or ''}".strip()


def party_facts(ev: Evidence, p: Party) -> list[tuple[str, str]]:
    """The facts of one charging party: its own dates, tariff, days and total."""
    r, z, name = p.row, ev.zone, p.label
    column = r["lfd_column"]
    seen = next((c for c in reversed(ev.timeline) if c.field == column and c.new is not None), None)
    if r["lfd_date"] is None:
        lfd = "not reported" if r["charge"] != "detention" else "unknown"
    elif column:
        lfd = f"{r['lfd_date']} (reported as {column}"
        lfd += f", last set {_when(seen.observed_at, z)} by {_how(seen)})" if seen else ")"
    else:
        lfd = f"{r['lfd_date']} ({r['lfd_source']})"
    if r["binds"]:
        lfd += "; the binding LFD"
    start, free = r["free_time_start"], r["free_days"]
    free_time = (
        f"{start} to {r['lfd_date']} ({free} days)"
        if start is not None and r["lfd_date"] is not None
        else "unknown"
    )
    until = r["chargeable_until"]
    held = sum(d.not_available_or_held for d in p.days)
    return [
        (f"{name}: free time", free_time),
        (f"{name}: last free day", lfd),
        (
            f"{name}: chargeable until",
            f"{until} ({r['end_reason']})" if until is not None else str(r["end_reason"]),
        ),
        (f"{name}: tariff", _tariff_text(p)),
        (f"{name}: days charged", f"{len(p.days)}, {held} while not available or on hold"),
        (f"{name}: total", _money(p.total, r["currency"])),
    ]


def key_facts(ev: Evidence) -> list[tuple[str, str]]:
    """The facts table: the container, its dates, the binding LFD, then each party's facts."""
    f, z = ev.facts, ev.zone
    binding = next((p for p in ev.parties if p.row["binds"]), None)
    out = [
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
        ("Charges computed as of", _when(ev.as_of, z)),
        ("First seen by freetime", _when(f.get("first_seen_at"), z)),
        ("Discharged", _when(f.get("discharged_at"), z)),
        ("First seen available", _when(f.get("first_available_at"), z)),
        ("Departed the port by rail", _when(f.get("rail_departed_at"), z)),
        ("Picked up (full out)", _when(f.get("picked_up_at"), z)),
        ("Picked up at the inland ramp", _when(f.get("inland_picked_up_at"), z)),
        ("Empty returned", _when(f.get("empty_returned_at"), z)),
        (
            "Pick up before (binding LFD)",
            f"{binding.row['lfd_date']} ({binding.row['lfd_source']}: {binding.label})"
            if binding
            else "none (no LFD binds: not posted, or the box is done)",
        ),
    ]
    for p in ev.parties:
        out += party_facts(ev, p)
    return out


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
    day_rows = ""
    for p in ev.parties:
        cur = p.row["currency"] or ""
        day_rows += "".join(
            f"<tr{' class=flag' if d.not_available_or_held else ''}>"
            f"<td>{e(p.label)}</td><td>{d.day.isoformat()}</td><td class=num>{d.day_number}</td>"
            f"<td>{e(d.tier or '')}</td>"
            f"<td class=num>{'' if d.rate is None else f'{d.rate:,.2f} {e(cur)}'}</td>"
            f"<td>{'yes: ' + e(d.reasons or '') if d.not_available_or_held else 'no'}"
            f"{' (before freetime first saw the box: unknown)' if d.before_first_seen else ''}"
            "</td></tr>"
            for d in p.days
        )
        if p.days and p.total is not None:
            day_rows += (
                f"<tr><th colspan=4>Total {e(p.label)}</th>"
                f"<td class=num>{p.total:,.2f} {e(cur)}</td><td></td></tr>"
            )
    timeline = "".join(
        f"<tr><td>{e(_when(c.observed_at, ev.zone))}</td><td>{e(label(c.field))}</td>"
        f"<td>{e(c.old if c.old is not None else '(none)')}</td>"
        f"<td>{e(c.new if c.new is not None else '(none)')}</td><td>{e(_how(c))}</td></tr>"
        for c in ev.timeline
    )
    unknowns = "".join(f"<li>{e(u)}</li>" for u in ev.unknowns)
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
<p class="note">Each party's own chargeable days: the day after its last free day up to the day
the box left its care (or the day charges are computed as of).</p>
<table id="charged-days"><tr><th>Charged by</th><th>Day (local)</th><th>Chargeable day</th>
<th>Tier</th><th>Rate</th><th>Not available or on hold that day</th></tr>{day_rows}</table>
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
    for p in ev.parties:
        for d in p.days:
            flag = f"not available or on hold: {d.reasons}" if d.not_available_or_held else ""
            if d.before_first_seen:
                flag += " (before freetime first saw the box: unknown)"
            rate = "" if d.rate is None else f"{d.rate:.2f}"
            value = f"{p.label}; day {d.day_number}; tier {d.tier or ''}; rate {rate}; {flag}"
            w.writerow(["charged_day", d.day.isoformat(), value.strip(), "", "", ""])
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
    duckdb_path: str | Path | None,
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
    warehouse = resolve_warehouse(duckdb_path)
    if warehouse.is_postgres:  # the containers' rows, copied from one snapshot
        from pipelines.pg import read

        with read.reading(warehouse) as cur:
            copy = read.container_copy(cur, containers)
        with copy:
            found = [gather(copy, c, tariffs) for c in containers]
    else:
        assert warehouse.path is not None
        with reading(warehouse.path) as con:
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
