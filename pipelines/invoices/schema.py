"""The invoice file format (CSV or JSON, one schema: ``docs/invoices.md``,
``docs/invoice.schema.json``) and its reading: pure logic, no warehouse.

:func:`read_invoice_files` turns files into :class:`Invoice` objects and a list of
:class:`Problem` (one line each, naming the file and the row). An invoice with an error is
left out whole (never half-read); a *warning* (amounts that do not add up) keeps the invoice:
it is the issuer's mistake, which the audit reports.

CSV: one row per invoice line; the invoice's own fields repeat on each of its rows and must
agree. JSON: ``{"invoices": [{...invoice fields..., "lines": [{...line fields...}]}]}`` (or the
list alone). Field names are the same in both shapes.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: The columns a CSV must have (issue 31's minimal invoice).
REQUIRED_COLUMNS = (
    "invoice_number",
    "issuer_name",
    "issuer_kind",
    "invoice_date",
    "container_number",
    "charge_type",
    "billed_from",
    "billed_to",
    "days",
    "rate",
    "amount",
    "currency",
)
#: Invoice-level fields (repeated on each CSV row of the invoice).
INVOICE_FIELDS = (
    "invoice_number",
    "issuer_name",
    "issuer_kind",
    "invoice_date",
    "currency",
    "due_date",
    "invoice_total",
    "dispute_contact",
)
#: Line-level fields.
LINE_FIELDS = (
    "container_number",
    "bill_of_lading",
    "port",
    "charge_type",
    "billed_from",
    "billed_to",
    "days",
    "rate",
    "tiers",
    "amount",
    "free_days",
    "free_time_start",
    "free_time_end",
)
ISSUER_KINDS = ("line", "terminal", "rail")
CHARGE_TYPES = ("demurrage", "storage", "detention")
_CURRENCY = re.compile(r"^[A-Z]{3}$")
#: Cents: amounts are compared to this tolerance.
CENT = 0.005


@dataclass(frozen=True)
class Problem:
    """One problem of the input, as one line; ``error`` leaves its invoice out."""

    where: str
    message: str
    error: bool = True
    invoice_number: str | None = None

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass
class InvoiceLine:
    container_number: str
    charge_type: str
    billed_from: dt.date
    billed_to: dt.date
    days: int
    amount: float
    rate: float | None = None
    tiers: str | None = None
    bill_of_lading: str | None = None
    port: str | None = None
    free_days: int | None = None
    free_time_start: dt.date | None = None
    free_time_end: dt.date | None = None
    where: str = ""

    def billed_rate(self, day_number: int | None) -> float | None:
        """The rate the issuer billed for chargeable day ``day_number`` (flat rate, or its
        tier); None when it cannot be told."""
        if self.rate is not None:
            return self.rate
        if self.tiers is None or day_number is None:
            return None
        from pipelines.analytics.tariffs import parse_tiers

        for t in parse_tiers(self.tiers):
            start, end = int(t["start"] or 0), t["end"]
            if day_number >= start and (end is None or day_number <= int(end)):
                return float(t["rate"] or 0)
        return None


@dataclass
class Invoice:
    invoice_number: str
    issuer_name: str
    issuer_kind: str
    invoice_date: dt.date
    currency: str
    lines: list[InvoiceLine] = field(default_factory=list)
    due_date: dt.date | None = None
    invoice_total: float | None = None
    dispute_contact: str | None = None
    source: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.issuer_name, self.invoice_number)

    def content_hash(self) -> str:
        """The invoice's content (not where it was read from): equal means the same invoice."""
        body = asdict(self)
        body.pop("source")
        for line in body["lines"]:
            line.pop("where")
        return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


class InvoiceFileError(ValueError):
    """A file that cannot be read at all (missing, not CSV or JSON, wrong shape)."""


def _text(v: Any) -> str | None:
    if v is None:
        return None
    s = str(v).strip()
    return s or None


