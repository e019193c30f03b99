"""The morning digest: what it shows, its size per channel, when it is due, and sending it to
real servers (directly, from the CLI and from the Prefect flow)."""

from __future__ import annotations

import shutil
import sys
from datetime import UTC, date, datetime, time
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from alerts_servers import start_hooks, start_smtp  # noqa: E402

from freetime_cli.main import app  # noqa: E402
from pipelines.alerts import load_settings, render_digest, send_digests  # noqa: E402
from pipelines.alerts.config import Destination, Filter  # noqa: E402
from pipelines.alerts.digest import CHAT_BUDGET, changes_since, due, snapshot  # noqa: E402

NOW = datetime(2026, 11, 23, 14, 45, tzinfo=UTC)  # 06:45 in Los Angeles


def box(i: int, level: str = "overdue", **kw: Any) -> dict[str, Any]:
    return {
        "container_id": f"c{i}",
        "container_number": f"MSCU{i:07d}",
        "risk_level": level,
        "lfd_date": date(2026, 11, 20),
        "lfd_source": "terminal",
        "days_to_lfd": -3,
        "pod_terminal_name": "Pacific Container Terminal Pier J",
        "port_of_discharge_locode": "USLGB",
        "shipping_line_scac": "MAEU",
        "blocking_holds": ["customs", "freight"],
        "projected_demurrage": 1234.0,
        "currency": "USD",
        "risk_reason": "LFD passed 3 days ago; customs and freight holds; no appointment",
        **kw,
    }


@pytest.mark.fast
def test_email_digest_of_3000_boxes_stays_under_1_mb() -> None:
    from apprise.common import NotifyFormat
    from apprise.conversion import convert_between

    rows = [box(i) for i in range(3000)]
    dg = render_digest(None, rows, None, NOW, "email")
    assert dg.rows == 3000 and 0 < dg.shown <= 3000 and dg.body_format == "html"
    assert "MSCU0000000" in dg.body and "<table" in dg.body
    if dg.shown < dg.rows:
        assert f"{dg.rows - dg.shown} more boxes at risk" in dg.body
    # the message as Apprise's email plugin builds it: HTML and its plain-text part
    msg = MIMEMultipart("alternative")
    msg.attach(
        MIMEText(convert_between(NotifyFormat.HTML, NotifyFormat.TEXT, dg.body), "plain", "utf-8")
    )
    msg.attach(MIMEText(dg.body, "html", "utf-8"))
    assert len(msg.as_bytes()) < 1_000_000


@pytest.mark.fast
def test_chat_digest_is_a_summary() -> None:
    rows = [box(i) for i in range(3000)]
    dest = Destination("chat", "json://example.com/x")
    dg = render_digest(dest, rows, None, NOW)
    assert dg.body_format == "markdown" and len(dg.body) < CHAT_BUDGET
    assert "**3000 at risk**: 3000 overdue, 0 due today, 0 imminent" in dg.body
    assert dg.shown == 10 and "2990 more in the email digest" in dg.body


@pytest.mark.fast
def test_changes_since_the_last_digest() -> None:
    before = snapshot([box(1, "imminent"), box(2, "imminent"), box(3, "due_today")])
    now = [box(1, "overdue"), box(2, "imminent", lfd_date=date(2026, 11, 19)), box(4)]
    ch = changes_since(before, now)
    assert [r["container_number"] for r in ch.new] == ["MSCU0000004"]
    assert [r["container_number"] for r in ch.worse] == ["MSCU0000001"]
    assert [(r["container_number"], was) for r, was in ch.lfd_moved] == [
        ("MSCU0000002", "2026-11-20")
    ]
    assert ch.cleared == ["MSCU0000003"]
    assert ch.lines(5)[0] == "1 newly at risk, 1 more urgent, 1 LFD changed, 1 no longer at risk"
    assert changes_since(None, now).first


@pytest.mark.fast
def test_filters_pick_each_destinations_boxes() -> None:
    rows = [box(1), box(2, port_of_discharge_locode="USNYC"), box(3, "imminent")]
    la = Destination("la", "json://x/y", Filter(ports=("uslgb",), levels=("overdue",)))
    dg = render_digest(la, rows, None, NOW, "text")
    assert dg.rows == 1 and "MSCU0000001" in dg.body and "MSCU0000002" not in dg.body


@pytest.mark.fast
def test_due_once_a_local_day_at_the_local_time() -> None:
    la = Destination("la", "json://x/y", digest_time=time(6, 30), timezone="America/Los_Angeles")
    assert not due(la, datetime(2026, 11, 23, 14, 29, tzinfo=UTC), None)  # 06:29 local
    assert due(la, datetime(2026, 11, 23, 14, 30, tzinfo=UTC), None)
    assert not due(la, datetime(2026, 11, 23, 20, 0, tzinfo=UTC), "2026-11-23")
    assert due(la, datetime(2026, 11, 24, 14, 31, tzinfo=UTC), "2026-11-23")
    # 02:00 UTC on the 24th is still the 23rd in Los Angeles: already sent
    assert not due(la, datetime(2026, 11, 24, 2, 0, tzinfo=UTC), "2026-11-23")
    off = Destination("off", "json://x/y", digest_time=None)
    assert not due(off, NOW, None)


