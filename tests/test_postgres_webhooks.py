"""Webhooks into a PostgreSQL warehouse (real sandbox, real receiver process, real server).

- the sandbox delivers to ``freetime webhooks serve`` (warehouse from ``FREETIME_WAREHOUSE``)
  after its clock moves: every notification is in the PostgreSQL warehouse and the risk rows of
  every container are republished within 10 s, and the alerts that risk raised reach the
  receiver's alert webhook once each;
- while another writer holds the advisory lock, deliveries are acknowledged at once and applied
  once it lets go;
- ``freetime webhooks apply --warehouse URL`` applies an inbox in one transaction per batch,
  behind another writer's advisory lock; given twice, the warehouse is refused; an unreachable
  server stops the receiver in one line, the password masked.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from freetime_cli.webhooks_cmd import start_receiver_process
from pipelines.analytics import publish_risk
from pipelines.config import ApiSettings, Warehouse
from pipelines.load import run_load
from pipelines.pg.lock import writer_lock
from pipelines.webhooks.receiver import PATH
from pipelines.webhooks.signing import sign
from sandbox.thread import SandboxThread
from tests.test_receiver_apply import SECRET, _notification, _within
from tests.test_side_by_side import _free_port
from tests.test_webhooks import post

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[1]


def _rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    try:
        con = psycopg2.connect(url)
    except psycopg2.Error:
        return []
    try:
        with con.cursor() as cur:
            cur.execute(sql)
            return list(cur.fetchall())
    except psycopg2.errors.UndefinedTable:  # not created yet
        return []
    finally:
        con.close()


def _wait_for_waiting_writer(url: str, what: str, proc: subprocess.Popen[Any]) -> None:
    """Until ``proc``'s writer session for ``what`` shows in pg_stat_activity: it is trying for
    the writers' lock (pipelines/pg/lock.py names it "freetime writer: <what> pid <pid> ...")."""
    name = f"freetime writer: {what} pid {proc.pid} %"
    deadline = time.monotonic() + 60
    while not _rows(url, f"SELECT 1 FROM pg_stat_activity WHERE application_name LIKE '{name}'"):
        assert proc.poll() is None, "the writer ended before it waited for the lock"
        assert time.monotonic() < deadline, f"no writer session {name!r}"
        time.sleep(0.1)


def test_the_receiver_applies_into_postgresql_and_risk_follows_within_10s(
    pg_database: str, tmp_path: Path
) -> None:
    from tests.alerts_servers import start_hooks

    inbox = tmp_path / "inbox.sqlite"
    alert_hook = start_hooks()
    with SandboxThread(
        containers=200, seed=31, rate_limit=100, webhook_backoff=0.2, webhook_timeout=5
    ) as sb:
        run_load(pg_database, ApiSettings(base_url=sb.base_url, api_key=sb.api_key))
        publish_risk(pg_database)
        port = _free_port()
        hook = sb.register_webhook(f"http://127.0.0.1:{port}{PATH}")
        log = (tmp_path / "receiver.log").open("wb")
        proc, _url = start_receiver_process(
            hook["attributes"]["secret"],
            inbox,
            port=port,
            warehouse=pg_database,
            env={
                "TERMINAL49_API_KEY": sb.api_key,
                "TERMINAL49_BASE_URL": sb.base_url,
                "FREETIME_ALERT_URLS": f"json://{alert_hook.netloc}/alerts",
            },
            stderr=log,
        )
        try:
            assert sb.advance(hours=6)["changed_containers"]
            assert sb.deliver_pending(timeout=60)["settled"]
            delivered = {n["id"] for n in sb.deliveries() if n["webhook_id"] == hook["id"]}
            assert delivered

            def applied() -> bool:
                rows = _rows(pg_database, "SELECT id FROM terminal49.webhook_notifications")
                return delivered <= {r[0] for r in rows}

            took = _within(10, applied, "every notification in the PostgreSQL warehouse")
            # the containers each notification names, and when its batch was applied
            named = _rows(
                pg_database,
                "SELECT n.id, n.container_id, n.applied_at FROM terminal49.webhook_notifications n "
                "JOIN terminal49.containers c ON c.id = n.container_id",
            )
            named = [r for r in named if r[0] in delivered]
            assert named, "no delivered notification names a container: the check is empty"

            def risk_follows() -> bool:
                rows = _rows(
                    pg_database, "SELECT container_id, as_of FROM analytics.demurrage_risk"
                )
                as_of = dict(rows)
                return all(cid in as_of and as_of[cid] >= at for _, cid, at in named)

            took += _within(10, risk_follows, "the notified containers' risk rows republished")
            print(f"{len(delivered)} notifications applied and risk republished in {took:.1f}s")

            def alerts_sent() -> bool:
                raised = _rows(pg_database, "SELECT alert_key FROM analytics.alert_outbox")
                sent = {b["idempotency_key"] for b in alert_hook.bodies("/alerts")}
                return bool(raised) and sent == {r[0] for r in raised}

            # six hours moved some box into risk: its alerts reach the receiver's webhook
            _within(60, alerts_sent, "the raised alerts at the alert webhook")
            time.sleep(0.5)  # a copy would come now
            sent = [b["idempotency_key"] for b in alert_hook.bodies("/alerts")]
            assert len(sent) == len(set(sent))
        finally:
            alert_hook.close()
            proc.terminate()
            proc.wait(timeout=30)
            sb.delete_webhook(hook["id"])
            log.close()
    lines = (tmp_path / "receiver.log").read_text()
    print(lines)
    assert Warehouse.parse(pg_database).password not in lines
    assert "Traceback" not in lines
    assert "risk republished" in lines
    # the changes the notifications carried are in the warehouse's history, as on DuckDB
    assert _rows(pg_database, "SELECT count(*) FROM terminal49.history WHERE how = 'webhook'")


