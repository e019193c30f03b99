"""The invoice audit: every current invoice line against the charge engine and history.

Each billed day of a line is looked up in the engine's chargeable days of the party the line
bills (``analytics.charge_days``, published by the risk run, with
:func:`pipelines.history.views.day_flags_sql`'s flags: the same rule the evidence and
``charged_days`` use). Findings (:data:`FINDINGS`), each a short code and a sentence:

* day by day: ``free_time`` (the day is on or before the party's LFD), ``lfd_extended`` (it
  is, because the LFD was later extended: the issuer billed by the earlier one),
  ``after_out`` (the box had left that party's care: full out, rail departure or loading,
  empty return), ``not_chargeable`` (the engine has no such day for that party: no free time
  ended, no LFD, the box never reached it), ``not_available`` (the terminal reported the box not
  available, or a hold the importer does not cause: any hold but customs, freight, USDA,
  VACIS and TMF), ``overlap`` (the day is billed on an earlier invoice or line too);
* per line: ``rate`` (a billed rate that is not the tariff's tier rate), ``arithmetic``
  (days or amounts that do not add up), ``currency`` (not the tariff's), ``missing_fields``
  (content 46 CFR 541 requires), ``issued_late`` (more than 30 days after the last billed
  day), ``unverified`` (days freetime cannot check: before it first saw the box, after the
  last risk run, or without a tariff).

``computed_amount`` is what the engine charges for the billed days that hold (tariff rates;
the billed rate where freetime has none); ``difference`` is billed minus computed. The amount
in dispute is the difference when positive, or the whole billed amount when the line need not
be paid at all (``missing_fields``, ``issued_late``: the rule's consequence; ``currency``:
there is nothing to compare with). ``dispute_by`` is the invoice date plus 30 days.

The same SQL reads and publishes on a DuckDB file and on PostgreSQL (:mod:`.access`,
:mod:`pipelines.dialect`); ``findings`` is a STRUCT list on DuckDB and a JSONB array of the same
objects on PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from pipelines.config import ANALYTICS_SCHEMA, DATASET
from pipelines.dialect import Dialect
from pipelines.history import HISTORY_TABLE
from pipelines.history.views import day_flags_sql
from pipelines.invoices.access import (
    Con,
    Target,
    dialect,
    insert_rows,
    reader,
    transaction,
    writer,
)
from pipelines.invoices.schema import CENT, InvoiceLine, line_arithmetic
from pipelines.invoices.store import INVOICES, LINES, ensure_tables
from pipelines.pg.cursor import columns, is_postgres
from pipelines.warehouse import WarehouseMissing, quote, table_names

A, D = quote(ANALYTICS_SCHEMA), quote(DATASET)
AUDIT_TABLE, BY_MONTH_VIEW = "invoice_audit", "invoice_disputes_by_month"
#: Every finding code, in the order they are listed.
FINDINGS = (
    "free_time",
    "lfd_extended",
    "after_out",
    "not_chargeable",
    "not_available",
    "overlap",
    "rate",
    "arithmetic",
    "currency",
    "missing_fields",
    "issued_late",
    "unverified",
)
#: Findings that void the whole line: it is disputed in full.
VOIDING = ("missing_fields", "issued_late", "currency")
#: Holds the importer's own side causes (customs, its freight, USDA, its exam, its fees).
IMPORTER_HOLDS = ("customs", "freight", "usda", "vacis", "tmf")
#: Reasons a box left a party's care (``analytics.charges.end_reason``).
LEFT = ("full out", "rail departure", "rail loading", "empty return")
#: Days allowed by 46 CFR 541 to issue an invoice and to dispute it.
ISSUE_DAYS = DISPUTE_DAYS = 30
#: The rule's required content beyond container, billed dates and amounts.
REQUIRED_CONTENT = (
    "bill_of_lading",
    "port",
    "free_days",
    "free_time_start",
    "free_time_end",
    "rate or tiers",
    "dispute_contact",
)

AUDIT_COLUMNS = (
    "issuer_name",
    "invoice_number",
    "version",
    "line_number",
    "issuer_kind",
    "invoice_date",
    "invoice_month",
    "container_number",
    "party",
    "charge",
    "billed_from",
    "billed_to",
    "billed_days",
    "billed_amount",
    "computed_amount",
    "difference",
    "disputed_amount",
    "currency",
    "findings",
    "dispute_by",
    "audited_at",
)


@dataclass
class Day:
    """One chargeable day of the engine, with its history flags."""

    day_number: int
    tier: str | None
    rate: float | None
    reasons: str | None
    before_first_seen: bool


@dataclass
class PartyFacts:
    """The engine's row of one container and party (``analytics.charges``) and its days."""

    lfd_date: dt.date | None
    lfd_column: str | None
    chargeable_until: dt.date | None
    end_reason: str | None
    currency: str | None
    days: dict[dt.date, Day] = field(default_factory=dict)
    #: the earliest LFD history shows for the party's column, when it was later extended
    first_lfd: dt.date | None = None


