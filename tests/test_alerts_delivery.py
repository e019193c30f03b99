"""Delivering the outbox through Apprise to real servers on loopback: every channel's shape,
bad destinations (one line each, secrets masked, alerts kept pending and retried), a slow
destination that slows no other, the CLI."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from alerts_servers import slack_to, start_hooks, start_smtp, write_outbox  # noqa: E402

from freetime_cli.main import app  # noqa: E402
from pipelines.alerts import load_settings, send_pending  # noqa: E402
from pipelines.alerts.listing import alert_statuses  # noqa: E402

SLACK = "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7"
SLACK_SECRET = "TIiajkdnlazkcOXrIdevi7"


def config(path: Path, *dests: dict[str, object]) -> Path:
    lines = ["[alerts]", "retry_seconds = 60"]
    for d in dests:
        lines.append("[[alerts.destinations]]")
        lines += [f"{k} = {v!r}".replace("'", '"') for k, v in d.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_each_channel_gets_the_alert_in_its_own_shape(tmp_path: Path) -> None:
    wh = tmp_path / "w.duckdb"
    write_outbox(wh, 1)
    mail_tls, mail_ssl = start_smtp(tmp_path, "starttls"), start_smtp(tmp_path, "ssl")
    hooks, teams = start_hooks(), start_hooks(tls_folder=tmp_path)
    cfg = config(
        tmp_path / "a.toml",
        {"name": "mail-starttls", "url": mail_tls.url()},
        {"name": "mail-ssl", "url": mail_ssl.url()},
        {"name": "slack", "url": SLACK},
        {
            "name": "teams",
            "url": f"workflows://{teams.netloc}/wf0123456789/sig0123456789?verify=no",
        },
        {"name": "json", "url": f"json://{hooks.netloc}/hook"},
    )
    try:
        with contextlib.contextmanager(slack_to)(hooks):
            summary = send_pending(wh, load_settings(cfg, env={}), state_path=tmp_path / "s")
        assert not summary.failed, [r.line() for r in summary.failed]
        assert summary.sent == 5
        for smtp in (mail_tls, mail_ssl):
            (msg,) = smtp.messages
            assert "MSCU0000001 imminent" in str(msg["subject"])
            parts = {p.get_content_type(): p for p in msg.walk()}
            assert set(parts) == {"multipart/alternative", "text/plain", "text/html"}
            assert "Binding LFD: 2030-01-11 (terminal)" in parts["text/plain"].get_content()
            assert "<strong>MSCU0000001</strong>" in parts["text/html"].get_content()
        (slack,) = hooks.bodies("/services/")
        assert "MSCU0000001" in slack["attachments"][0]["title"]
        # Slack's mrkdwn bolds with one star: CommonMark's two would show literally.
        text = slack["attachments"][0]["text"]
        assert "*MSCU0000001*" in text and "**" not in text, text
        (card,) = teams.bodies("/workflows/")
        assert card["attachments"][0]["contentType"] == "application/vnd.microsoft.card.adaptive"
        assert "MSCU0000001" in str(card)
        (js,) = hooks.bodies("/hook")
        assert js["idempotency_key"] == "key-0001" and js["container"] == "MSCU0000001"
        assert js["kind"] == "level" and "MSCU0000001" in js["title"]
        hook_req = next(r for r in hooks.received if r.path == "/hook")
        assert hook_req.headers["Idempotency-Key"] == "key-0001"
    finally:
        for s in (mail_tls, mail_ssl):
            s.controller.stop()
        hooks.close()
        teams.close()


def test_bad_destinations_say_one_line_keep_alerts_pending_and_retry(tmp_path: Path) -> None:
    wh = tmp_path / "w.duckdb"
    write_outbox(wh, 2)
    smtp = start_smtp(tmp_path, "starttls")
    good, down, silent = start_hooks(), start_hooks(), start_hooks()
    down.answer = lambda path: (500, 0.0)
    silent.answer = lambda path: (200, 30.0)  # accepts the connection, never answers in time
    cfg = config(
        tmp_path / "a.toml",
        {"name": "good", "url": f"json://{good.netloc}/hook"},
        {"name": "typo", "url": "jsn://user:hunter2-secret@example.com/x"},
        {"name": "badfilter", "url": f"json://{good.netloc}/other", "levels": ["overdu"]},
        {"name": "refused", "url": smtp.url(password="wrong-pass-123")},
        {"name": "down", "url": f"json://{down.netloc}/hook"},
        {"name": "silent", "url": f"json://{silent.netloc}/hook?rto=1"},
    )
    state = tmp_path / "state.sqlite"
    try:
        settings = load_settings(cfg, env={})
        summary = send_pending(wh, settings, state_path=state)
        by = {r.name: r for r in summary.results}
        assert by["good"].sent == 2 and by["good"].error is None
        assert len(good.bodies("/hook")) == 2 and good.bodies("/other") == []
        for name in ("typo", "badfilter", "refused", "down", "silent"):
            line = by[name].line()
            assert "\n" not in line and line.startswith(f"{name} (") and by[name].sent == 0
            assert "hunter2" not in line and "wrong-pass-123" not in line
        assert "overdu" in by["badfilter"].line()
        assert "535" in by["refused"].line()  # the server's refusal of the credentials
        assert "500" in by["down"].line()
        assert by["down"].pending == 2 and by["silent"].pending == 2
        listed = alert_statuses(wh, settings, state_path=state)
        down_status = {(s.seq, s.status) for s in listed if s.destination.startswith("down ")}
        assert down_status == {(1, "failed"), (2, "failed")}
        # back-off: the next pass does not knock on a failed destination yet
        requests_before = len(down.received)
        again = {r.name: r for r in send_pending(wh, settings, state_path=state).results}
        assert again["down"].waiting_until is not None and len(down.received) == requests_before
        # the channel comes back: the retry delivers both, in order, once
        down.answer = lambda path: (200, 0.0)
        retried = {
            r.name: r
            for r in send_pending(wh, settings, state_path=state, ignore_backoff=True).results
        }
        assert retried["down"].sent == 2
        assert [b["idempotency_key"] for b in down.bodies("/hook")][-2:] == ["key-0001", "key-0002"]
        assert len(good.bodies("/hook")) == 2  # nothing sent twice to the good one
    finally:
        smtp.controller.stop()
        for h in (good, down, silent):
            h.close()


def test_a_slow_destination_does_not_slow_the_others(tmp_path: Path) -> None:
    wh = tmp_path / "w.duckdb"
    write_outbox(wh, 2)
    slow, fast = start_hooks(), start_hooks()
    slow.answer = lambda path: (200, 10.0)
    cfg = config(
        tmp_path / "a.toml",
        {"name": "slow", "url": f"json://{slow.netloc}/hook"},
        {"name": "fast", "url": f"json://{fast.netloc}/hook"},
    )
    try:
        started = time.monotonic()
        done = threading.Event()
        result = {}

        def run() -> None:
            result["s"] = send_pending(wh, load_settings(cfg, env={}), state_path=tmp_path / "s")
            done.set()

        threading.Thread(target=run, daemon=True).start()
        while len(fast.received) < 2 and time.monotonic() - started < 15:
            time.sleep(0.05)
        assert len(fast.received) == 2
        assert fast.received[-1].at - started < 8  # the slow one takes 10 s per message
        assert done.wait(60)
        assert {r.name: r.sent for r in result["s"].results} == {"slow": 2, "fast": 2}
    finally:
        slow.close()
        fast.close()


def test_cli_test_list_send(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wh = tmp_path / "w.duckdb"
    write_outbox(wh, 1)
    hooks = start_hooks()
    hooks.answer = lambda path: (500, 0.0) if path == "/down" else (200, 0.0)
    cfg = config(
        tmp_path / "a.toml",
        {"name": "hook", "url": f"json://{hooks.netloc}/hook"},
        {"name": "down", "url": f"json://desk:pw-s3cret@{hooks.netloc}/down"},
    )
    monkeypatch.delenv("FREETIME_ALERT_URLS", raising=False)
    common = ["--duckdb", str(wh), "--config", str(cfg), "--state", str(tmp_path / "s")]
    runner = CliRunner()
    try:
        r = runner.invoke(app, ["alerts", "test", "hook", "--config", str(cfg)])
        assert r.exit_code == 0, r.output
        assert hooks.bodies("/hook")[0]["idempotency_key"] == "freetime-test"
        r = runner.invoke(app, ["alerts", "test", "nope://x", "--config", str(cfg)])
        assert r.exit_code == 2 and "Traceback" not in r.output
        assert r.output.count("\n") == 1 and "error:" in r.output
        r = runner.invoke(app, ["alerts", "send", *common])
        assert r.exit_code == 1
        assert "hook (json://" in r.output and "1 sent" in r.output
        assert "down (json://desk:****@" in r.output and "pw-s3cret" not in r.output
        r = runner.invoke(app, ["alerts", "list", *common])
        assert r.exit_code == 0
        assert "#1 MSCU0000001 imminent: now imminent -> hook" in r.output
        assert ": sent at " in r.output and ": failed: " in r.output
        r = runner.invoke(app, ["alerts", "list", *common, "--status", "failed"])
        assert r.output.count("\n") == 1 and "down" in r.output
    finally:
        hooks.close()


def test_load_and_risk_complete_whatever_the_alert_settings(
    tmp_path: Path, published_warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken alerts table and a malformed destination URL: risk still publishes."""
    import shutil
    from datetime import datetime

    from pipelines.analytics import publish_risk

    wh = tmp_path / "w.duckdb"
    shutil.copy(published_warehouse, wh)
    bad = tmp_path / "bad.toml"
    bad.write_text("[alerts\ncost_thresholds = 'x'\n")
    monkeypatch.setenv("FREETIME_ALERTS_CONFIG", str(bad))
    monkeypatch.setenv("FREETIME_ALERT_URLS", "not-a-url mailtos://x:y@")
    summary = publish_risk(wh, as_of=datetime.fromisoformat("2026-11-23T12:00:00+00:00"))
    assert summary.rows > 0
    r = CliRunner().invoke(app, ["alerts", "send", "--duckdb", str(wh)])
    assert r.exit_code == 2 and "is not valid TOML" in r.output and "Traceback" not in r.output


