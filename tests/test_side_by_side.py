"""Writers side by side: a long full scan holds the writer lock only to publish.

Real processes over real HTTP: a sandbox that answers every request slowly (so a full load at
one page at a time takes tens of seconds) with its rate limit on, the webhook receiver, and
``freetime load`` / ``freetime webhooks apply`` as subprocesses.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb

from freetime_cli.webhooks_cmd import start_receiver_process
from pipelines.analytics import publish_risk
from pipelines.config import ApiSettings
from pipelines.load import run_load
from pipelines.webhooks.receiver import PATH
from sandbox.process import SandboxProcess
from sandbox.thread import SandboxThread
from tests.test_load_sandbox import assert_equals_ground_truth
from tests.test_write_safety import REPO, _cli, _dump

CLOCK = "2026-11-20T12:00:00Z"
#: every answer takes 0.75-2.25 s (SLOWER: 1.5-4.5 s): a full load one page at a time takes
#: tens of seconds, an incremental one four pages at a time a fraction of that
SLOW = "slow=1.0,slow_seconds=1.5"
SLOWER = "slow=1.0,slow_seconds=3"
# The slow sandboxes are processes: they pace writers whose order the tests check while this
# process loads and applies beside them, so they stay off this process's GIL. The twin that
# answers at once (_load_at_once) is a thread.


def _api(sb: Any) -> ApiSettings:
    return ApiSettings(base_url=sb.base_url, api_key=sb.api_key)


def _load_at_once(db: Path, world: dict[str, Any]) -> None:
    """Load ``world`` (containers, seed, clock) into ``db`` from a twin sandbox that answers at
    once: the same account at the same clock as the slow one a test then starts, which would
    take tens of seconds to serve this first load."""
    with SandboxThread(**world) as fast:
        run_load(db, ApiSettings(fast.base_url, fast.api_key, rate_limit_per_minute=100_000))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _writers(db: Path) -> list[tuple[str, str | None]]:
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "SELECT writer, kind FROM terminal49.freetime_loads ORDER BY published_at"
        ).fetchall()
    return [(r[0], r[1]) for r in rows]


def test_a_long_full_load_lets_an_incremental_load_and_a_webhook_apply_publish(
    tmp_path: Path,
) -> None:
    db, inbox = tmp_path / "w.duckdb", tmp_path / "inbox.sqlite"
    world: dict[str, Any] = {"containers": 1200, "seed": 23, "clock": CLOCK}
    _load_at_once(db, world)
    with SandboxProcess(
        **world, rate_limit=100, faults=SLOWER, webhook_backoff=0.2, webhook_timeout=5
    ) as sb:
        port = _free_port()
        hook = sb.register_webhook(f"http://127.0.0.1:{port}{PATH}")
        receiver, _ = start_receiver_process(hook["attributes"]["secret"], inbox, port=port)
        env = {"TERMINAL49_API_KEY": sb.api_key}
        target = ("--duckdb", str(db), "--base-url", sb.base_url)
        try:
            full = _cli("load", "--full", "--concurrency", "1", *target, env=env)
            time.sleep(2)  # the full scan is under way
            assert full.poll() is None, full.communicate()
            advanced = sb.advance(hours=24)  # containers change and new ones are tracked
            assert advanced["new_containers"] and advanced["changed_containers"]
            assert sb.deliver_pending(timeout=60)["settled"]
            # without a key: the notifications' own records, no GET (kept short for the test)
            apply = _cli("webhooks", "apply", "--duckdb", str(db), "--inbox", str(inbox), env={})
            assert apply.wait(timeout=120) == 0, apply.communicate()
            # the incremental load, in this process (the full scan is the process under test)
            assert run_load(db, _api(sb)).kind == "incremental"
            # both published while the full scan was still going
            assert full.poll() is None, "the full load ended first: the test proves nothing"
            assert _writers(db)[-2:] == [("webhooks", None), ("load", "incremental")]
            out, err = full.communicate(timeout=300)
            assert full.returncode == 0, err
        finally:
            receiver.terminate()
            receiver.wait(timeout=30)
            sb.delete_webhook(hook["id"])
        assert _writers(db)[-1] == ("load", "full")
        # newer values won over the full scan's older pages, and the containers the advance
        # added (seen by the incremental load, maybe not by the scan) are all there
        assert_equals_ground_truth(db, sb.ground_truth())


def test_a_killed_full_scan_leaves_what_the_other_writers_published(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    world: dict[str, Any] = {"containers": 600, "seed": 29, "clock": CLOCK}
    _load_at_once(db, world)
    with SandboxProcess(**world, rate_limit=100, faults=SLOW) as sb:
        env = {"TERMINAL49_API_KEY": sb.api_key}
        target = ("--duckdb", str(db), "--base-url", sb.base_url)
        rng = random.Random(7)
        for _ in range(2):
            full = _cli("load", "--full", "--concurrency", "1", *target, env=env)
            time.sleep(2)
            sb.advance(hours=3)
            # the other writer, in this process (the full scan is the process under test)
            assert run_load(db, _api(sb)).kind == "incremental"
            published = _dump(db)
            time.sleep(rng.uniform(0, 3))
            assert full.poll() is None, "the full load ended first: the test proves nothing"
            full.send_signal(signal.SIGKILL)
            full.wait(timeout=30)
            assert _dump(db) == published
        # the next full load publishes over a slot a killed scan left
        run_load(db, _api(sb), full=True)
        assert_equals_ground_truth(db, sb.ground_truth())


#: the transport-events step of a flow, as a process of its own (it has no command)
_EVENTS = """
import sys
from pathlib import Path
from pipelines.config import ApiSettings, working_folder
from pipelines.history.transport_events import fetch_transport_events
from pipelines.terminal49.client import Terminal49Client
db = Path(sys.argv[1])
api = ApiSettings.resolve(base_url=sys.argv[2])
with Terminal49Client.for_api(api, budget=working_folder(db)) as c:
    print(fetch_transport_events(db, c, max_containers=3).line())