@dataclass
class AuditLine:
    """One stored invoice line with its invoice's fields."""

    issuer_name: str
    invoice_number: str
    version: int
    line_number: int
    issuer_kind: str
    invoice_date: dt.date
    currency: str
    dispute_contact: str | None
    party: str
    charge: str
    line: InvoiceLine

    @property
    def order(self) -> tuple[dt.date, str, str, int]:
        return (self.invoice_date, self.issuer_name, self.invoice_number, self.line_number)


@dataclass
class Result:
    line: AuditLine
    computed: float | None
    findings: list[tuple[str, str]]
    #: the billed days each day-level finding covers
    days: dict[str, list[dt.date]] = field(default_factory=dict)

    @property
    def difference(self) -> float | None:
        return None if self.computed is None else round(self.line.line.amount - self.computed, 2)

    @property
    def disputed(self) -> float:
        billed = self.line.line.amount
        if any(code in VOIDING for code, _ in self.findings):
            return round(billed, 2)
        diff = self.difference
        return round(max(diff, 0.0), 2) if diff is not None else 0.0

    @property
    def dispute_by(self) -> dt.date:
        return self.line.invoice_date + dt.timedelta(days=DISPUTE_DAYS)


def _dates(first: dt.date, last: dt.date) -> list[dt.date]:
    return [first + dt.timedelta(days=k) for k in range((last - first).days + 1)]


def _span(days: Sequence[dt.date]) -> str:
    """``2030-01-11 to 2030-01-14 (4 days)`` or ``2030-01-11`` (or a list of such runs)."""
    runs: list[list[dt.date]] = []
    for d in sorted(days):
        if runs and (d - runs[-1][-1]).days == 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    parts = [f"{r[0]}" if len(r) == 1 else f"{r[0]} to {r[-1]}" for r in runs]
    n = len(days)
    return f"{', '.join(parts)} ({n} day{'s' if n != 1 else ''})"


def _blocking(reasons: str | None) -> list[str]:
    """The reasons of a day that are grounds to dispute (not the importer's own holds)."""
    out = []
    for r in (reasons or "").split(", "):
        if not r:
            continue
        if r.endswith(" hold") and r[: -len(" hold")].lower() in IMPORTER_HOLDS:
            continue
        out.append(r)
    return out


