"""Webhook receiver, inbox and apply, over real HTTP (loopback uvicorn and the sandbox)."""

from __future__ import annotations

import copy
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn

from freetime_cli.webhooks_cmd import start_receiver_process
from pipelines.terminal49.client import Terminal49Client
from pipelines.warehouse import reading
from pipelines.webhooks.apply import apply_inbox
from pipelines.webhooks.inbox import (
    Inbox,
    InboxUnusable,
    MalformedNotification,
    parse_notification,
)
from pipelines.webhooks.receiver import PATH, create_app
from pipelines.webhooks.signing import HEADER, sign, verify
from tests.conftest import T49, reference_json

SECRET = "test-secret-0123456789"
EXAMPLES = sorted((T49 / "webhooks").glob("*.json"))


class Receiver:
    """The receiver app under uvicorn in a thread, on a pre-bound loopback socket."""

    def __init__(self, secret: str, inbox: Path, port: int = 0) -> None:
        self.sock = _bound_socket(port)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}{PATH}"
        self.app = create_app(secret, inbox)
        config = uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> Receiver:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "receiver did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


def post(
    url: str, body: bytes, signature: str | None, client: httpx.Client | None = None
) -> httpx.Response:
    headers = {"Content-Type": "application/json", "User-Agent": "Terminal49 Webhook Bot"}
    if signature is not None:
        headers[HEADER] = signature
    if client is not None:
        return client.post(url, content=body, headers=headers)
    return httpx.post(url, content=body, headers=headers, timeout=10)


@pytest.fixture
def paths(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "w.duckdb", tmp_path / "inbox.sqlite"


def rows(duckdb_path: Path, sql: str) -> list[tuple[Any, ...]]:
    with reading(duckdb_path) as con:
        return con.execute(sql).fetchall()


# -- unit ------------------------------------------------------------------------------------
@pytest.mark.fast
def test_signature_is_hex_hmac_sha256_of_the_raw_body() -> None:
    body = b'{"data":{"id":"x"}}'
    sig = sign(body, SECRET)
    assert sig == sig.lower() and len(sig) == 64
    assert verify(body, SECRET, sig)
    assert verify(body, SECRET, sig.upper())
    assert not verify(body + b" ", SECRET, sig)
    assert not verify(body, "other", sig)
    assert not verify(body, SECRET, None)
    assert not verify(body, SECRET, "")
    assert not verify(body, SECRET, "é" * 64)


@pytest.mark.fast
@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[1]",
        b'{"data": []}',
        b'{"data": {"attributes": {"event": "x"}}}',
        b'{"data": {"id": "a", "attributes": {}}}',
        b'{"data": {"id": "a", "type": "container", "attributes": {"event": "x"}}}',
        b'{"data": {"id": "a", "attributes": {"event": "e"}}, "included": {}}',
    ],
)
def test_malformed_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(MalformedNotification):
        parse_notification(body)


@pytest.mark.fast
def test_inbox_stores_each_id_once(tmp_path: Path) -> None:
    body = (T49 / "webhooks" / "container.updated.json").read_bytes()
    n = parse_notification(body)
    with Inbox(tmp_path / "i.sqlite") as inbox:
        assert inbox.add_many([n, n]) == [True, False]
        assert inbox.add(n) is False
        assert inbox.counts() == {"stored": 1, "pending": 1, "deliveries": 3}


@pytest.mark.fast
def test_applied_notifications_leave_the_inbox_after_the_kept_days(
    paths: tuple[Path, Path],
) -> None:
    """Once applied (the payload is in the warehouse) and the kept days are over, a notification
    leaves the inbox; a redelivery after that is applied again and changes nothing."""
    duckdb_path, inbox_path = paths
    updated = (T49 / "webhooks" / "container.updated.json").read_bytes()
    arrival = (T49 / "webhooks" / "shipment.estimated.arrival.json").read_bytes()
    first, second = parse_notification(updated), parse_notification(arrival)
    with Inbox(inbox_path) as inbox:
        inbox.add_many([first, second])
        inbox.mark_applied([first.id], "2026-01-01T00:00:00+00:00")
        assert inbox.prune("2026-02-01T00:00:00+00:00") == 1
        assert inbox.prune("2026-02-01T00:00:00+00:00") == 0
        assert inbox.get(first.id) is None
        kept = inbox.get(second.id)
        assert kept is not None and kept.body == arrival  # not applied: kept whole
    summary = apply_inbox(duckdb_path, inbox_path)  # applies the second; 7 days are kept
    assert summary.notifications == 1 and summary.pruned == 0
    before = rows(duckdb_path, "select * from terminal49.webhook_notifications order by id")
    assert second.id in {r[0] for r in before}
    summary = apply_inbox(duckdb_path, inbox_path, keep_days=0)
    assert summary.notifications == 0 and summary.pruned == 1
    assert "1 old ones removed from the inbox" in summary.line()
    with Inbox(inbox_path) as inbox:
        assert inbox.counts()["stored"] == 0
        assert inbox.add(second) is True  # a late redelivery: stored and applied again
    summary = apply_inbox(duckdb_path, inbox_path)
    assert summary.notifications == 1
    after = rows(duckdb_path, "select * from terminal49.webhook_notifications order by id")
    assert [r[0] for r in after] == [r[0] for r in before]  # the same notifications, once each