def test_a_load_holding_the_lock_delays_the_apply_never_the_acknowledgement(
    pg_loaded: Callable[..., str], tmp_path: Path
) -> None:
    pg_database = pg_loaded(20, 7)  # a load of a sandbox of 20 containers of seed 7
    inbox, port = tmp_path / "inbox.sqlite", _free_port()

    def stored() -> set[str]:
        rows = _rows(pg_database, "SELECT id FROM terminal49.webhook_notifications")
        return {r[0] for r in rows if r[0].startswith("held-")}

    proc, url = start_receiver_process(SECRET, inbox, port=port, warehouse=pg_database)
    try:
        with writer_lock(Warehouse.parse(pg_database), "load"):  # a load on another machine
            for k in range(20):
                body = _notification(k, "")
                started = time.monotonic()
                assert post(url, body, sign(body, SECRET)).status_code == 200
                assert time.monotonic() - started < 1.0  # at once, not after the apply
            # the receiver tries to apply them and waits for the lock: nothing is written
            _wait_for_waiting_writer(pg_database, "webhook apply", proc)
            time.sleep(0.5)  # a few of its tries
            assert stored() == set()
        _within(10, lambda: len(stored()) == 20, "the held notifications applied")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "freetime_cli.main", "webhooks", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def test_webhooks_apply_writes_postgresql_behind_another_writer(
    pg_loaded: Callable[..., str], tmp_path: Path
) -> None:
    from pipelines.webhooks.inbox import Inbox, parse_notification

    pg_database = pg_loaded(20, 7)  # a load of a sandbox of 20 containers of seed 7
    inbox = tmp_path / "inbox.sqlite"
    with Inbox(inbox) as box:
        box.add_many([parse_notification(_notification(k, "")) for k in range(5)])
    warehouse = Warehouse.parse(pg_database)
    with writer_lock(warehouse, "load"):  # a load is publishing: the apply waits its turn
        proc = subprocess.Popen(
            [sys.executable, "-m", "freetime_cli.main", "webhooks", "apply", "--inbox", str(inbox)],
            cwd=REPO,
            env={**os.environ, "FREETIME_WAREHOUSE": pg_database, "TERMINAL49_API_KEY": ""},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_for_waiting_writer(pg_database, "webhook apply", proc)
        time.sleep(1)  # its tries every 0.2 s fail
        assert proc.poll() is None  # still waiting
        assert _rows(pg_database, "SELECT id FROM terminal49.webhook_notifications") == []
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "applied 5 notifications" in stdout
    assert warehouse.password not in stdout + stderr
    got = {r[0] for r in _rows(pg_database, "SELECT id FROM terminal49.webhook_notifications")}
    assert got == {f"held-{k}" for k in range(5)}

    again = _cli("apply", "--inbox", str(inbox), "--warehouse", pg_database)
    assert again.returncode == 0 and "applied 0 notifications" in again.stdout

    both = _cli("apply", "--warehouse", pg_database, "--duckdb", str(tmp_path / "w.duckdb"))
    assert both.returncode == 2 and "give the warehouse once" in both.stderr
    assert "Traceback" not in both.stderr


def test_a_receiver_with_an_unreachable_postgresql_warehouse_says_so_in_one_line(
    tmp_path: Path,
) -> None:
    url = f"postgresql://freetime:s3cret-pw@127.0.0.1:{_free_port()}/nothing"
    done = _cli(
        "serve",
        "--port",
        "0",
        "--inbox",
        str(tmp_path / "inbox.sqlite"),
        env={"FREETIME_WAREHOUSE": url, "FREETIME_WEBHOOK_SECRET": SECRET},
    )
    assert done.returncode == 2
    assert "cannot connect to the warehouse" in done.stderr and "***" in done.stderr
    assert "s3cret-pw" not in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