def audit_line(
    a: AuditLine,
    facts: PartyFacts | None,
    earlier: Iterable[tuple[AuditLine, set[dt.date]]],
    risk_as_of: dt.date | None,
) -> Result:
    """Audit one line against the engine's ``facts`` of its party (None: the engine has no
    row, e.g. no detention before pickup) and ``earlier`` lines billing the same party's days
    of the box (with their billed days). Pure logic."""
    x = a.line
    per_day: dict[str, list[dt.date]] = defaultdict(list)
    computed = 0.0
    rate_days: list[tuple[dt.date, float, float]] = []
    held_reasons: set[str] = set()
    billed_before: dict[str, set[dt.date]] = defaultdict(set)
    for other, days in earlier:
        billed_before[f"{other.invoice_number} line {other.line_number}"] |= days
    for d in _dates(x.billed_from, x.billed_to):
        day = facts.days.get(d) if facts else None
        if day is None:
            if facts is None:
                per_day["not_chargeable"].append(d)
            elif (
                facts.chargeable_until is not None
                and d > facts.chargeable_until
                and facts.end_reason in LEFT
            ):
                per_day["after_out"].append(d)
            elif facts.lfd_date is not None and d <= facts.lfd_date:
                if facts.first_lfd is not None and d > facts.first_lfd:
                    per_day["lfd_extended"].append(d)
                else:
                    per_day["free_time"].append(d)
            elif (
                facts.end_reason == "today"
                and facts.chargeable_until is not None
                and d > facts.chargeable_until
            ):
                per_day["unverified_after_run"].append(d)
                computed += x.billed_rate(None) or 0.0
            else:
                per_day["not_chargeable"].append(d)
            continue
        if any(d in days for days in billed_before.values()):
            per_day["overlap"].append(d)
            continue
        if a.charge != "detention":
            blocking = _blocking(day.reasons)
            if blocking:
                per_day["not_available"].append(d)
                held_reasons.update(blocking)
                continue
        if day.before_first_seen:
            per_day["unverified_before_seen"].append(d)
        billed_rate = x.billed_rate(day.day_number)
        if day.rate is None:
            per_day["unverified_no_tariff"].append(d)
            computed += billed_rate or 0.0
            continue
        computed += day.rate
        if billed_rate is not None and abs(billed_rate - day.rate) > CENT:
            rate_days.append((d, billed_rate, day.rate))
    findings: list[tuple[str, str]] = []
    name = f"{a.party} {a.charge}"
    if per_day["free_time"]:
        findings.append(
            (
                "free_time",
                f"{_span(per_day['free_time'])} billed within free time: the {name} LFD is "
                f"{facts.lfd_date if facts else 'unknown'}.",
            )
        )
    if per_day["lfd_extended"] and facts:
        findings.append(
            (
                "lfd_extended",
                f"{_span(per_day['lfd_extended'])} billed before the extended LFD: the LFD "
                f"moved from {facts.first_lfd} to {facts.lfd_date} ({facts.lfd_column}).",
            )
        )
    if per_day["after_out"] and facts:
        findings.append(
            (
                "after_out",
                f"{_span(per_day['after_out'])} billed after the {name} charge ended: "
                f"{facts.end_reason} on {facts.chargeable_until}.",
            )
        )
    if per_day["not_chargeable"]:
        why = (
            f"freetime has no {name} charge for this box"
            if facts is None
            else f"the {name} LFD is {facts.lfd_date or 'not known'} and charges end "
            f"{facts.chargeable_until or 'at an unknown date'} ({facts.end_reason})"
        )
        findings.append(
            ("not_chargeable", f"{_span(per_day['not_chargeable'])} are not chargeable: {why}.")
        )
    if per_day["not_available"]:
        findings.append(
            (
                "not_available",
                f"{_span(per_day['not_available'])} billed while the box could not be picked "
                f"up: {', '.join(sorted(held_reasons))} (history).",
            )
        )
    if per_day["overlap"]:
        others = sorted(k for k, v in billed_before.items() if v & set(per_day["overlap"]))
        findings.append(
            (
                "overlap",
                f"{_span(per_day['overlap'])} already billed on {', '.join(others)}.",
            )
        )
    if rate_days:
        billed = sorted({f"{b:g}" for _, b, _ in rate_days})
        tariff = sorted({f"{t:g}" for _, _, t in rate_days})
        findings.append(
            (
                "rate",
                f"{_span([d for d, _, _ in rate_days])} billed at {'/'.join(billed)} "
                f"{a.currency}/day; the tariff's tier rate is {'/'.join(tariff)}.",
            )
        )
    sums = line_arithmetic(x)
    if sums:
        findings.append(("arithmetic", "; ".join(sums) + "."))
    if facts is not None and facts.currency is not None and facts.currency != a.currency:
        findings.append(("currency", f"billed in {a.currency}; the tariff is in {facts.currency}."))
    missing = [
        f
        for f, v in (
            ("bill_of_lading", x.bill_of_lading),
            ("port", x.port),
            ("free_days", x.free_days),
            ("free_time_start", x.free_time_start),
            ("free_time_end", x.free_time_end),
            ("rate or tiers", x.rate if x.rate is not None else x.tiers),
            ("dispute_contact", a.dispute_contact),
        )
        if v is None
    ]
    if missing:
        findings.append(
            (
                "missing_fields",
                f"the invoice lacks content 46 CFR 541 requires: {', '.join(missing)}.",
            )
        )
    late = x.billed_to + dt.timedelta(days=ISSUE_DAYS)
    if a.invoice_date > late:
        findings.append(
            (
                "issued_late",
                f"issued {a.invoice_date}, more than {ISSUE_DAYS} days after the last billed day "
                f"{x.billed_to} (due by {late}).",
            )
        )
    unverified = []
    if per_day["unverified_before_seen"]:
        unverified.append(
            f"{_span(per_day['unverified_before_seen'])} ended before freetime first saw the "
            "box: their availability and holds are unknown"
        )
    if per_day["unverified_after_run"]:
        unverified.append(
            f"{_span(per_day['unverified_after_run'])} are after the last risk run "
            f"({risk_as_of}): run `freetime risk` and audit again"
        )
    if per_day["unverified_no_tariff"]:
        unverified.append(
            f"{_span(per_day['unverified_no_tariff'])} have no tariff row: the billed rate is "
            "taken as it is"
        )
    if unverified:
        findings.append(("unverified", "; ".join(unverified) + "."))
    order = {c: n for n, c in enumerate(FINDINGS)}
    findings.sort(key=lambda f: order[f[0]])
    covered = {k: v for k, v in per_day.items() if v}
    return Result(a, round(computed, 2), findings, covered)


