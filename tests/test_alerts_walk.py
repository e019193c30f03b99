"""A box's life walked through the sandbox clock, risk published after every load or webhook
apply: exactly the expected alerts reach a real SMTP server and a real JSON webhook, in order,
once each, including across a SIGKILL of the sender between sending and marking.

The walk is the one of ``tests/history_walk.py`` (the ``walked`` fixture, once per run): its
alerts desk publishes risk and sends after each of its first 20 steps and keeps what the
destinations received (:class:`history_walk.AlertsRun`)."""

from __future__ import annotations

import datetime as dt
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from alerts_servers import start_hooks, start_smtp  # noqa: E402
from history_walk import ALERT_END, Walk, desk_config  # noqa: E402

from pipelines.alerts import load_settings, send_pending  # noqa: E402
from pipelines.analytics import publish_risk  # noqa: E402
from pipelines.config import ApiSettings  # noqa: E402
from pipelines.load import run_load  # noqa: E402

#: What the walked container's life raises (tests/history_walk.py describes the life): LFD
#: posted 3 days out with a customs hold on, moved a day earlier, overdue, hold released as it
#: becomes available, picked up (nothing after).
EXPECTED = [
    ("level", "imminent 2030-01-11"),
    ("hold", "customs"),
    ("level", "due_today 2030-01-10"),
    ("lfd_earlier", "terminal 2030-01-10"),
    ("level", "overdue 2030-01-10"),
    ("hold_released", "customs"),
    ("available", "available"),
]


def test_a_box_life_raises_each_alert_once_in_order_across_a_sigkill(
    walked: Walk, tmp_path: Path
) -> None:
    run = walked.alerts
    assert run is not None and not run.errors, run.errors if run else "no alerts desk"
    assert run.killed, "the sender was never killed: the kill step raised no alert"
    got = [(b["kind"], b["value"]) for b in run.bodies("/hook")]
    keys = [b["idempotency_key"] for b in run.bodies("/hook")]
    assert all(b["container"] == walked.snapshots[0]["number"] for b in run.bodies())
    # exactly one copy: the alert in flight when the sender died, same idempotency key
    first_at_kill = EXPECTED.index(("level", "due_today 2030-01-10"))
    assert got == EXPECTED[: first_at_kill + 1] + EXPECTED[first_at_kill:]
    assert len(keys) == len(EXPECTED) + 1 and len(set(keys)) == len(EXPECTED)
    assert [r.headers["Idempotency-Key"] for r in run.received] == keys
    # email: the same alerts in the same order; at most the one in flight twice
    subjects = run.subjects
    deduped = [s for i, s in enumerate(subjects) if i == 0 or s != subjects[i - 1]]
    assert len(deduped) == len(EXPECTED) and len(subjects) - len(deduped) <= 1
    assert "due_today" in deduped[2] and "LFD moved earlier" in deduped[3]
    for types in run.mail_parts:
        assert types == ["multipart/alternative", "text/plain", "text/html"]

    # re-running risk on the warehouse as the desk left it raises nothing more: the same
    # destinations (by name, with the sender's state) on live servers receive nothing
    assert run.duckdb_path and run.state_path
    db, state = tmp_path / "walk.duckdb", tmp_path / "alerts.sqlite"
    shutil.copyfile(run.duckdb_path, db)
    shutil.copyfile(run.state_path, state)
    smtp, hooks = start_smtp(tmp_path, "starttls"), start_hooks()
    try:
        config = tmp_path / "alerts.toml"
        config.write_text(desk_config(smtp, hooks, run.number))
        publish_risk(db, as_of=ALERT_END)
        publish_risk(db, as_of=ALERT_END)
        summary = send_pending(db, load_settings(config, env={}), state_path=state)
        assert summary.sent == 0 and not summary.failed
        assert hooks.received == [] and smtp.messages == []
    finally:
        smtp.controller.stop()
        hooks.close()


def _count(path: Path, sql: str, params: list[Any]) -> int:
    import duckdb

    with duckdb.connect(str(path), read_only=True) as con:
        row = con.execute(sql, params).fetchone()
    return int(row[0]) if row else 0


def test_reloading_adds_no_alert(tmp_path: Path) -> None:
    """A box at risk, then the same account loaded again in full and risk re-run: the outbox
    does not grow."""
    from sandbox.thread import SandboxThread

    path = tmp_path / "w.duckdb"
    at = dt.datetime(2026, 11, 20, 12, tzinfo=dt.UTC)
    with SandboxThread(containers=150, seed=49, clock=at.isoformat()) as sb:
        api = ApiSettings(base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100000)
        run_load(path, api)
        publish_risk(path, as_of=at - dt.timedelta(days=2))
        publish_risk(path, as_of=at)
        raised = _count(path, "SELECT count(*) FROM analytics.alert_outbox", [])
        assert raised > 0
        run_load(path, api, full=True)
        publish_risk(path, as_of=at - dt.timedelta(days=2))
        publish_risk(path, as_of=at)
    assert _count(path, "SELECT count(*) FROM analytics.alert_outbox", []) == raised