"""


def test_the_events_step_and_the_documents_sync_fetch_without_the_writer_lock(
    tmp_path: Path,
) -> None:
    db, inbox = tmp_path / "w.duckdb", tmp_path / "inbox.sqlite"
    world: dict[str, Any] = {"containers": 150, "seed": 31, "clock": CLOCK}
    _load_at_once(db, world)
    publish_risk(db, as_of=dt.datetime.fromisoformat(CLOCK))  # containers at risk need events
    # every answer takes 8-24 s: each of the two fetches takes tens of seconds
    with SandboxProcess(
        **world,
        rate_limit=100,
        faults="slow=1.0,slow_seconds=16",
        webhook_backoff=0.2,
        webhook_timeout=5,
    ) as sb:
        port = _free_port()
        hook = sb.register_webhook(f"http://127.0.0.1:{port}{PATH}")
        receiver, _ = start_receiver_process(hook["attributes"]["secret"], inbox, port=port)
        env = {"TERMINAL49_API_KEY": sb.api_key}
        try:
            events = subprocess.Popen(
                [sys.executable, "-c", _EVENTS, str(db), sb.base_url],
                cwd=REPO,
                env={**os.environ, **env},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            documents = _cli(
                "documents", "sync", "--duckdb", str(db), "--base-url", sb.base_url, env=env
            )
            sb.advance(hours=24)
            assert sb.deliver_pending(timeout=60)["settled"]
            apply = _cli("webhooks", "apply", "--duckdb", str(db), "--inbox", str(inbox), env={})
            assert apply.wait(timeout=120) == 0, apply.communicate()
            # the apply published while both were still fetching
            assert events.poll() is None, "the events step ended first: the test proves nothing"
            assert documents.poll() is None, "the sync ended first: the test proves nothing"
            assert _writers(db)[-1] == ("webhooks", None)
            out, err = events.communicate(timeout=300)
            assert events.returncode == 0, err
            assert out.startswith("3 requests for 3 containers"), out
            out, err = documents.communicate(timeout=300)
            assert documents.returncode == 0, err
        finally:
            receiver.terminate()
            receiver.wait(timeout=30)
            sb.delete_webhook(hook["id"])
    assert {w for w, _ in _writers(db)[-2:]} == {"events", "documents"}