def audit_lines(
    lines: Sequence[AuditLine],
    facts: dict[tuple[str, str, str], PartyFacts],
    risk_as_of: dt.date | None,
) -> list[Result]:
    """Audit every line (pure): ``facts`` by (container number, party, charge). A day billed
    by several lines counts for the earliest (invoice date, issuer, number, line)."""
    by_box: dict[tuple[str, str, str], list[AuditLine]] = defaultdict(list)
    for a in lines:
        by_box[(a.line.container_number, a.party, a.charge)].append(a)
    results = []
    for key, group in by_box.items():
        group.sort(key=lambda a: a.order)
        seen: list[tuple[AuditLine, set[dt.date]]] = []
        for a in group:
            mine = set(_dates(a.line.billed_from, a.line.billed_to))
            earlier = [
                (o, d & mine)
                for o, d in seen
                if o.invoice_number != a.invoice_number or o.line_number != a.line_number
            ]
            results.append(audit_line(a, facts.get(key), [e for e in earlier if e[1]], risk_as_of))
            seen.append((a, mine))
    return results


# -- the warehouse ---------------------------------------------------------------------------
def read_lines(con: Con, invoice: tuple[str, str] | None = None) -> list[AuditLine]:
    """The current version's lines of every invoice (or of ``invoice``: issuer, number)."""
    where = "AND i.issuer_name = ? AND i.invoice_number = ?" if invoice else ""
    rows = con.execute(
        f"""SELECT i.issuer_name, i.invoice_number, i.version, l.line_number, i.issuer_kind,
                   i.invoice_date, i.currency, i.dispute_contact, l.party, l.charge,
                   l.container_number, l.charge_type, l.billed_from, l.billed_to, l.days,
                   l.amount, l.rate, l.tiers, l.bill_of_lading, l.port, l.free_days,
                   l.free_time_start, l.free_time_end
            FROM {D}.{INVOICES} i JOIN {D}.{LINES} l ON l.issuer_name = i.issuer_name
                 AND l.invoice_number = i.invoice_number AND l.version = i.version
            WHERE i.superseded_at IS NULL {where}
            ORDER BY i.invoice_date, i.issuer_name, i.invoice_number, l.line_number""",
        list(invoice or ()),
    ).fetchall()
    names = [
        "container_number",
        "charge_type",
        "billed_from",
        "billed_to",
        "days",
        "amount",
        "rate",
        "tiers",
        "bill_of_lading",
        "port",
        "free_days",
        "free_time_start",
        "free_time_end",
    ]
    return [
        AuditLine(
            issuer_name=r[0],
            invoice_number=r[1],
            version=int(r[2]),
            line_number=int(r[3]),
            issuer_kind=r[4],
            invoice_date=r[5],
            currency=r[6],
            dispute_contact=r[7],
            party=r[8],
            charge=r[9],
            line=InvoiceLine(**dict(zip(names, r[10:], strict=True))),
        )
        for r in rows
    ]


