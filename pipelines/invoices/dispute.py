"""The dispute package of one invoice: a printable, offline HTML page and a CSV.

Each finding of the audit (:func:`pipelines.invoices.audit.audit_invoice`) comes with the
history rows that prove it (what freetime saw, when, through which load or notification: the
evidence's timeline, :mod:`pipelines.history.evidence`), the amounts, and what freetime cannot
know. CSV rows: ``section, line, code, item, value, observed_at, how, notification_id``.

On PostgreSQL the audit reads the live warehouse (a read-only transaction) and the timelines
come from an in-memory copy of the invoice's containers taken in the same snapshot
(:func:`.access.evidence_connection`).
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import html
import io
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.history.evidence import CSS, Change, EvidenceError, gather, label, timeline_cells
from pipelines.invoices.access import Con, Target, evidence_connection, reader
from pipelines.invoices.audit import Result, audit_invoice
from pipelines.warehouse import existing_warehouse

#: opens the connection the evidence of some containers reads
EvidenceOf = Callable[[list[str]], AbstractContextManager[Any]]

#: Which timeline fields prove each finding.
PROOF = {
    "free_time": ("lfd",),
    "lfd_extended": ("lfd",),
    "after_out": (
        "pod_full_out_at",
        "pod_rail_departed_at",
        "pod_rail_loaded_at",
        "empty_terminated_at",
        "final_destination_full_out_at",
    ),
    "not_available": ("current_status", "available_for_pickup", "hold:"),
    "not_chargeable": ("lfd", "pod_discharged_at", "pod_full_out_at"),
}


@dataclass
class Package:
    """One invoice's audit with, per container, its timeline and unknowns."""

    issuer_name: str
    invoice_number: str
    results: list[Result]
    timelines: dict[str, list[Change]] = field(default_factory=dict)
    zones: dict[str, str] = field(default_factory=dict)
    unknowns: list[str] = field(default_factory=list)


def gather_package(
    con: Con, number: str, issuer: str | None = None, evidence: EvidenceOf | None = None
) -> Package:
    """The package of invoice ``number`` (of ``issuer`` when several issuers use it), the
    timelines read from ``evidence(numbers)`` (default: ``con`` itself, a DuckDB connection).
    Raises LookupError."""
    results = audit_invoice(con, number, issuer)
    if not results:
        raise LookupError(f"invoice {number!r} has no line")
    first = results[0].line
    pkg = Package(first.issuer_name, first.invoice_number, results)
    numbers = sorted({r.line.line.container_number for r in results})
    opened = evidence(numbers) if evidence else contextlib.nullcontext(con)
    with opened as facts:
        for n in numbers:
            try:
                ev = gather(facts, n)
            except EvidenceError:
                continue
            pkg.timelines[n] = ev.timeline
            pkg.zones[n] = ev.zone
            for u in ev.unknowns:
                text = f"{n}: {u}"
                if text not in pkg.unknowns and "Charges are computed as of" not in u:
                    pkg.unknowns.append(text)
    pkg.unknowns += [
        "Who caused a hold or an unavailability is not in the record: freetime counts customs, "
        "freight, USDA, VACIS and TMF holds as the importer's, and a box the terminal reported "
        "not available as grounds to dispute even when the importer's own hold was the cause.",
        "Charges are checked against the risk run's charge engine and data/tariffs.csv: a "
        "tariff the issuer changed, or a free-time agreement freetime was not told of, is not "
        "known to it.",
    ]
    return pkg


def proof(pkg: Package, r: Result, code: str) -> list[Change]:
    """The timeline rows of ``r``'s container that prove finding ``code``: those observed
    up to the day after the last billed day (UTC), what freetime knew of the billed days."""
    wanted = PROOF.get(code, ())
    rows = pkg.timelines.get(r.line.line.container_number, [])
    until = r.line.line.billed_to + dt.timedelta(days=1)
    return [
        c
        for c in rows
        if any(c.field.startswith(w) if w.endswith(":") else w in c.field for w in wanted)
        and c.observed_at.astimezone(dt.UTC).date() <= until
    ]


def _money(x: float | None, cur: str) -> str:
    return "not computed" if x is None else f"{x:,.2f} {cur}"