class _Row:
    """Field access on one input row that records each problem once."""

    def __init__(self, raw: dict[str, Any], where: str, problems: list[Problem]) -> None:
        self.raw, self.where, self.problems = raw, where, problems
        self.bad = False

    def err(self, message: str) -> None:
        self.problems.append(
            Problem(self.where, message, invoice_number=_text(self.raw.get("invoice_number")))
        )
        self.bad = True

    def text(self, name: str, required: bool = False) -> str | None:
        v = _text(self.raw.get(name))
        if v is None and required:
            self.err(f"{name} is missing")
        return v

    def choice(self, name: str, choices: tuple[str, ...]) -> str:
        v = self.text(name, required=True)
        if v is not None and v.lower() not in choices:
            self.err(f"{name} {v!r} is not one of {', '.join(choices)}")
        return (v or "").lower()

    def date(self, name: str, required: bool = False) -> dt.date | None:
        v = self.text(name, required)
        if v is None:
            return None
        try:
            return dt.date.fromisoformat(v) if len(v) == 10 else _raise()
        except ValueError:
            self.err(f"{name} {v!r} is not a date YYYY-MM-DD")
            return None

    def number(self, name: str, required: bool = False) -> float | None:
        v = self.text(name, required)
        if v is None:
            return None
        try:
            x = float(v.replace(",", "")) if isinstance(v, str) else float(v)
        except ValueError:
            self.err(f"{name} {v!r} is not a number")
            return None
        if x < 0 or x != x:
            self.err(f"{name} {v!r} is negative")
        return x

    def integer(self, name: str, required: bool = False) -> int | None:
        x = self.number(name, required)
        if x is None:
            return None
        if x != int(x):
            self.err(f"{name} {x:g} is not a whole number of days")
        return int(x)


def _raise() -> dt.date:
    raise ValueError


def _line(r: _Row) -> InvoiceLine | None:
    number = r.text("container_number", required=True)
    charge = r.choice("charge_type", CHARGE_TYPES)
    start, end = r.date("billed_from", True), r.date("billed_to", True)
    days = r.integer("days", True)
    amount = r.number("amount", True)
    rate, tiers = r.number("rate"), r.text("tiers")
    if tiers is not None:
        from pipelines.analytics.tariffs import parse_tiers  # polars, for tiered lines only

        try:
            parse_tiers(tiers)
        except ValueError as exc:
            r.err(f"tiers {tiers!r}: {exc}")
    if start and end and end < start:
        r.err(f"billed_to {end} is before billed_from {start}")
    line = InvoiceLine(
        container_number=(number or "").upper(),
        charge_type=charge,
        billed_from=start or dt.date.min,
        billed_to=end or dt.date.min,
        days=days or 0,
        amount=amount or 0.0,
        rate=rate,
        tiers=tiers,
        bill_of_lading=(r.text("bill_of_lading") or "").upper() or None,
        port=(r.text("port") or "").upper() or None,
        free_days=r.integer("free_days"),
        free_time_start=r.date("free_time_start"),
        free_time_end=r.date("free_time_end"),
        where=r.where,
    )
    return None if r.bad else line


def _header(r: _Row, source: str) -> Invoice | None:
    currency = (r.text("currency", required=True) or "").upper()
    if currency and not _CURRENCY.match(currency):
        r.err(f"currency {currency!r} is not an ISO 4217 code such as USD")
    inv = Invoice(
        invoice_number=r.text("invoice_number", required=True) or "",
        issuer_name=r.text("issuer_name", required=True) or "",
        issuer_kind=r.choice("issuer_kind", ISSUER_KINDS),
        invoice_date=r.date("invoice_date", True) or dt.date.min,
        currency=currency,
        due_date=r.date("due_date"),
        invoice_total=r.number("invoice_total"),
        dispute_contact=r.text("dispute_contact"),
        source=source,
    )
    return None if r.bad else inv


def arithmetic(inv: Invoice) -> list[Problem]:
    """Warnings: days that do not match the billed range, a line amount that is not its rate
    times its days (or its tiers summed), a total that is not the sum of the lines."""
    out = []
    for line in inv.lines:
        for sentence in line_arithmetic(line):
            out.append(
                Problem(line.where, sentence, error=False, invoice_number=inv.invoice_number)
            )
    if inv.invoice_total is not None:
        total = sum(line.amount for line in inv.lines)
        if abs(total - inv.invoice_total) > CENT:
            out.append(
                Problem(
                    inv.source,
                    f"invoice {inv.invoice_number}: invoice_total {inv.invoice_total:.2f} is not "
                    f"the sum of its lines ({total:.2f})",
                    error=False,
                    invoice_number=inv.invoice_number,
                )
            )
    return out