#: ``upper(container_number)`` is one of the numbers given as the statement's one parameter
_OF_NUMBERS = "upper(container_number) IN (SELECT unnest(CAST(? AS VARCHAR[])))"
#: the columns of ``analytics.charge_days`` the audit reads, with its history flags
_DAY_COLUMNS = ("container_id", "container_number", "party", "charge", "day", "day_number")


def read_facts(
    con: Con, numbers: Sequence[str]
) -> tuple[dict[tuple[str, str, str], PartyFacts], dt.date | None]:
    """The engine's rows and flagged days of ``numbers``, and the risk run's date (UTC)."""
    if "party" not in columns(con, ANALYTICS_SCHEMA, "charges"):
        raise WarehouseMissing(
            "no charges are published (analytics.charges): run `freetime risk` first"
        )
    d = dialect(con)
    wanted = [list(numbers)]
    facts: dict[tuple[str, str, str], PartyFacts] = {}
    for n, party, charge, lfd, column, until, reason, cur in con.execute(
        f"""SELECT upper(container_number), party, charge, lfd_date, lfd_column,
                   chargeable_until, end_reason, currency
            FROM {A}.charges WHERE {_OF_NUMBERS}""",
        wanted,
    ).fetchall():
        facts[(n, party, charge)] = PartyFacts(lfd, column, until, reason, cur)
    days = f"(SELECT * FROM {A}.charge_days WHERE {_OF_NUMBERS})"
    flagged = (
        f"SELECT upper(container_number), party, charge, day, day_number, tier, rate, "
        f"reasons, before_first_seen "
        f"FROM ({day_flags_sql(days, d=d, day_columns=(*_DAY_COLUMNS, 'tier', 'rate'))}) f"
        if HISTORY_TABLE in table_names(con, DATASET)
        else f"SELECT upper(container_number), party, charge, day, day_number, tier, rate, "
        f"NULL, false FROM {days} f"
    )
    for n, party, charge, day, k, tier, rate, reasons, before in con.execute(
        flagged, wanted
    ).fetchall():
        f = facts.get((n, party, charge))
        if f is not None:
            f.days[day] = Day(int(k), tier, rate, reasons, bool(before))
    if "lfd_changes" in table_names(con, DATASET):
        for n, column, first in con.execute(
            f"""SELECT upper(container_number), source, min(least(old_lfd, new_lfd))
                FROM {D}.lfd_changes WHERE days_moved > 0 AND {_OF_NUMBERS}
                {d.group_by(["upper(container_number)", "source"])}""",
            wanted,
        ).fetchall():
            for (num, _, _), f in facts.items():
                if num == n and f.lfd_column == column:
                    f.first_lfd = first
    row = next(iter(con.execute(f"SELECT max(as_of) FROM {A}.charges").fetchall()), None)
    as_of = row[0].astimezone(dt.UTC).date() if row and row[0] else None
    return facts, as_of


