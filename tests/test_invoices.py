"""`freetime invoices` against boxes' lives walked through the sandbox (tests/history_walk.py).

The boxes, as the walk and a risk run at 2030-02-01 leave them (amounts computed by hand from
``TARIFFS``):

- EMCU1764628 (B/L EGLV0003901303, Tacoma, reefer): terminal LFD 2030-01-10; chargeable
  2030-01-11 to 01-16 (full out), tiers 235 x 4 then 285; 01-11 to 01-14 not available (and a
  customs hold). Line detention: LFD 01-20, days 01-21 to 01-26 (empty return), 150 x 4 then
  200: 1,000.
- TGHU9547300 (B/L CMDU0002749284, Oakland): terminal LFD posted 2030-01-12, extended to 01-15;
  the box left by rail on 01-14: no terminal day is chargeable.
- OOCU3348428 (B/L OOLU0004843864, Long Beach): terminal days 2029-11-26 to 11-29 at 220, all
  before freetime first saw the box.
"""

from __future__ import annotations

import csv
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest
from typer.testing import CliRunner

from freetime_cli.main import app
from pipelines.analytics.publish import publish_risk

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
AS_OF = datetime(2030, 2, 1, tzinfo=UTC)
#: the repository's tariffs plus a reefer row for Tacoma, tiered like the sandbox terminal's
TARIFFS = (REPO / "data" / "tariffs.csv").read_text() + (
    "demurrage,,USTIW,reefer,4,calendar,1-4:235;5-9:285;10+:335,USD,test sheet,2030-01-01\n"
)
HEADER = (
    "invoice_number,issuer_name,issuer_kind,invoice_date,container_number,bill_of_lading,port,"
    "charge_type,billed_from,billed_to,days,rate,tiers,amount,currency,free_days,"
    "free_time_start,free_time_end,dispute_contact"
)
HUSKY = "Husky Terminal,terminal"
EVERGREEN = "Evergreen,line"
EMCU = "EMCU1764628,EGLV0003901303,USTIW"
TGHU = "TGHU9547300,CMDU0002749284,USOAK"
OOCU = "OOCU3348428,OOLU0004843864,USLGB"
TERMINAL_TIERS = "1-4:235;5-9:285;10+:335"
DETENTION_TIERS = "1-4:150;5+:200"
CONTACT = "billing@example.com"
# the EMCU box's terminal and detention free time, as a complete invoice states it
EMCU_TERMINAL_FREE = f"3,2030-01-08,2030-01-10,{CONTACT}"
EMCU_DETENTION_FREE = f"4,2030-01-17,2030-01-20,{CONTACT}"


def line(number: str, issuer: str, date: str, box: str, rest: str, free: str) -> str:
    return f"{number},{issuer},{date},{box},{rest},{free}"


#: the EMCU box's terminal days billed in full, its days on hold included (4 x 235 in dispute)
HOLD = line(
    "T-1",
    HUSKY,
    "2030-01-20",
    EMCU,
    f"demurrage,2030-01-11,2030-01-16,6,,{TERMINAL_TIERS},1510,USD",
    EMCU_TERMINAL_FREE,
)
#: a correct line detention invoice of the EMCU box
DETENTION_OK = line(
    "L-1",
    EVERGREEN,
    "2030-01-28",
    EMCU,
    f"detention,2030-01-21,2030-01-26,6,,{DETENTION_TIERS},1000,USD",
    EMCU_DETENTION_FREE,
)
#: the last two days of DETENTION_OK billed again, on a later invoice (400 in dispute)
BILLED_TWICE = line(
    "L-2",
    EVERGREEN,
    "2030-01-29",
    EMCU,
    f"detention,2030-01-25,2030-01-26,2,,{DETENTION_TIERS},400,USD",
    EMCU_DETENTION_FREE,
)
#: terminal days of the OOCU box before freetime first saw it: unverified, nothing in dispute
BEFORE_FIRST_SEEN = line(
    "T-7",
    HUSKY,
    "2029-12-15",
    OOCU,
    "demurrage,2029-11-26,2029-11-29,4,220,,880,USD",
    f"4,2029-11-20,2029-11-25,{CONTACT}",
)


