"""The invoice format and the audit's rules, as pure logic (tests/test_invoices.py runs them
against a walked warehouse)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import jsonschema
import pytest

from pipelines.invoices.audit import AuditLine, Day, PartyFacts, audit_line, audit_lines
from pipelines.invoices.schema import InvoiceLine, read_invoice_files

pytestmark = pytest.mark.fast
REPO = Path(__file__).resolve().parents[1]
MINIMAL = (
    "invoice_number,issuer_name,issuer_kind,invoice_date,container_number,charge_type,"
    "billed_from,billed_to,days,rate,amount,currency\n"
)
D = dt.date


def read(tmp_path: Path, text: str, name: str = "x.csv") -> tuple[list, list[str]]:
    f = tmp_path / name
    f.write_text(text)
    invoices, problems = read_invoice_files([f])
    return invoices, [f"{'E' if p.error else 'W'} {p.message}" for p in problems]


def test_the_minimal_csv_reads(tmp_path: Path) -> None:
    invoices, problems = read(
        tmp_path,
        MINIMAL + "A-1,Pier T,terminal,2030-01-20,abcu1234567,storage,2030-01-11,2030-01-12,"
        "2,100,200.00,usd\n",
    )
    assert problems == []
    (inv,) = invoices
    assert (inv.issuer_kind, inv.currency, inv.invoice_date) == ("terminal", "USD", D(2030, 1, 20))
    (x,) = inv.lines
    assert (x.container_number, x.days, x.rate, x.amount) == ("ABCU1234567", 2, 100.0, 200.0)


def test_each_bad_value_is_one_line_and_refuses_its_invoice(tmp_path: Path) -> None:
    invoices, problems = read(
        tmp_path,
        MINIMAL
        + "A-1,Pier T,port,2030-13-01,ABCU1234567,fees,2030-01-11,2030-01-10,two,x,200,US\n"
        + "B-1,Pier T,terminal,2030-01-20,ABCU1234567,storage,2030-01-11,2030-01-12,"
        "2,100,200,USD\n",
    )
    assert [i.invoice_number for i in invoices] == ["B-1"]
    assert problems == [
        "E currency 'US' is not an ISO 4217 code such as USD",
        "E issuer_kind 'port' is not one of line, terminal, rail",
        "E invoice_date '2030-13-01' is not a date YYYY-MM-DD",
        "E charge_type 'fees' is not one of demurrage, storage, detention",
        "E days 'two' is not a number",
        "E rate 'x' is not a number",
        "E billed_to 2030-01-10 is before billed_from 2030-01-11",
    ]


def test_rows_of_one_invoice_must_agree(tmp_path: Path) -> None:
    row = "A-1,Pier T,terminal,{},ABCU1234567,storage,2030-01-11,2030-01-12,2,100,200,USD\n"
    invoices, problems = read(
        tmp_path, MINIMAL + row.format("2030-01-20") + row.format("2030-01-21")
    )
    assert invoices == []
    assert problems == [
        "E invoice_date '2030-01-21' differs from 2030-01-20 on the invoice's first row"
    ]


def test_sums_that_do_not_add_up_are_warnings(tmp_path: Path) -> None:
    invoices, problems = read(
        tmp_path,
        MINIMAL.replace("currency", "currency,invoice_total")
        + "A-1,Pier T,terminal,2030-01-20,ABCU1234567,storage,2030-01-11,2030-01-13,2,100,250,"
        "USD,300\n",
    )
    assert len(invoices) == 1
    assert problems == [
        "W 2 days billed for 2030-01-11 to 2030-01-13, which is 3 days",
        "W amount 250.00 is not what its rate gives for 2 days (200.00)",
        "W invoice A-1: invoice_total 300.00 is not the sum of its lines (250.00)",
    ]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "a.csv",
            "container,amount\nX,1\n",
            "not an invoice CSV: missing column(s) invoice_number",
        ),
        ("b.json", '{"bills": []}', 'not an invoice JSON: expected {"invoices": [...]}'),
        ("c.json", "[1, 2", "not valid JSON"),
        ("d.csv", MINIMAL, "no invoice line in the file"),
        ("e.json", '{"invoices": [{"invoice_number": "A"}]}', "invoice 1 has no list of lines"),
    ],
)
def test_a_file_in_the_wrong_shape_is_one_error(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    invoices, problems = read(tmp_path, text, name)
    assert invoices == [] and len(problems) == 1
    assert problems[0].startswith(f"E {message}")


def test_the_example_json_follows_the_published_schema() -> None:
    schema = json.loads((REPO / "docs" / "invoice.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    doc = json.loads((REPO / "data" / "invoices-example.json").read_text())
    jsonschema.validate(doc, schema)
    doc["invoices"][0]["issuer_kind"] = "port"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema)


# -- the audit's rules -----------------------------------------------------------------------
def _line(first: D, last: D, rate: float | None = 100.0, **kw: object) -> InvoiceLine:
    n = (last - first).days + 1
    full = {
        "bill_of_lading": "BL1",
        "port": "USLAX",
        "free_days": 4,
        "free_time_start": D(2030, 1, 6),
        "free_time_end": D(2030, 1, 9),
    }
    return InvoiceLine(
        "ABCU1234567", "demurrage", first, last, n, (rate or 0) * n, rate=rate, **{**full, **kw}
    )  # type: ignore[arg-type]


def _audit_line(x: InvoiceLine, charge: str = "demurrage", number: str = "A-1") -> AuditLine:
    party = "line" if charge == "detention" else "terminal"
    return AuditLine(
        "Pier T", number, 1, 1, "terminal", D(2030, 1, 20), "USD", "x@y", party, charge, x
    )


def _facts(
    reasons: dict[D, str] | None = None, end: str = "full out", first_lfd: D | None = None
) -> PartyFacts:
    """LFD 2030-01-09, chargeable 01-10 to 01-13 at 100."""
    f = PartyFacts(D(2030, 1, 9), "pickup_lfd_terminal", D(2030, 1, 13), end, "USD")
    f.first_lfd = first_lfd
    for k in range(4):
        day = D(2030, 1, 10 + k)
        f.days[day] = Day(k + 1, "1-5", 100.0, (reasons or {}).get(day), False)
    return f


def test_free_time_days_and_an_extended_lfd_are_told_apart() -> None:
    x = _line(D(2030, 1, 8), D(2030, 1, 11))
    r = audit_line(_audit_line(x), _facts(), [], None)
    assert [c for c, _ in r.findings] == ["free_time"]
    assert (r.computed, r.disputed) == (200.0, 200.0)
    r = audit_line(_audit_line(x), _facts(first_lfd=D(2030, 1, 7)), [], None)
    assert [c for c, _ in r.findings] == ["lfd_extended"]
    assert r.findings[0][1] == (
        "2030-01-08 to 2030-01-09 (2 days) billed before the extended LFD: the LFD moved from "
        "2030-01-07 to 2030-01-09 (pickup_lfd_terminal)."
    )


def test_only_holds_the_importer_does_not_cause_are_grounds() -> None:
    x = _line(D(2030, 1, 10), D(2030, 1, 13))
    own = _facts({D(2030, 1, 10): "customs hold", D(2030, 1, 11): "freight hold"})
    assert audit_line(_audit_line(x), own, [], None).findings == []
    theirs = _facts({D(2030, 1, 10): "customs hold, other hold", D(2030, 1, 11): "not available"})
    r = audit_line(_audit_line(x), theirs, [], None)
    assert [c for c, _ in r.findings] == ["not_available"]
    assert "not available, other hold" in r.findings[0][1]
    assert (r.computed, r.disputed) == (200.0, 200.0)
    # a box out for detention is the importer's, whatever the terminal says of it
    r = audit_line(_audit_line(x, "detention"), theirs, [], None)
    assert r.findings == []


def test_days_after_the_last_risk_run_are_unverified_not_disputed() -> None:
    x = _line(D(2030, 1, 12), D(2030, 1, 15))
    r = audit_line(_audit_line(x), _facts(end="today"), [], D(2030, 1, 13))
    assert [c for c, _ in r.findings] == ["unverified"]
    assert (r.computed, r.disputed) == (400.0, 0.0)
    r = audit_line(_audit_line(x), _facts(end="full out"), [], None)
    assert [c for c, _ in r.findings] == ["after_out"]


def test_tiers_are_read_by_chargeable_day() -> None:
    x = _line(D(2030, 1, 10), D(2030, 1, 13), rate=None, tiers="1-2:100;3+:150")
    x.amount = 500.0
    r = audit_line(_audit_line(x), _facts(), [], None)
    assert [c for c, _ in r.findings] == ["rate"]
    assert r.findings[0][1] == (
        "2030-01-12 to 2030-01-13 (2 days) billed at 150 USD/day; the tariff's tier rate is 100."
    )
    assert (r.computed, r.difference, r.disputed) == (400.0, 100.0, 100.0)


def test_the_earlier_invoice_keeps_the_days_billed_twice() -> None:
    first = _audit_line(_line(D(2030, 1, 10), D(2030, 1, 13)), number="A-1")
    later = _audit_line(_line(D(2030, 1, 12), D(2030, 1, 13)), number="A-2")
    later.invoice_date = D(2030, 1, 25)
    facts = {("ABCU1234567", "terminal", "demurrage"): _facts()}
    results = {r.line.invoice_number: r for r in audit_lines([later, first], facts, None)}
    assert results["A-1"].findings == []
    assert [c for c, _ in results["A-2"].findings] == ["overlap"]
    assert results["A-2"].disputed == 200.0


def test_a_line_without_an_engine_row_is_not_chargeable() -> None:
    r = audit_line(_audit_line(_line(D(2030, 1, 10), D(2030, 1, 11)), "detention"), None, [], None)
    assert [c for c, _ in r.findings] == ["not_chargeable"]
    assert r.findings[0][1].endswith("freetime has no line detention charge for this box.")