def test_an_inbox_path_that_is_no_inbox_is_one_clear_line(tmp_path: Path) -> None:
    not_sqlite = tmp_path / "notes.txt"
    not_sqlite.write_text("not an inbox")
    with pytest.raises(InboxUnusable, match=r"is a folder; give a file, e\.g\. .*inbox\.sqlite"):
        Inbox(tmp_path)
    with pytest.raises(InboxUnusable, match="cannot open the inbox .*notes.txt: file is not a"):
        Inbox(not_sqlite)
    assert not_sqlite.read_text() == "not an inbox"  # left as it was
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TERMINAL49_", "FREETIME_"))}
    for args in (
        ["apply", "--inbox", str(tmp_path)],
        ["serve", "--inbox", str(not_sqlite), "--secret", "s", "--port", "0"],
    ):
        proc = subprocess.run(
            ["freetime", "webhooks", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith("error: ") and "inbox" in proc.stderr


# -- receiver over HTTP ------------------------------------------------------------------------
def test_receiver_accepts_every_example_and_refuses_bad_deliveries(
    paths: tuple[Path, Path],
) -> None:
    _, inbox_path = paths
    with Receiver(SECRET, inbox_path) as rx:
        for f in EXAMPLES:
            body = f.read_bytes()
            r = post(rx.url, body, sign(body, SECRET))
            assert r.status_code == 200, (f.name, r.text)
            assert r.json()["stored"] is True
            again = post(rx.url, body, sign(body, SECRET))
            assert again.status_code == 200 and again.json()["stored"] is False
        fresh = orjson.loads(EXAMPLES[0].read_bytes())
        fresh["data"]["id"] = "never-stored"
        body = orjson.dumps(fresh)
        assert post(rx.url, body, None).status_code == 401
        assert post(rx.url, body, sign(body, "wrong")).status_code == 401
        assert post(rx.url, body, sign(body + b" ", SECRET)).status_code == 401
        for bad in (b"<html>502</html>", body[: len(body) // 2], b"[]"):
            assert post(rx.url, bad, sign(bad, SECRET)).status_code == 400
        health = httpx.get(rx.url.replace(PATH, "/healthz")).json()
    with Inbox(inbox_path) as inbox:
        assert inbox.ids() == {orjson.loads(f.read_bytes())["data"]["id"] for f in EXAMPLES}
    assert health["stored"] == len(EXAMPLES) and health["duplicates"] == len(EXAMPLES)
    assert health["unauthorized"] == 3 and health["malformed"] == 3


def _refresh_api(loopback: Any) -> Any:
    """A loopback API that knows the one example notification without included resources."""
    container = reference_json("responses/container-with-shipment.json")
    available = orjson.loads((T49 / "webhooks" / "container.transport.available.json").read_bytes())
    nid = available["data"]["id"]
    ref = available["data"]["relationships"]["reference_object"]["data"]
    event = {
        "id": ref["id"],
        "type": "transport_event",
        "attributes": {
            "event": "container.transport.available",
            "timestamp": None,
            "created_at": "2025-02-26T12:51:50Z",
            "invalidated_at": None,
        },
        "relationships": {
            "container": {"data": {"id": container["data"]["id"], "type": "container"}},
            "previous_version": {"data": {"id": "te-0", "type": "transport_event"}},
        },
    }

    def handler(path: str, query: dict[str, str], headers: dict[str, str]) -> Any:
        if path == f"/v2/webhook_notifications/{nid}":
            return 200, {}, orjson.dumps({"data": available["data"], "included": [event]})
        if path == f"/v2/containers/{container['data']['id']}":
            assert query.get("include") == "shipment,pod_terminal,pickup_facility"
            return 200, {}, orjson.dumps(container)
        return 404, {}, b'{"errors":[{"status":"404","title":"Not Found"}]}'

    return loopback(handler), container["data"]["id"]


@pytest.mark.fast
def test_every_example_is_applied_to_its_tables(paths: tuple[Path, Path], loopback: Any) -> None:
    duckdb_path, inbox_path = paths
    with Receiver(SECRET, inbox_path) as rx:
        for f in EXAMPLES:
            body = f.read_bytes()
            assert post(rx.url, body, sign(body, SECRET)).status_code == 200
    api, refreshed_id = _refresh_api(loopback)
    with Terminal49Client(api.base_url, "k", rate_limit_per_minute=None) as client:
        summary = apply_inbox(duckdb_path, inbox_path, client)
    assert summary.notifications == len(EXAMPLES)
    assert summary.unresolved == [] and summary.refreshed == 1
    docs = {f.stem: orjson.loads(f.read_bytes()) for f in EXAMPLES}

    notes = dict(rows(duckdb_path, "select id, event from terminal49.webhook_notifications"))
    assert notes == {d["data"]["id"]: d["data"]["attributes"]["event"] for d in docs.values()}
    containers = {r[0] for r in rows(duckdb_path, "select id from terminal49.containers")}
    for d in docs.values():
        for inc in d.get("included", []):
            if inc["type"] == "container":
                assert inc["id"] in containers
    assert refreshed_id in containers
    shipments = {r[0] for r in rows(duckdb_path, "select id from terminal49.shipments")}
    assert all(
        inc["id"] in shipments
        for d in docs.values()
        for inc in d.get("included", [])
        if inc["type"] == "shipment"
    )
    # container.updated: available_for_pickup false -> true, holds cleared by the changeset
    upd = docs["container.updated"]
    cid = next(i["id"] for i in upd["included"] if i["type"] == "container")
    assert rows(
        duckdb_path, f"select available_for_pickup from terminal49.containers where id = '{cid}'"
    ) == [(True,)]
    assert rows(
        duckdb_path, f"select count(*) from terminal49.container_holds where container_id = '{cid}'"
    ) == [(0,)]
    changes = rows(
        duckdb_path, "select field, current from terminal49.container_changes order by field"
    )
    assert [c[0] for c in changes] == ["available_for_pickup", "holds_at_pod_terminal"]
    # transport events: three carried, one from the refreshed notification (with its chain)
    events = dict(
        rows(duckdb_path, "select event, previous_version_id from terminal49.transport_events")
    )
    assert set(events) == {
        "container.pickup_lfd.changed",
        "container.transport.full_out",
        "container.transport.vessel_discharged",
        "container.transport.available",
    }
    assert events["container.transport.available"] == "te-0"
    cols = {
        r[0]
        for r in rows(
            duckdb_path,
            "select column_name from information_schema.columns"
            " where table_name = 'transport_events'",
        )
    }
    assert {
        "invalidated_at",
        "previous_version_id",
        "container_id",
        "shipment_id",
        "timestamp",
        "timezone",
        "location_locode",
        "voyage_number",
        "data_source",
        "value",
    } <= cols
    # documents, email submission, representation (payload kept as JSON)
    assert rows(duckdb_path, "select name, document_type from terminal49.documents") == [
        ("invoice.pdf", "commercial_invoice")
    ]
    assert rows(duckdb_path, "select subject from terminal49.email_submissions") == [
        ("Invoice #INV-10027",)
    ]
    rep = rows(
        duckdb_path,
        "select document_id, payload->>'invoice_number' from terminal49.document_representations",
    )
    assert rep == [("5ab53a5e-0d68-4a8f-8d3d-1d24555d20cb", "INV-10027")]
    assert rows(duckdb_path, "select count(*) from terminal49.estimated_events") == [(1,)]
    # idempotent: a second apply does nothing new
    again = apply_inbox(duckdb_path, inbox_path)
    assert again.notifications == 0 and again.rows == {}


@pytest.mark.fast
def test_an_older_notification_never_overwrites_a_newer_row(paths: tuple[Path, Path]) -> None:
    duckdb_path, inbox_path = paths
    base = orjson.loads((T49 / "webhooks" / "container.updated.json").read_bytes())
    cid = next(i["id"] for i in base["included"] if i["type"] == "container")

    def variant(nid: str, created: str, available: bool) -> bytes:
        doc = copy.deepcopy(base)
        doc["data"]["id"] = nid
        doc["data"]["attributes"]["created_at"] = created
        for inc in doc["included"]:
            if inc["type"] == "container":
                inc["attributes"]["available_for_pickup"] = available
            if inc["type"] == "container_updated_event":
                inc["attributes"]["changeset"] = {
                    "available_for_pickup": [not available, available]
                }
        return orjson.dumps(doc)

    with Inbox(inbox_path) as inbox:
        inbox.add(parse_notification(variant("n-new", "2022-10-22T00:00:00Z", True)))
        inbox.add(parse_notification(variant("n-old", "2022-10-21T00:00:00Z", False)))
    apply_inbox(duckdb_path, inbox_path)  # same batch: the newer one wins
    sql = f"select available_for_pickup from terminal49.containers where id = '{cid}'"
    assert rows(duckdb_path, sql) == [(True,)]
    with Inbox(inbox_path) as inbox:  # a late delivery of an even older one
        inbox.add(parse_notification(variant("n-older", "2022-10-20T00:00:00Z", False)))
    s = apply_inbox(duckdb_path, inbox_path)
    assert s.notifications == 1 and s.skipped_older >= 1
    assert rows(duckdb_path, sql) == [(True,)]
    with Inbox(inbox_path) as inbox:
        inbox.add(parse_notification(variant("n-newest", "2022-10-23T00:00:00Z", False)))
    apply_inbox(duckdb_path, inbox_path)
    assert rows(duckdb_path, sql) == [(False,)]
    assert rows(duckdb_path, "select count(*) from terminal49.webhook_notifications") == [(4,)]


# -- the sandbox: blast, kill and restart, end to end ----------------------------------------
@pytest.fixture(scope="module")
def sandbox() -> Iterator[Any]:
    # A process: the blast delivers a thousand notifications at once to a receiver in this
    # process; a server on a thread shares its GIL, and delivers more slowly.
    from sandbox.process import SandboxProcess

    with SandboxProcess(
        containers=100, webhook_backoff=0.2, webhook_timeout=5, document_delay=0
    ) as sb:
        yield sb


@pytest.fixture(scope="module")
def loaded(sandbox: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module sandbox's account loaded once, before a test moves its clock: copy it to
    write (each test then applies what its own clock move delivered)."""
    from pipelines.config import ApiSettings
    from pipelines.load import run_load

    path = tmp_path_factory.mktemp("loaded") / "w.duckdb"
    api = ApiSettings.resolve(
        base_url=sandbox.base_url, api_key=sandbox.api_key, rate_limit_per_minute=100_000
    )
    run_load(path, api)
    return path


def _bound_socket(port: int = 0) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    return s


def test_blast_of_1000_with_duplicates_bad_signatures_and_malformed(
    sandbox: Any, paths: tuple[Path, Path]
) -> None:
    _, inbox_path = paths
    placeholder = _bound_socket()
    port = placeholder.getsockname()[1]
    placeholder.close()
    hook = sandbox.register_webhook(
        f"http://127.0.0.1:{port}{PATH}", events=["document.extraction_failed"]
    )
    secret = hook["attributes"]["secret"]
    try:
        rx = Receiver(secret, inbox_path, port)
        with rx:
            report = sandbox.blast(
                count=1000,
                duplicates=0.10,
                bad_signature=0.05,
                malformed=0.02,
                seed=7,
                webhook_id=hook["id"],
            )
    finally:
        sandbox.delete_webhook(hook["id"])
    assert report["by_kind"] == {
        "valid": 1000,
        "duplicate": 100,
        "bad_signature": 50,
        "malformed": 20,
    }
    by_kind: dict[str, set[int]] = {}
    for r in report["results"]:
        by_kind.setdefault(r["kind"], set()).add(r["status_code"])
    assert by_kind == {
        "valid": {200},
        "duplicate": {200},
        "bad_signature": {401},
        "malformed": {400},
    }
    with Inbox(inbox_path) as inbox:
        stored = inbox.ids()
        counts = inbox.counts()
    assert stored == set(report["valid_ids"])
    assert counts["stored"] == 1000 and counts["deliveries"] == 1100


#: Deliveries in the killed receiver's stream: it is killed once 300 are acknowledged, with
#: 16 in flight and most of the stream still to come.
STREAM = 1000


def test_killed_receiver_loses_nothing_it_acknowledged(tmp_path: Path) -> None:
    inbox_path = tmp_path / "inbox.sqlite"
    template = orjson.loads((T49 / "webhooks" / "container.updated.json").read_bytes())

    def start() -> tuple[subprocess.Popen[bytes], str]:
        return start_receiver_process(SECRET, inbox_path)

    acked: set[str] = set()
    lock = threading.Lock()

    http = httpx.Client(timeout=10, limits=httpx.Limits(max_connections=16))

    def deliver(url: str, k: int) -> None:
        doc = copy.deepcopy(template)
        doc["data"]["id"] = f"kill-{k}"
        body = orjson.dumps(doc)
        try:
            r = post(url, body, sign(body, SECRET), http)
        except httpx.HTTPError:
            return
        if r.status_code == 200:
            with lock:
                acked.add(f"kill-{k}")

    proc, url = start()
    try:
        with ThreadPoolExecutor(16) as pool:
            futures = [pool.submit(deliver, url, k) for k in range(STREAM)]
            deadline = time.monotonic() + 60
            while len(acked) < 300:
                assert time.monotonic() < deadline, f"only {len(acked)} acknowledged"
                time.sleep(0.005)
            os.kill(proc.pid, signal.SIGKILL)  # in the middle of the stream
            proc.wait(10)
            for f in futures:
                f.result()
        first = set(acked)
        assert 300 <= len(first) < STREAM
        proc, url = start()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda k: deliver(url, k), range(STREAM)))
    finally:
        http.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(10)
    with Inbox(inbox_path) as inbox:
        stored = inbox.ids()
    assert first <= stored
    assert stored == {f"kill-{k}" for k in range(STREAM)}


def test_sandbox_changes_flow_to_the_warehouse(
    sandbox: Any, loaded: Path, paths: tuple[Path, Path]
) -> None:
    from pipelines.config import ApiSettings

    duckdb_path, inbox_path = paths
    shutil.copyfile(loaded, duckdb_path)
    api = ApiSettings.resolve(
        base_url=sandbox.base_url, api_key=sandbox.api_key, rate_limit_per_minute=100_000
    )
    sock = _bound_socket()
    port = sock.getsockname()[1]
    sock.close()
    hook = sandbox.register_webhook(f"http://127.0.0.1:{port}{PATH}")
    try:
        rx = Receiver(hook["attributes"]["secret"], inbox_path, port)
        with rx:
            advanced = sandbox.advance(hours=72)
            settled = sandbox.deliver_pending(timeout=60)
    finally:
        sandbox.delete_webhook(hook["id"])
    assert settled["settled"]
    assert advanced["changed_containers"]
    with Terminal49Client(api.base_url, api.api_key or "", rate_limit_per_minute=None) as c:
        summary = apply_inbox(duckdb_path, inbox_path, c)
    assert summary.notifications > 0 and not summary.unresolved
    truth = {c["id"]: c for c in sandbox.ground_truth()["containers"]}
    noted = {
        r[0]
        for r in rows(
            duckdb_path,
            "select container_id from "
            "terminal49.webhook_notifications "
            "where container_id is not null",
        )
    }
    assert noted
    got = dict(rows(duckdb_path, "select id, current_status from terminal49.containers"))
    mismatched = [
        cid for cid in noted if got.get(cid) != truth[cid]["attributes"]["current_status"]
    ]
    assert not mismatched, mismatched[:5]


def test_reconcile_finds_notifications_the_receiver_never_got(
    sandbox: Any, loaded: Path, paths: tuple[Path, Path]
) -> None:
    """Nothing listens at the webhook's URL: every delivery fails, and reconciliation through
    ``GET /webhook_notifications`` still brings each notification into the inbox and the
    warehouse, exactly once."""
    from pipelines.config import ApiSettings

    duckdb_path, inbox_path = paths
    shutil.copyfile(loaded, duckdb_path)
    api = ApiSettings.resolve(
        base_url=sandbox.base_url, api_key=sandbox.api_key, rate_limit_per_minute=100_000
    )
    sock = _bound_socket()
    port = sock.getsockname()[1]
    sock.close()  # a port where nothing listens
    before = {n["id"] for n in sandbox.deliveries()}
    hook = sandbox.register_webhook(f"http://127.0.0.1:{port}{PATH}")
    try:
        sandbox.advance(hours=24)
        sandbox.deliver_pending(timeout=30, due_only=True)
        missed = {n["id"] for n in sandbox.deliveries() if n["webhook_id"] == hook["id"]}
    finally:
        sandbox.delete_webhook(hook["id"])
    missed -= before
    assert missed, "the advance emitted nothing: the test proves nothing"
    with Terminal49Client(api.base_url, api.api_key or "", rate_limit_per_minute=None) as c:
        summary = apply_inbox(duckdb_path, inbox_path, c, reconcile=True)
        again = apply_inbox(duckdb_path, inbox_path, c, reconcile=True)
    assert summary.reconciled >= len(missed)
    assert again.notifications == 0
    stored = {r[0] for r in rows(duckdb_path, "select id from terminal49.webhook_notifications")}
    assert missed <= stored
    with Inbox(inbox_path) as inbox:
        assert missed <= inbox.ids() and inbox.pending() == []
