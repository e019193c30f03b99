"""`freetime evidence` over the walked container (tests/history_walk.py), checked in a real
headless browser when chromium is installed."""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from history_walk import Walk  # noqa: E402

from freetime_cli.main import app  # noqa: E402

runner = CliRunner()
NUMBER = "EMCU1764628"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
INSTALL_HINT = (
    "chromium is not installed; install it with "
    "`apt-get update && apt-get install -y chromium` (Debian/Ubuntu)"
)
#: a reefer tariff for Tacoma, tiered like the sandbox terminal's demurrage
TARIFFS = (
    "charge,carrier_scac,port_locode,equipment,free_days,free_basis,tiers,currency,source,as_of\n"
    "demurrage,,USTIW,reefer,4,calendar,1-4:235;5-9:285;10+:335,USD,test sheet,2030-01-01\n"
)


@pytest.fixture(scope="module")
def page(walked: Walk, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("evidence")
    tariffs = tmp / "tariffs.csv"
    tariffs.write_text(TARIFFS)
    out = tmp / "box.html"
    r = runner.invoke(
        app,
        [
            "evidence",
            NUMBER,
            "--duckdb",
            str(walked.duckdb_path),
            "--out",
            str(out),
            "--tariffs",
            str(tariffs),
        ],
    )
    assert r.exit_code == 0, r.output
    return out


def _rows(page: str, table: str) -> list[list[str]]:
    body = page[page.index(f'<table id="{table}">') :]
    body = body[: body.index("</table>")]
    return [
        [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr, re.S)]
        for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)
    ]


def test_evidence_lists_the_dates_and_the_days_charged(page: Path) -> None:
    html = page.read_text(encoding="utf-8")
    facts = dict(r for r in _rows(html, "facts") if len(r) == 2)
    assert facts["Container"] == NUMBER
    assert facts["Bill of lading"] == "EGLV0003901303"
    assert facts["Port of discharge"] == "Tacoma USTIW"
    assert facts["Terminal"] == "Husky Terminal"
    assert facts["Discharged"] == "2030-01-07 19:36 UTC (2030-01-07 11:36 local)"
    assert facts["Picked up (full out)"] == "2030-01-16 20:05 UTC (2030-01-16 12:05 local)"
    assert facts["Empty returned"] == "2030-01-26 12:11 UTC (2030-01-26 04:11 local)"
    # each party's own dates: the sandbox posts the terminal's LFD, not the line's
    terminal = "Terminal demurrage: "
    assert facts[terminal + "free time"] == "2030-01-08 to 2030-01-10 (3 days)"
    assert facts[terminal + "last free day"].startswith(
        "2030-01-10 (reported as pickup_lfd_terminal, last set 2030-01-11 00:00 UTC"
    )
    assert facts[terminal + "chargeable until"] == "2030-01-16 (full out)"
    assert "tariff line 2: test sheet" in facts[terminal + "tariff"]
    assert facts[terminal + "days charged"] == "6, 4 while not available or on hold"
    # 4 days at 235 and 2 at 285: what the terminal's own demurrage fee reached
    assert facts[terminal + "total"] == "1,510.00 USD"
    assert facts["Line demurrage: last free day"] == "not reported"
    assert facts["Line demurrage: days charged"] == "0, 0 while not available or on hold"
    days = [d for d in _rows(html, "charged-days")[1:] if d[0] == "Terminal demurrage"]
    assert [(d[1], d[2], d[3], d[4]) for d in days] == [
        ("2030-01-11", "1", "1-4", "235.00 USD"),
        ("2030-01-12", "2", "1-4", "235.00 USD"),
        ("2030-01-13", "3", "1-4", "235.00 USD"),
        ("2030-01-14", "4", "1-4", "235.00 USD"),
        ("2030-01-15", "5", "5-9", "285.00 USD"),
        ("2030-01-16", "6", "5-9", "285.00 USD"),
    ]
    assert html.count("<tr class=flag>") == 4
    assert [d[5] for d in days[:4]] == ["yes: customs hold, not available"] * 4
    timeline = _rows(html, "timeline")[1:]
    whats = [t[1] for t in timeline]
    for what in (
        "customs hold",
        "LFD (pickup_lfd_terminal)",
        "discharged",
        "pickup appointment",
        "full out (picked up)",
        "empty returned",
        "status",
    ):
        assert what in whats, what
    moved = [t for t in timeline if t[1] == "LFD (pickup_lfd_terminal)"][-1]
    assert (moved[2], moved[3]) == ("2030-01-11", "2030-01-10")  # LFD columns are DATEs
    assert moved[4].startswith("webhook ")
    # the terminal by its name, not its internal id
    assert [t[3] for t in timeline if t[1] == "terminal"] == ["Husky Terminal"]
    assert "what happened before (holds, availability, LFDs reported earlier) is not known" in html


def test_evidence_is_self_contained_and_prints(page: Path) -> None:
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!doctype html>")
    assert not re.search(r"<script|<link\b|<img\b|@import", html, re.I)
    assert not re.search(r"""(src|href)\s*=|url\(""", html, re.I)
    assert "@media print" in html


def test_the_csv_holds_the_same_facts(page: Path) -> None:
    with page.with_suffix(".csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    facts = {r["item"]: r["value"] for r in rows if r["section"] == "fact"}
    html = page.read_text(encoding="utf-8")
    assert facts == dict(r for r in _rows(html, "facts") if len(r) == 2)
    days = [r for r in rows if r["section"] == "charged_day"]
    assert [r["item"] for r in days] == [f"2030-01-{d}" for d in range(11, 17)]
    assert days[4]["value"].startswith("Terminal demurrage; day 5; tier 5-9; rate 285.00")
    assert sum("not available or on hold" in r["value"] for r in days) == 4
    timeline = [r for r in rows if r["section"] == "timeline"]
    assert len(timeline) == len(_rows(html, "timeline")) - 1
    assert all(r["how"] != "webhook" or r["notification_id"] for r in timeline)


def test_an_unknown_container_is_one_line(walked: Walk, tmp_path: Path) -> None:
    r = runner.invoke(
        app,
        [
            "evidence",
            "NOPE0000000",
            "--duckdb",
            str(walked.duckdb_path),
            "--out",
            str(tmp_path / "x.html"),
        ],
    )
    assert r.exit_code == 2 and "no container 'NOPE0000000'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.output
    assert not (tmp_path / "x.html").exists()


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    profile.mkdir()
    # no network at all: every host name fails to resolve
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={profile}",
        "--window-size=1000,1400",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason=INSTALL_HINT)
def test_evidence_renders_and_prints_in_headless_chromium(page: Path, tmp_path: Path) -> None:
    url = page.resolve().as_uri()
    shot, pdf = tmp_path / "evidence.png", tmp_path / "evidence.pdf"
    # one browser start for the three: the DOM, a screenshot and the printed PDF
    dom = _chromium(
        tmp_path,
        "--dump-dom",
        f"--screenshot={shot}",
        f"--print-to-pdf={pdf}",
        "--no-pdf-header-footer",
        url,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert f"Demurrage evidence: container {NUMBER}" in dom.stdout
    assert dom.stdout.count('class="flag"') == 4  # the browser's own serialisation
    assert shot.exists(), dom.stderr[-2000:]
    assert shot.stat().st_size > 20_000  # a blank page compresses to a few kB
    assert pdf.read_bytes()[:5] == b"%PDF-", dom.stderr[-2000:]
    print(f"screenshot: {shot}\nprinted: {pdf}")