def test_the_risk_flow_raises_and_sends_and_a_down_channel_does_not_fail_it(
    tmp_path: Path,
    published_warehouse: Path,
    prefect_harness: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import shutil
    from datetime import datetime

    import duckdb

    from flows.sync import risk

    wh = tmp_path / "w.duckdb"
    shutil.copy(published_warehouse, wh)
    good, down = start_hooks(), start_hooks()
    down.answer = lambda path: (500, 0.0)
    monkeypatch.setenv("FREETIME_ALERTS_CONFIG", str(config(tmp_path / "a.toml")))
    monkeypatch.setenv("FREETIME_ALERT_URLS", f"json://{good.netloc}/a json://{down.netloc}/b")
    monkeypatch.setenv("FREETIME_ALERTS_STATE", str(tmp_path / "s.sqlite"))
    try:
        report = risk(str(wh), as_of=datetime.fromisoformat("2026-11-22T12:00:00+00:00"))
        assert report.risk.rows > 0 and "alerts" in report.timings
        with duckdb.connect(str(wh), read_only=True) as con:
            keys = [
                r[0]
                for r in con.execute(
                    "SELECT alert_key FROM analytics.alert_outbox ORDER BY seq"
                ).fetchall()
            ]
        assert keys, "two days later some box must have raised an alert"
        assert [b["idempotency_key"] for b in good.bodies("/a")] == keys
        assert len(down.received) == 1  # the first failure stops that destination's pass
        statuses = alert_statuses(wh, load_settings(), state_path=tmp_path / "s.sqlite")
        assert {s.status for s in statuses if "/b" in s.destination} == {"failed"}
    finally:
        good.close()
        down.close()