@pytest.fixture
def warehouse(tmp_path: Path, published_warehouse: Path) -> Path:
    wh = tmp_path / "w.duckdb"
    shutil.copy(published_warehouse, wh)
    return wh


def test_digest_sent_once_per_day_to_email_and_chat(tmp_path: Path, warehouse: Path) -> None:
    smtp, hooks = start_smtp(tmp_path, "starttls"), start_hooks()
    cfg = tmp_path / "a.toml"
    cfg.write_text(
        '[alerts]\ndigest_time = "06:30"\ntimezone = "America/Los_Angeles"\n'
        f'[[alerts.destinations]]\nname = "mail"\nurl = "{smtp.url()}"\n'
        f'[[alerts.destinations]]\nname = "hook"\nurl = "json://{hooks.netloc}/d"\n'
    )
    state = tmp_path / "s.sqlite"
    settings = load_settings(cfg, env={})
    try:
        assert (
            send_digests(warehouse, settings, state_path=state, now=NOW.replace(hour=14, minute=0))
            == []
        )
        results = send_digests(warehouse, settings, state_path=state, now=NOW)
        assert [r.error for r in results] == [None, None]
        (msg,) = smtp.messages
        assert str(msg["subject"]).startswith("freetime digest 2026-11-23: ")
        html = next(p for p in msg.walk() if p.get_content_type() == "text/html").get_content()
        assert "<th>container</th>" in html and "First digest" in html
        (chat,) = hooks.bodies("/d")
        assert "at risk**" in chat["message"] and len(chat["message"]) < CHAT_BUDGET
        assert send_digests(warehouse, settings, state_path=state, now=NOW) == []
        # the next morning: what changed since yesterday's digest
        nxt = NOW.replace(day=24)
        results = send_digests(warehouse, settings, state_path=state, now=nxt)
        assert len(results) == 2 and len(smtp.messages) == 2
        html = next(p for p in smtp.messages[1].walk() if p.get_content_type() == "text/html")
        assert "newly at risk" in html.get_content()
    finally:
        smtp.controller.stop()
        hooks.close()


def test_dry_run_prints_the_table_and_writes_nothing(tmp_path: Path, warehouse: Path) -> None:
    r = CliRunner().invoke(
        app,
        ["alerts", "digest", "--dry-run", "--duckdb", str(warehouse), "--as-of", NOW.isoformat()],
    )
    assert r.exit_code == 0, r.output
    assert "all boxes" in r.output and "container  " in r.output and "at risk:" in r.output
    assert not (warehouse.parent / "alerts.sqlite").exists()


def test_the_digest_flow_sends_the_due_digests(
    tmp_path: Path, warehouse: Path, prefect_harness: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.alerts import digest

    smtp = start_smtp(tmp_path, "ssl")
    cfg = tmp_path / "a.toml"
    cfg.write_text(f'[alerts]\n[[alerts.destinations]]\nname = "mail"\nurl = "{smtp.url()}"\n')
    monkeypatch.setenv("FREETIME_ALERTS_CONFIG", str(cfg))
    monkeypatch.setenv("FREETIME_ALERTS_STATE", str(tmp_path / "s.sqlite"))
    monkeypatch.delenv("FREETIME_ALERT_URLS", raising=False)
    try:
        lines = digest(str(warehouse), as_of=NOW)
        assert len(lines) == 1 and "digest sent" in lines[0] and len(smtp.messages) == 1
        assert digest(str(warehouse), as_of=NOW) == []
    finally:
        smtp.controller.stop()


def test_cli_digest_sends_when_forced_and_refuses_bad_input(
    tmp_path: Path, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smtp = start_smtp(tmp_path, "starttls")
    cfg = tmp_path / "a.toml"
    cfg.write_text(
        '[alerts]\ndigest_time = "23:59"\n'
        f'[[alerts.destinations]]\nname = "mail"\nurl = "{smtp.url()}"\n'
    )
    monkeypatch.delenv("FREETIME_ALERT_URLS", raising=False)
    common = ["--duckdb", str(warehouse), "--config", str(cfg), "--state", str(tmp_path / "s")]
    runner = CliRunner()
    try:
        r = runner.invoke(app, ["alerts", "digest", *common, "--as-of", NOW.isoformat()])
        assert r.exit_code == 0 and "no digest due" in r.output and smtp.messages == []
        r = runner.invoke(app, ["alerts", "digest", *common, "--force"])
        assert r.exit_code == 0, r.output
        assert "mail (mailtos://desk:****@" in r.output and "digest sent" in r.output
        assert len(smtp.messages) == 1
        for bad, words in (
            (["--as-of", "yesterday"], "is not an ISO 8601"),
            (["--destination", "nope"], "no destination named 'nope'"),
        ):
            r = runner.invoke(app, ["alerts", "digest", *common, *bad])
            assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output
    finally:
        smtp.controller.stop()