def audit_rows(results: Sequence[Result], at: dt.datetime) -> pa.Table:
    """``analytics.invoice_audit`` rows (:data:`AUDIT_COLUMNS`)."""
    finding = pa.struct([("code", pa.string()), ("sentence", pa.string())])
    rows: dict[str, list[Any]] = {c: [] for c in AUDIT_COLUMNS}
    for r in results:
        a, x = r.line, r.line.line
        for c, v in (
            ("issuer_name", a.issuer_name),
            ("invoice_number", a.invoice_number),
            ("version", a.version),
            ("line_number", a.line_number),
            ("issuer_kind", a.issuer_kind),
            ("invoice_date", a.invoice_date),
            ("invoice_month", a.invoice_date.replace(day=1)),
            ("container_number", x.container_number),
            ("party", a.party),
            ("charge", a.charge),
            ("billed_from", x.billed_from),
            ("billed_to", x.billed_to),
            ("billed_days", x.days),
            ("billed_amount", x.amount),
            ("computed_amount", r.computed),
            ("difference", r.difference),
            ("disputed_amount", r.disputed),
            ("currency", a.currency),
            ("findings", [{"code": c, "sentence": s} for c, s in r.findings]),
            ("dispute_by", r.dispute_by),
            ("audited_at", at),
        ):
            rows[c].append(v)
    types = {
        "version": pa.int32(),
        "line_number": pa.int32(),
        "billed_days": pa.int32(),
        "billed_amount": pa.float64(),
        "computed_amount": pa.float64(),
        "difference": pa.float64(),
        "disputed_amount": pa.float64(),
        "findings": pa.list_(finding),
        "audited_at": pa.timestamp("us", tz="UTC"),
        "invoice_date": pa.date32(),
        "invoice_month": pa.date32(),
        "billed_from": pa.date32(),
        "billed_to": pa.date32(),
        "dispute_by": pa.date32(),
    }
    return pa.table({c: pa.array(v, types.get(c, pa.string())) for c, v in rows.items()})


@dataclass
class AuditSummary:
    lines: int
    with_findings: int
    disputed: dict[str, float]  # per currency
    seconds: float
    past_deadline: int


#: ``analytics.invoice_audit``'s columns (DuckDB's type names; ``findings``: records)
AUDIT_TYPES = {
    **dict.fromkeys(AUDIT_COLUMNS, "VARCHAR"),
    **dict.fromkeys(("version", "line_number", "billed_days"), "INTEGER"),
    **dict.fromkeys(
        ("billed_amount", "computed_amount", "difference", "disputed_amount"), "DOUBLE"
    ),
    **dict.fromkeys(("invoice_date", "invoice_month", "billed_from", "billed_to"), "DATE"),
    "dispute_by": "DATE",
    "audited_at": "TIMESTAMPTZ",
    "findings": "RECORDS",
}
FINDING_FIELDS = {"code": "VARCHAR", "sentence": "VARCHAR"}


def _by_month_sql(d: Dialect) -> str:
    """``analytics.invoice_disputes_by_month``: what is in dispute per issuer, month, currency."""
    keys = ["issuer_name", "issuer_kind", "invoice_month", "currency"]
    return f"""
        CREATE OR REPLACE VIEW {A}.{BY_MONTH_VIEW} AS
        SELECT {", ".join(keys)},
               count(DISTINCT invoice_number) AS invoices, count(*) AS lines,
               count(*) FILTER (WHERE {d.records_length("findings")} > 0) AS lines_with_findings,
               sum(billed_amount) AS billed_amount,
               sum(disputed_amount) AS disputed_amount,
               min(dispute_by) FILTER (WHERE disputed_amount > 0) AS first_dispute_by
        FROM {A}.{AUDIT_TABLE} {d.group_by(keys)}"""