def line_arithmetic(line: InvoiceLine) -> list[str]:
    """The line's own sums that do not add up, as sentences (empty when they do)."""
    out = []
    span = (line.billed_to - line.billed_from).days + 1
    if line.days != span:
        out.append(
            f"{line.days} days billed for {line.billed_from} to {line.billed_to}, which is "
            f"{span} days"
        )
    if line.rate is not None:
        expected = line.rate * line.days
    elif line.tiers is not None:
        first = (
            (line.billed_from - line.free_time_end).days if line.free_time_end is not None else 1
        )
        rates = [line.billed_rate(first + k) for k in range(line.days)]
        expected = sum(r or 0.0 for r in rates)
    else:
        return out
    if abs(expected - line.amount) > CENT:
        out.append(
            f"amount {line.amount:.2f} is not what its rate gives for {line.days} days "
            f"({expected:.2f})"
        )
    return out


def _group(
    rows: list[tuple[str, dict[str, Any]]], source: str, problems: list[Problem]
) -> list[Invoice]:
    """Rows of (where, fields) -> invoices; an invoice with any error is left out whole."""
    invoices: dict[tuple[str, str], Invoice] = {}
    bad: set[tuple[str, str]] = set()
    for where, raw in rows:
        r = _Row(raw, where, problems)
        key = (_text(raw.get("issuer_name")) or "", _text(raw.get("invoice_number")) or "")
        inv = invoices.get(key)
        if inv is None:
            head = _header(r, source)
            if head is None:
                bad.add(key)
                _line(r)  # its problems too, one line each
                continue
            invoices[key] = inv = head
        else:
            for name in INVOICE_FIELDS:
                got, first = _text(raw.get(name)), getattr(inv, name)
                if got is not None and first is not None and got.upper() != str(first).upper():
                    r.err(f"{name} {got!r} differs from {first!s} on the invoice's first row")
        line = _line(r)
        if line is None or r.bad:
            bad.add(key)
        else:
            inv.lines.append(line)
    return [inv for key, inv in invoices.items() if key not in bad and inv.lines]


def _csv_rows(path: Path, text: str) -> list[tuple[str, dict[str, Any]]]:
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in reader.fieldnames or []]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InvoiceFileError(
            f"{path}: not an invoice CSV: missing column(s) {', '.join(missing)} "
            "(see docs/invoices.md)"
        )
    reader.fieldnames = header
    rows = [(f"{path} row {n}", dict(row)) for n, row in enumerate(reader, start=2)]
    if not rows:
        raise InvoiceFileError(f"{path}: no invoice line in the file")
    return rows


def _json_rows(path: Path, text: str) -> list[tuple[str, dict[str, Any]]]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvoiceFileError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno})") from None
    items = doc.get("invoices") if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items) or not items:
        raise InvoiceFileError(
            f'{path}: not an invoice JSON: expected {{"invoices": [...]}} (see docs/invoices.md)'
        )
    rows = []
    for n, inv in enumerate(items, start=1):
        lines = inv.get("lines")
        if not isinstance(lines, list) or not lines or not all(isinstance(x, dict) for x in lines):
            raise InvoiceFileError(f"{path}: invoice {n} has no list of lines")
        head = {k: v for k, v in inv.items() if k != "lines"}
        for m, line in enumerate(lines, start=1):
            rows.append((f"{path} invoice {n} line {m}", {**head, **line}))
    return rows


def read_invoice_files(paths: list[Path]) -> tuple[list[Invoice], list[Problem]]:
    """Read every file; return the invoices read without error and every problem (errors and
    warnings); a file that cannot be read is one error."""
    invoices: list[Invoice] = []
    problems: list[Problem] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8-sig")
            stripped = text.lstrip()
            if path.suffix.lower() == ".json" or stripped.startswith(("{", "[")):
                rows = _json_rows(path, text)
            else:
                rows = _csv_rows(path, text)
        except InvoiceFileError as exc:
            problems.append(Problem(str(path), str(exc).removeprefix(f"{path}: ")))
            continue
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            problems.append(Problem(str(path), f"cannot read the file: {reason}"))
            continue
        found = _group(rows, str(path), problems)
        for inv in found:
            problems.extend(arithmetic(inv))
        invoices.extend(found)
    seen: dict[tuple[str, str], Invoice] = {}
    for inv in invoices:
        if inv.key in seen and seen[inv.key].content_hash() != inv.content_hash():
            problems.append(
                Problem(
                    inv.source,
                    f"invoice {inv.invoice_number} of {inv.issuer_name} is also in "
                    f"{seen[inv.key].source} with other content: the later file wins",
                    error=False,
                    invoice_number=inv.invoice_number,
                )
            )
        seen[inv.key] = inv
    return list(seen.values()), problems