@pytest.fixture(scope="module")
def base(walked: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The walked warehouse with the risk run of 2030-02-01 published: copy it to write."""
    tmp = tmp_path_factory.mktemp("invoices")
    path = tmp / "base.duckdb"
    shutil.copy(walked.duckdb_path, path)
    tariffs = tmp / "tariffs.csv"
    tariffs.write_text(TARIFFS)
    publish_risk(path, AS_OF, tariffs)
    return path


def warehouse(base: Path, tmp_path: Path) -> Path:
    path = tmp_path / "w.duckdb"
    shutil.copy(base, path)
    return path


def run(*args: str) -> Any:
    return runner.invoke(app, list(args))


def import_csv(path: Path, tmp_path: Path, rows: list[str], as_of: str = "2030-02-01") -> Any:
    f = tmp_path / f"invoices-{len(list(tmp_path.glob('*.csv')))}.csv"
    f.write_text("\n".join([HEADER, *rows]) + "\n")
    return run("invoices", "import", str(f), "--duckdb", str(path), "--as-of", as_of)


def audit(path: Path, as_of: str = "2030-02-01") -> dict[str, dict[str, Any]]:
    r = run("invoices", "audit", "--duckdb", str(path), "--as-of", as_of)
    assert r.exit_code == 0, r.output
    with duckdb.connect(str(path), read_only=True) as con:
        cur = con.execute("SELECT * FROM analytics.invoice_audit ORDER BY invoice_number")
        names = [d[0] for d in cur.description or []]
        rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    return {r["invoice_number"]: r for r in rows}


def codes(row: dict[str, Any]) -> list[str]:
    return [f["code"] for f in row["findings"]]


def audited(base: Path, tmp_path: Path, rows: list[str], as_of: str = "2030-02-01") -> Any:
    path = warehouse(base, tmp_path)
    r = import_csv(path, tmp_path, rows, as_of)
    assert r.exit_code == 0, r.output
    return audit(path, as_of), r


def test_correct_invoices_give_no_finding(base: Path, tmp_path: Path) -> None:
    terminal_ok = line(
        "T-1",
        HUSKY,
        "2030-01-20",
        EMCU,
        f"demurrage,2030-01-15,2030-01-16,2,,{TERMINAL_TIERS},570,USD",
        EMCU_TERMINAL_FREE,
    )
    rows, r = audited(base, tmp_path, [terminal_ok, DETENTION_OK])
    assert "warning" not in r.output and "error" not in r.output
    for number, amount in (("T-1", 570.0), ("L-1", 1000.0)):
        assert rows[number]["findings"] == []
        assert rows[number]["computed_amount"] == amount
        assert rows[number]["difference"] == 0 and rows[number]["disputed_amount"] == 0
    assert str(rows["L-1"]["dispute_by"]) == "2030-02-27"  # 30 days after 2030-01-28


@pytest.mark.parametrize(
    ("rest", "box", "free", "expected", "computed", "disputed"),
    [
        # the days of the terminal's own hold and unavailability: 4 x 235
        (
            f"demurrage,2030-01-11,2030-01-16,6,,{TERMINAL_TIERS},1510,USD",
            EMCU,
            EMCU_TERMINAL_FREE,
            ["not_available"],
            570.0,
            940.0,
        ),
        # two days after the full out (2030-01-16), at 285
        (
            "demurrage,2030-01-15,2030-01-18,4,285,,1140,USD",
            EMCU,
            EMCU_TERMINAL_FREE,
            ["after_out"],
            570.0,
            570.0,
        ),
        # billed from the first LFD (2030-01-12); it was extended to 2030-01-15
        (
            "demurrage,2030-01-13,2030-01-14,2,220,,440,USD",
            TGHU,
            f"4,2030-01-09,2030-01-12,{CONTACT}",
            ["lfd_extended"],
            0.0,
            440.0,
        ),
        # and on past the rail departure of 2030-01-14
        (
            "demurrage,2030-01-13,2030-01-16,4,220,,880,USD",
            TGHU,
            f"4,2030-01-09,2030-01-12,{CONTACT}",
            ["lfd_extended", "after_out"],
            0.0,
            880.0,
        ),
    ],
)
def test_each_wrong_terminal_bill_gives_its_findings(
    base: Path,
    tmp_path: Path,
    rest: str,
    box: str,
    free: str,
    expected: list[str],
    computed: float,
    disputed: float,
) -> None:
    rows, _ = audited(base, tmp_path, [line("T-9", HUSKY, "2030-01-20", box, rest, free)])
    row = rows["T-9"]
    assert codes(row) == expected, row["findings"]
    assert row["computed_amount"] == computed
    assert row["disputed_amount"] == disputed
    assert row["difference"] == row["billed_amount"] - computed


def test_days_billed_under_a_hold_name_the_reason(base: Path, tmp_path: Path) -> None:
    rows, _ = audited(
        base,
        tmp_path,
        [HOLD],
    )
    sentence = rows["T-1"]["findings"][0]["sentence"]
    # the customs hold is the importer's: the terminal's unavailability is the ground
    assert sentence.startswith("2030-01-11 to 2030-01-14 (4 days) billed while the box could")
    assert "not available" in sentence and "customs" not in sentence


@pytest.mark.parametrize(
    ("rest", "date", "expected", "computed", "disputed", "warning"),
    [
        # a flat 200 a day where the tariff says 150 for days 1-4: 4 x 50
        (
            "detention,2030-01-21,2030-01-26,6,200,,1200,USD",
            "2030-01-28",
            ["rate"],
            1000.0,
            200.0,
            None,
        ),
        # the tiers sum to 1,000, the invoice says 1,100
        (
            f"detention,2030-01-21,2030-01-26,6,,{DETENTION_TIERS},1100,USD",
            "2030-01-28",
            ["arithmetic"],
            1000.0,
            100.0,
            "amount 1100.00 is not what its rate gives for 6 days (1000.00)",
        ),
        # more than 30 days after the last billed day (2030-01-26): need not be paid
        (
            f"detention,2030-01-21,2030-01-26,6,,{DETENTION_TIERS},1000,USD",
            "2030-02-27",
            ["issued_late"],
            1000.0,
            1000.0,
            None,
        ),
        # not the tariff's currency: nothing to compare with
        (
            f"detention,2030-01-21,2030-01-26,6,,{DETENTION_TIERS},1000,EUR",
            "2030-01-28",
            ["currency"],
            1000.0,
            1000.0,
            "currency EUR is not the tariff's (USD) for EMCU1764628",
        ),
    ],
)
def test_each_wrong_detention_bill_gives_its_findings(
    base: Path,
    tmp_path: Path,
    rest: str,
    date: str,
    expected: list[str],
    computed: float,
    disputed: float,
    warning: str | None,
) -> None:
    as_of = "2030-03-01"
    rows, r = audited(
        base, tmp_path, [line("L-9", EVERGREEN, date, EMCU, rest, EMCU_DETENTION_FREE)], as_of
    )
    row = rows["L-9"]
    assert codes(row) == expected, row["findings"]
    assert (row["computed_amount"], row["disputed_amount"]) == (computed, disputed)
    if warning:
        warnings = [x for x in r.stderr.splitlines() if x.startswith("warning:")]
        assert len(warnings) == 1 and warnings[0].endswith(warning), r.stderr


def test_days_billed_twice_are_disputed_on_the_later_invoice(base: Path, tmp_path: Path) -> None:
    rows, _ = audited(base, tmp_path, [DETENTION_OK, BILLED_TWICE])
    assert rows["L-1"]["findings"] == []
    assert codes(rows["L-2"]) == ["overlap"]
    assert "already billed on L-1 line 1" in rows["L-2"]["findings"][0]["sentence"]
    assert (rows["L-2"]["computed_amount"], rows["L-2"]["disputed_amount"]) == (0.0, 400.0)


def test_the_minimal_csv_imports_and_lacks_the_rule_s_content(base: Path, tmp_path: Path) -> None:
    path = warehouse(base, tmp_path)
    f = tmp_path / "minimal.csv"
    f.write_text(
        "invoice_number,issuer_name,issuer_kind,invoice_date,container_number,charge_type,"
        "billed_from,billed_to,days,rate,amount,currency\n"
        "T-5,Husky Terminal,terminal,2030-01-20,EMCU1764628,storage,2030-01-15,2030-01-16,"
        "2,285,570,USD\n"
    )
    r = run("invoices", "import", str(f), "--duckdb", str(path), "--as-of", "2030-02-01")
    assert r.exit_code == 0, r.output
    row = audit(path)["T-5"]
    assert codes(row) == ["missing_fields"]
    assert row["findings"][0]["sentence"] == (
        "the invoice lacks content 46 CFR 541 requires: bill_of_lading, port, free_days, "
        "free_time_start, free_time_end, dispute_contact."
    )
    # the days are right (570), but an invoice without the content need not be paid
    assert (row["computed_amount"], row["disputed_amount"]) == (570.0, 570.0)


def test_a_box_first_seen_after_the_billed_days_is_a_warning(base: Path, tmp_path: Path) -> None:
    rows, r = audited(base, tmp_path, [BEFORE_FIRST_SEEN])
    assert re.search(
        r"warning: .* freetime first saw OOCU3348428 on 2030-01-07, after the billed days", r.stderr
    )
    assert codes(rows["T-7"]) == ["unverified"]
    assert (rows["T-7"]["computed_amount"], rows["T-7"]["disputed_amount"]) == (880.0, 0.0)


def test_the_amount_in_dispute_is_summed_per_issuer_and_month(base: Path, tmp_path: Path) -> None:

    rail = line(
        "T-2",
        HUSKY,
        "2030-01-21",
        TGHU,
        "demurrage,2030-01-13,2030-01-16,4,220,,880,USD",
        f"4,2030-01-09,2030-01-12,{CONTACT}",
    )
    path = warehouse(base, tmp_path)
    assert import_csv(path, tmp_path, [HOLD, rail, DETENTION_OK]).exit_code == 0
    r = run("invoices", "audit", "--duckdb", str(path), "--as-of", "2030-02-01")
    assert "3 invoice lines, 2 with findings, 1,820.00 USD in dispute" in r.stdout
    with duckdb.connect(str(path), read_only=True) as con:
        sums = con.execute(
            "SELECT issuer_name, CAST(invoice_month AS VARCHAR), invoices, disputed_amount "
            "FROM analytics.invoice_disputes_by_month ORDER BY issuer_name"
        ).fetchall()
    assert sums == [
        ("Evergreen", "2030-01-01", 1, 0.0),
        ("Husky Terminal", "2030-01-01", 2, 1820.0),
    ]


# -- intake ----------------------------------------------------------------------------------
def _stored(path: Path) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(path), read_only=True) as con:
        if not con.execute(
            "SELECT 1 FROM duckdb_tables() WHERE schema_name = 'terminal49' "
            "AND table_name = 'invoices'"
        ).fetchall():
            return []
        return con.execute(
            "SELECT invoice_number, version, superseded_at IS NULL, "
            "(SELECT count(*) FROM terminal49.invoice_lines l WHERE l.invoice_number = "
            "i.invoice_number AND l.version = i.version) "
            "FROM terminal49.invoices i ORDER BY invoice_number, version"
        ).fetchall()


def test_reimport_changes_nothing_and_a_correction_supersedes(base: Path, tmp_path: Path) -> None:
    path = warehouse(base, tmp_path)
    assert import_csv(path, tmp_path, [DETENTION_OK]).exit_code == 0
    r = import_csv(path, tmp_path, [DETENTION_OK])
    assert "0 new, 0 corrected, 1 unchanged" in r.stderr
    assert _stored(path) == [("L-1", 1, True, 1)]
    corrected = DETENTION_OK.replace(",1000,USD", ",1100,USD")
    r = import_csv(path, tmp_path, [corrected])
    assert "0 new, 1 corrected, 0 unchanged" in r.stderr
    assert _stored(path) == [("L-1", 1, False, 1), ("L-1", 2, True, 1)]
    row = audit(path)["L-1"]
    assert (row["version"], row["billed_amount"]) == (2, 1100.0)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            DETENTION_OK.replace("EMCU1764628", "ZZZU0000000"),
            "unknown container ZZZU0000000: freetime does not track it",
        ),
        (
            DETENTION_OK.replace("EGLV0003901303", "EGLV9999999999"),
            "unknown bill of lading EGLV9999999999 for container EMCU1764628 "
            "(freetime has EGLV0003901303)",
        ),
        (
            DETENTION_OK.replace("2030-01-28", "2030-02-03"),
            "invoice L-1: invoice_date 2030-02-03 is in the future (today is 2030-02-01)",
        ),
        (
            DETENTION_OK.replace("2030-01-26,6,", "2030-02-04,15,"),
            "billed_to 2030-02-04 is in the future (today is 2030-02-01)",
        ),
    ],
)
def test_a_refused_invoice_is_one_line_and_nothing_is_stored(
    base: Path, tmp_path: Path, bad: str, message: str
) -> None:
    path = warehouse(base, tmp_path)
    r = import_csv(path, tmp_path, [bad])
    assert r.exit_code == 2, r.output
    errors = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], r.stderr
    assert "Traceback" not in r.output
    assert _stored(path) == []


def test_an_invoice_with_one_bad_line_is_left_out_whole(base: Path, tmp_path: Path) -> None:
    path = warehouse(base, tmp_path)
    second = line(
        "T-3",
        HUSKY,
        "2030-01-20",
        EMCU,
        "demurrage,2030-01-15,2030-01-16,2,285,,570,USD",
        EMCU_TERMINAL_FREE,
    )
    r = import_csv(path, tmp_path, [DETENTION_OK, second, second.replace("2030-01-15", "15/01")])
    assert r.exit_code == 1, r.output
    assert "error:" in r.stderr and "billed_from '15/01' is not a date YYYY-MM-DD" in r.stderr
    assert "1 new, 0 corrected, 0 unchanged, 1 refused" in r.stderr
    assert _stored(path) == [("L-1", 1, True, 1)]


def test_a_file_in_the_wrong_shape_exits_2(base: Path, tmp_path: Path) -> None:
    path = warehouse(base, tmp_path)
    shapes = {
        "a.csv": "container,amount\nEMCU1764628,100\n",
        "b.json": '{"bills": []}',
        "c.json": "{not json",
    }
    for name, text in shapes.items():
        (tmp_path / name).write_text(text)
        r = run("invoices", "import", str(tmp_path / name), "--duckdb", str(path))
        assert r.exit_code == 2, (name, r.output)
        assert len(r.stderr.strip().splitlines()) == 2 and "Traceback" not in r.output
        assert r.stderr.startswith(f"error: {tmp_path / name}: ")
    assert _stored(path) == []


def test_the_example_files_import_as_the_same_invoices(base: Path, tmp_path: Path) -> None:
    path = warehouse(base, tmp_path)
    said = []
    for name in ("invoices-example.csv", "invoices-example.json"):
        r = run(
            "invoices",
            "import",
            str(REPO / "data" / name),
            "--duckdb",
            str(path),
            "--as-of",
            "2030-02-01",
        )
        assert r.exit_code == 0, r.output
        said.append(r.stderr.strip())
    assert said == [
        "invoices: 2 new, 0 corrected, 0 unchanged, 0 refused",
        "invoices: 0 new, 0 corrected, 2 unchanged, 0 refused",
    ]
    rows = audit(path)
    assert set(rows) == {"HT-2030-0117", "EG-D-55120"}


def test_an_unreachable_postgresql_warehouse_is_one_line() -> None:
    r = run("invoices", "audit", "--warehouse", "postgresql://u:pw-Not-Shown@127.0.0.1:1/db")
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert r.stderr.startswith("error: cannot connect to the warehouse postgresql://u:***@")
    assert len(r.stderr.strip().splitlines()) == 1 and "pw-Not-Shown" not in r.output
    both = run("invoices", "audit", "--warehouse", "postgresql://u@h/db", "--duckdb", "x.duckdb")
    assert both.exit_code == 2 and "not both" in both.stderr


# -- the dispute package ---------------------------------------------------------------------
def test_the_dispute_package_proves_each_finding(base: Path, tmp_path: Path) -> None:

    path = warehouse(base, tmp_path)
    assert import_csv(path, tmp_path, [HOLD]).exit_code == 0
    out = tmp_path / "pack" / "t1.html"
    r = run("invoices", "dispute", "T-1", "--out", str(out), "--duckdb", str(path))
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert page.startswith("<!doctype html>") and "@media print" in page
    assert not re.search(r"<script|<link\b|<img\b|@import|(src|href)\s*=|url\(", page, re.I)
    assert "Dispute by 2030-02-19" in page and "940.00 USD" in page
    with out.with_suffix(".csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    amounts = {r["item"]: r["value"] for r in rows if r["section"] == "amount"}
    assert amounts["billed"] == "1510.00 USD" and amounts["in dispute"] == "940.00 USD"
    assert [r["code"] for r in rows if r["section"] == "finding"] == ["not_available"]
    proof = [r for r in rows if r["section"] == "proof"]
    # the unavailability, as freetime saw it: when, through which load or notification
    became = [p for p in proof if p["item"] == "status" and p["value"].endswith("not_available")]
    assert became and all(p["observed_at"] for p in proof)
    assert all(p["notification_id"] for p in proof if p["how"] == "webhook")
    assert any(p["item"] == "customs hold" for p in proof)
    unknowns = [r["value"] for r in rows if r["section"] == "unknown"]
    assert any("Who caused a hold" in u for u in unknowns)
    r = run("invoices", "dispute", "NOPE", "--out", str(tmp_path / "x.html"), "--duckdb", str(path))
    assert r.exit_code == 2 and r.stderr.strip() == "error: no invoice 'NOPE' imported"