def _replace_audit(con: Con, table: pa.Table) -> None:
    """Replace ``analytics.invoice_audit``'s rows with ``table`` (in the caller's transaction).
    On PostgreSQL the rows are deleted and inserted, so a reader sees the old rows or the new
    ones and never waits for a dropped table."""
    d = dialect(con)
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {A}")
    if not is_postgres(con):
        name = f"_audit_new_{uuid.uuid4().hex}"
        con.register(name, table)
        try:
            con.execute(f"CREATE OR REPLACE TABLE {A}.{AUDIT_TABLE} AS SELECT * FROM {name}")
        finally:
            con.unregister(name)
        return
    from psycopg2.extras import Json

    cols = ", ".join(
        f"{c} {d.records_type(FINDING_FIELDS) if t == 'RECORDS' else d.type(t)}"
        for c, t in AUDIT_TYPES.items()
    )
    con.execute(f"CREATE TABLE IF NOT EXISTS {A}.{AUDIT_TABLE} ({cols})")
    con.execute(f"DELETE FROM {A}.{AUDIT_TABLE}")
    rows = [
        [Json(r[c]) if c == "findings" else r[c] for c in AUDIT_COLUMNS] for r in table.to_pylist()
    ]
    insert_rows(con, f"{A}.{AUDIT_TABLE}", list(AUDIT_COLUMNS), rows)


def run_audit(warehouse: Target, now: dt.datetime | None = None) -> AuditSummary:
    """Audit every current invoice line and publish ``analytics.invoice_audit`` (and the view
    ``analytics.invoice_disputes_by_month``) in one transaction under the writer lock; mark the
    invoices audited. ``warehouse``: a DuckDB path or a PostgreSQL URL (or Warehouse). Raises
    WarehouseMissing (no warehouse, no invoices, no risk run), WarehouseUnusable."""
    started = time.perf_counter()
    now = now or dt.datetime.now(dt.UTC)
    with writer(warehouse, "invoice audit") as con:
        if INVOICES not in table_names(con, DATASET):
            raise WarehouseMissing("no invoices imported yet: run `freetime invoices import` first")
        lines = read_lines(con)
        facts, risk_as_of = read_facts(con, sorted({a.line.container_number for a in lines}))
        results = audit_lines(lines, facts, risk_as_of)
        table = audit_rows(results, now)
        with transaction(con):
            ensure_tables(con)
            _replace_audit(con, table)
            con.execute(_by_month_sql(dialect(con)))
            con.execute(
                f"UPDATE {D}.{INVOICES} SET audited_at = ? WHERE superseded_at IS NULL", [now]
            )
    disputed: dict[str, float] = defaultdict(float)
    for r in results:
        disputed[r.line.currency] += r.disputed
    today = now.date()
    return AuditSummary(
        lines=len(results),
        with_findings=sum(bool(r.findings) for r in results),
        disputed={k: round(v, 2) for k, v in disputed.items()},
        seconds=round(time.perf_counter() - started, 3),
        past_deadline=sum(bool(r.findings) and r.dispute_by < today for r in results),
    )


def audit_invoice(con: Con, number: str, issuer: str | None = None) -> list[Result]:
    """The audit of one invoice's current version, computed now from a read connection (the
    dispute package and the tool server). Raises LookupError naming what was not found."""
    if INVOICES not in table_names(con, DATASET):
        raise LookupError("no invoices imported yet: run `freetime invoices import` first")
    keys = con.execute(
        f"SELECT DISTINCT issuer_name FROM {D}.{INVOICES} WHERE invoice_number = ?"
        + (" AND issuer_name = ?" if issuer else ""),
        [number, issuer] if issuer else [number],
    ).fetchall()
    if not keys:
        raise LookupError(f"no invoice {number!r} imported")
    if len(keys) > 1:
        raise LookupError(
            f"invoice {number!r} exists for several issuers ({', '.join(k[0] for k in keys)}): "
            "name the issuer"
        )
    mine = read_lines(con, (keys[0][0], number))
    numbers = sorted({a.line.container_number for a in mine})
    # other invoices of the same boxes decide overlaps
    every = [a for a in read_lines(con) if a.line.container_number in numbers]
    facts, risk_as_of = read_facts(con, numbers)
    return [
        r
        for r in audit_lines(every, facts, risk_as_of)
        if (r.line.issuer_name, r.line.invoice_number) == (keys[0][0], number)
    ]


def read_audit(warehouse: Target, number: str, issuer: str | None = None) -> list[Result]:
    """:func:`audit_invoice` over a brief read-only connection."""
    with reader(warehouse) as con:
        return audit_invoice(con, number, issuer)
