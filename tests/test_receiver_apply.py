"""The receiver applies what it stores, in seconds (real processes, real HTTP).

- the sandbox delivers after its clock moves; with nothing else run, every notification is in
  the warehouse and the risk rows of the containers it names are computed after it was
  applied, within 10 s, and the alerts that risk run raised reach their destination (a real
  HTTP server) without any other command;
- with another writer holding the warehouse, deliveries are still acknowledged at once and
  applied once it lets go; a receiver killed between store and apply loses nothing.
"""

from __future__ import annotations

import copy
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import httpx
import orjson
import pytest

from freetime_cli.webhooks_cmd import start_receiver_process
from pipelines.analytics import publish_risk
from pipelines.config import ApiSettings
from pipelines.load import run_load
from pipelines.webhooks.receiver import PATH
from pipelines.webhooks.signing import sign
from pipelines.write import writer_lock
from sandbox.thread import SandboxThread
from tests.alerts_servers import start_hooks
from tests.conftest import FIXTURES
from tests.test_side_by_side import _free_port
from tests.test_webhooks import post

CLOCK = "2026-11-20T12:00:00Z"
SECRET = "receiver-apply-secret-0123"


@pytest.fixture(scope="module")
def sb() -> Iterator[Any]:
    with SandboxThread(
        containers=300, seed=31, rate_limit=100, webhook_backoff=0.2, webhook_timeout=5
    ) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def loaded(sb: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sandbox's account loaded once, before any test moves its clock: copy it to write."""
    db = tmp_path_factory.mktemp("loaded") / "w.duckdb"
    run_load(db, ApiSettings(base_url=sb.base_url, api_key=sb.api_key))
    return db


def _copy(loaded: Path, tmp_path: Path) -> Path:
    db = tmp_path / "w.duckdb"
    shutil.copyfile(loaded, db)
    return db


def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    try:
        with duckdb.connect(str(db), read_only=True) as con:
            return con.execute(sql).fetchall()
    except (duckdb.IOException, duckdb.CatalogException):  # publishing, or not yet created
        return []


def _within(seconds: float, check: Callable[[], bool], what: str) -> float:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < seconds, f"{what} not within {seconds:.0f}s"
        time.sleep(0.5)  # each look opens the file, which a writer then has to wait for
    return time.monotonic() - started


def _health(url: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(url.rsplit("/webhooks", 1)[0] + "/healthz").json()
    return body


def test_delivered_notifications_and_their_risk_reach_the_warehouse_within_10s(
    sb: Any, loaded: Path, tmp_path: Path
) -> None:
    db, inbox = _copy(loaded, tmp_path), tmp_path / "inbox.sqlite"
    publish_risk(db)
    port = _free_port()
    hook = sb.register_webhook(f"http://127.0.0.1:{port}{PATH}")
    desk = start_hooks()  # the desk's alert destination: a generic JSON webhook
    log = (tmp_path / "receiver.log").open("wb")
    proc, url = start_receiver_process(
        hook["attributes"]["secret"],
        inbox,
        port=port,
        duckdb=db,
        env={
            "TERMINAL49_API_KEY": sb.api_key,
            "TERMINAL49_BASE_URL": sb.base_url,
            "FREETIME_ALERT_URLS": f"json://{desk.netloc}/desk",
        },
        stderr=log,
    )
    try:
        advanced = sb.advance(hours=6)
        assert advanced["changed_containers"]
        assert sb.deliver_pending(timeout=60)["settled"]
        delivered = {n["id"] for n in sb.deliveries() if n["webhook_id"] == hook["id"]}
        assert delivered

        # (notification, the container it names if in the warehouse, when it was applied)
        named: list[tuple[Any, ...]] = []

        def applied() -> bool:
            rows = _rows(
                db,
                "SELECT n.id, c.id, n.applied_at FROM terminal49.webhook_notifications n "
                "LEFT JOIN terminal49.containers c ON c.id = n.container_id",
            )
            named[:] = [r for r in rows if r[0] in delivered and r[1] is not None]
            return delivered <= {r[0] for r in rows}

        _within(10, applied, "every notification in the warehouse")
        assert named, "no delivered notification names a container: the check below is empty"

        def risk_follows() -> bool:
            # each named container's risk row was computed after its notification was applied
            rows = _rows(db, "SELECT container_id, as_of FROM analytics.demurrage_risk")
            as_of = dict(rows)
            return all(cid in as_of and as_of[cid] >= at for _, cid, at in named)

        _within(10, risk_follows, "the notified containers' risk rows republished")
        health = _health(url)
        assert health["backlog"] == 0 and health["oldest_unapplied_age_s"] is None
        assert health["applier"]["notifications"] >= len(delivered)
        assert health["applier"]["risk_runs"] >= 1

        def raised() -> set[str]:
            rows = _rows(db, "SELECT alert_key FROM analytics.alert_outbox")
            return {r[0] for r in rows}

        def delivered_alerts() -> set[str]:
            return {b["idempotency_key"] for b in desk.bodies("/desk")}

        assert raised(), "moving the clock 6 hours raised no alert: the check below is empty"
        _within(20, lambda: raised() <= delivered_alerts(), "every raised alert delivered")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        sb.delete_webhook(hook["id"])
        desk.close()
        log.close()
        print((tmp_path / "receiver.log").read_text())  # shown when the test fails
    lines = (tmp_path / "receiver.log").read_text().splitlines()
    batches = [line for line in lines if "notifications:" in line]
    assert batches and all("containers changed" in line for line in batches), lines
    assert "Traceback" not in "\n".join(lines)


def _notification(k: int, container_id: str) -> bytes:
    doc = orjson.loads(
        (FIXTURES / "terminal49" / "webhooks" / "container.updated.json").read_bytes()
    )
    doc = copy.deepcopy(doc)
    doc["data"]["id"] = f"held-{k}"
    doc["data"]["attributes"]["created_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return orjson.dumps(doc)


def test_a_held_warehouse_delays_the_apply_never_the_acknowledgement(
    loaded: Path, tmp_path: Path
) -> None:
    db, inbox = _copy(loaded, tmp_path), tmp_path / "inbox.sqlite"
    port = _free_port()

    def start() -> tuple[Any, str]:
        return start_receiver_process(SECRET, inbox, port=port, duckdb=db)

    def stored() -> set[str]:
        return {
            r[0]
            for r in _rows(db, "SELECT id FROM terminal49.webhook_notifications")
            if r[0].startswith("held-")
        }

    proc, url = start()
    try:
        with writer_lock(db, "load"):  # another writer is publishing, for as long as it takes
            for k in range(40):
                body = _notification(k, "")
                started = time.monotonic()
                assert post(url, body, sign(body, SECRET)).status_code == 200
                assert time.monotonic() - started < 1.0  # at once, not after the apply
            time.sleep(2)
            assert stored() == set()
            assert _health(url)["backlog"] == 40
            # killed between store and apply: what it acknowledged stays in the inbox
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            proc, url = start()
            assert _health(url)["backlog"] == 40
        _within(10, lambda: len(stored()) == 40, "the held notifications applied")
        assert _health(url)["backlog"] == 0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