def render_html(pkg: Package, generated_at: dt.datetime | None = None) -> str:
    """The package as one self-contained page (no script, no external resource)."""
    e = html.escape
    at = generated_at or dt.datetime.now(dt.UTC)
    cur = pkg.results[0].line.currency
    billed = sum(r.line.line.amount for r in pkg.results)
    disputed = sum(r.disputed for r in pkg.results)
    lines = "".join(
        f"<tr{' class=flag' if r.findings else ''}><td>{r.line.line_number}</td>"
        f"<td>{e(r.line.line.container_number)}</td><td>{e(r.line.party)} {e(r.line.charge)}</td>"
        f"<td>{r.line.line.billed_from} to {r.line.line.billed_to}</td>"
        f"<td class=num>{r.line.line.days}</td>"
        f"<td class=num>{_money(r.line.line.amount, cur)}</td>"
        f"<td class=num>{_money(r.computed, cur)}</td>"
        f"<td class=num>{_money(r.disputed, cur)}</td>"
        f"<td>{e(', '.join(c for c, _ in r.findings) or 'none')}</td></tr>"
        for r in pkg.results
    )
    findings = ""
    for r in pkg.results:
        for code, sentence in r.findings:
            zone = pkg.zones.get(r.line.line.container_number, "UTC")
            rows = "".join(
                "<tr>" + "".join(f"<td>{e(x)}</td>" for x in timeline_cells(c, zone)) + "</tr>"
                for c in proof(pkg, r, code)
            )
            table = (
                "<table class=proof><tr><th>Observed</th><th>What</th><th>Before</th>"
                f"<th>After</th><th>Reported through</th></tr>{rows}</table>"
                if rows
                else "<p class=note>The invoice itself shows it.</p>"
            )
            findings += (
                f"<h3>Line {r.line.line_number}, {e(r.line.line.container_number)}: "
                f"{e(code)}</h3><p>{e(sentence)}</p>{table}"
            )
    unknowns = "".join(f"<li>{e(u)}</li>" for u in pkg.unknowns)
    deadline = min(r.dispute_by for r in pkg.results)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Invoice dispute: {e(pkg.invoice_number)} ({e(pkg.issuer_name)})</title>
<style>{CSS}</style></head>
<body>
<h1>Invoice dispute: {e(pkg.invoice_number)} ({e(pkg.issuer_name)})</h1>
<p class="note">Written by freetime on {at:%Y-%m-%d %H:%M} UTC from its warehouse history.
Dispute by {deadline} (30 days from the invoice date, 46 CFR 541).</p>
<table id="summary"><tr><th>Billed</th><td>{_money(billed, cur)}</td></tr>
<tr><th>In dispute</th><td>{_money(disputed, cur)}</td></tr>
<tr><th>Invoice date</th><td>{pkg.results[0].line.invoice_date}</td></tr>
<tr><th>Dispute by</th><td>{deadline}</td></tr></table>
<h2>Lines</h2>
<table id="lines"><tr><th>Line</th><th>Container</th><th>Charge</th><th>Billed days</th>
<th>Days</th><th>Billed</th><th>Computed</th><th>In dispute</th><th>Findings</th></tr>{lines}
</table>
<h2>Findings and their proof</h2>
{findings or "<p>No finding: the invoice agrees with the record.</p>"}
<h2>What freetime cannot know</h2>
<ul class="unknowns">{unknowns}</ul>
</body></html>
"""


def render_csv(pkg: Package) -> str:
    """The same package as CSV rows."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        ["section", "line", "code", "item", "value", "observed_at", "how", "notification_id"]
    )
    for r in pkg.results:
        n, cur = r.line.line_number, r.line.currency
        for item, value in (
            ("container", r.line.line.container_number),
            ("billed", f"{r.line.line.amount:.2f} {cur}"),
            ("computed", "" if r.computed is None else f"{r.computed:.2f} {cur}"),
            ("in dispute", f"{r.disputed:.2f} {cur}"),
            ("dispute by", r.dispute_by.isoformat()),
        ):
            w.writerow(["amount", n, "", item, value, "", "", ""])
        for code, sentence in r.findings:
            w.writerow(["finding", n, code, "", sentence, "", "", ""])
            for c in proof(pkg, r, code):
                w.writerow(
                    [
                        "proof",
                        n,
                        code,
                        label(c.field),
                        f"{c.old or ''} -> {c.new or ''}",
                        c.observed_at.astimezone(dt.UTC).isoformat(),
                        c.how,
                        c.notification_id or "",
                    ]
                )
    for u in pkg.unknowns:
        w.writerow(["unknown", "", "", "", u, "", "", ""])
    return buf.getvalue()


def write_dispute(
    warehouse: Target, number: str, out: Path, issuer: str | None = None
) -> tuple[Path, Path]:
    """Write the HTML at ``out`` and the CSV beside it; returns both paths. ``warehouse``: a
    DuckDB path or a PostgreSQL URL (or Warehouse). Raises LookupError, WarehouseError,
    OSError."""
    chosen = existing_warehouse(warehouse)
    with reader(chosen) as con:
        pkg = gather_package(
            con,
            number,
            issuer,
            (lambda numbers: evidence_connection(chosen, numbers, within=con))
            if chosen.is_postgres
            else None,
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet = out.with_suffix(".csv")
    out.write_text(render_html(pkg), encoding="utf-8")
    sheet.write_text(render_csv(pkg), encoding="utf-8")
    return out, sheet
