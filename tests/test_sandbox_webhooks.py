"""Sandbox webhooks over real HTTP: registration, signed deliveries with retries, examples,
trigger, notifications emitted on advance (shaped like the captured examples), the blast
endpoint with injected faults. Also the hold-name fix of the generator.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import T49

from sandbox import refdata as R
from sandbox.model import Account
from sandbox.process import SandboxProcess
from sandbox.receiver import WebhookReceiver

pytestmark = pytest.mark.sandbox

EXAMPLES = T49 / "webhooks"
CLOCK = "2026-11-20T12:00:00Z"
CONTAINER_EXAMPLES = sorted(
    p.stem for p in EXAMPLES.glob("*.json") if not p.stem.startswith("document.")
)


def example(name: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((EXAMPLES / f"{name}.json").read_text())
    return out


class Flaky:
    """Answers 500 to the first ``fails`` deliveries of each notification id, then 200."""

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.seen: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, path: str, headers: dict[str, str], body: bytes) -> int:
        if path != "/flaky":
            return 200
        nid = json.loads(body)["data"]["id"]
        with self.lock:
            self.seen[nid] += 1
            return 500 if self.seen[nid] <= self.fails else 200


@pytest.fixture(scope="module")
def flaky() -> Flaky:
    return Flaky(2)


@pytest.fixture(scope="module")
def rx(flaky: Flaky) -> Iterator[WebhookReceiver]:
    with WebhookReceiver(flaky) as r:
        yield r


@pytest.fixture(scope="module")
def sb() -> Iterator[SandboxProcess]:
    # A process: the blasts deliver hundreds of notifications at once to receivers in this
    # process; a server on a thread shares their GIL, and delivers more slowly.
    with SandboxProcess(
        containers=300,
        seed=11,
        clock=CLOCK,
        webhook_backoff=0.05,
        document_delay=0,
        emails_per_day=0,
    ) as proc:
        yield proc


def same_shape(got: dict[str, Any], ref: dict[str, Any]) -> None:
    """Top-level keys, data keys, attribute and relationship keys as in the reference example
    (``included`` always sent; one captured example lacks it); every included type of the
    reference (but ``vessel``) present."""
    assert set(got) - {"links"} == {"data", "included"}
    assert set(ref) - {"links"} <= set(got)
    assert set(got["data"]) == set(ref["data"])
    assert set(got["data"]["attributes"]) == set(ref["data"]["attributes"])
    assert set(got["data"]["relationships"]) == set(ref["data"]["relationships"])
    got_types = {r["type"] for r in got.get("included", [])}
    assert {r["type"] for r in ref.get("included", [])} - {"vessel"} <= got_types
    ref_obj = got["data"]["relationships"].get("reference_object")
    if ref_obj is not None:
        ident = ref_obj["data"]
        assert any(r["id"] == ident["id"] and r["type"] == ident["type"] for r in got["included"])


def test_register_list_get_patch_delete(sb: SandboxProcess) -> None:
    hook = sb.register_webhook("http://127.0.0.1:9/x", events=["container.updated"])
    assert hook["type"] == "webhook"
    assert len(hook["attributes"]["secret"]) >= 32
    assert hook["attributes"]["events"] == ["container.updated"]
    c = sb.client
    listed = c.get(f"{sb.base_url}/webhooks").json()
    assert hook["id"] in [h["id"] for h in listed["data"]]
    assert listed["meta"]["total"] == len(listed["data"])
    r = c.patch(
        f"{sb.base_url}/webhooks/{hook['id']}",
        json={"data": {"type": "webhook", "attributes": {"active": False}}},
    )
    assert r.status_code == 200 and r.json()["data"]["attributes"]["active"] is False
    bad = c.post(
        f"{sb.base_url}/webhooks",
        json={
            "data": {
                "type": "webhook",
                "attributes": {"url": "http://127.0.0.1:9/x", "events": ["no.such.event"]},
            }
        },
    )
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["source"]["pointer"] == "/data/attributes/events"
    assert (
        c.post(
            f"{sb.base_url}/webhooks",
            json={"data": {"type": "webhook", "attributes": {"url": "not a url"}}},
        ).status_code
        == 422
    )
    assert c.delete(f"{sb.base_url}/webhooks/{hook['id']}").status_code == 200
    assert c.get(f"{sb.base_url}/webhooks/{hook['id']}").status_code == 404
    assert httpx.get(f"{sb.base_url}/webhooks").status_code == 401


def test_examples_and_trigger(sb: SandboxProcess, rx: WebhookReceiver) -> None:
    c = sb.client
    r = c.get(f"{sb.base_url}/webhook_notifications/examples")
    assert r.status_code == 400
    assert r.json()["errors"][0]["source"]["parameter"] == "event"
    for name in [p.stem for p in EXAMPLES.glob("*.json")]:
        got = c.get(f"{sb.base_url}/webhook_notifications/examples", params={"event": name})
        assert got.status_code == 200, name
        body = got.json()
        assert body["data"]["attributes"]["event"] == name
        assert "examples?event=" in body["links"]["self"]
        same_shape(body, example(name))
    n0 = len(rx.requests)
    res = c.post(
        f"{sb.base_url}/webhooks/trigger",
        json={"url": rx.url("/trigger"), "event": "container.transport.full_out", "secret": "s3"},
    )
    assert res.status_code == 200
    out = res.json()
    assert out["succeeded"] is True and out["status_code"] == 200 and out["error"] is None
    got_req = rx.requests[n0]
    assert got_req.path == "/trigger"
    assert got_req.headers["User-Agent"] == "Terminal49 Webhook Bot"
    assert (
        got_req.headers["X-T49-Webhook-Signature"]
        == hmac.new(b"s3", got_req.body, hashlib.sha256).hexdigest()
    )
    assert out["request_body"].encode() == got_req.body
    missing = c.post(f"{sb.base_url}/webhooks/trigger", json={"event": "container.updated"})
    assert missing.status_code == 422
    assert missing.json()["errors"][0]["detail"] == "url is required"


def test_advance_emits_signed_retried_shaped(
    sb: SandboxProcess, rx: WebhookReceiver, flaky: Flaky
) -> None:
    hook = sb.register_webhook(rx.url("/flaky"))
    secret = hook["attributes"]["secret"].encode()
    before = {n["id"] for n in sb.deliveries()}
    sb.advance(hours=12)
    settled = sb.deliver_pending(timeout=20)
    assert settled["settled"] is True
    notes = [n for n in sb.deliveries() if n["id"] not in before and n["webhook_id"] == hook["id"]]
    assert len(notes) >= 5
    events = Counter(n["attributes"]["event"] for n in notes)
    assert any(e.startswith("container.transport.") for e in events)
    assert "container.updated" in events
    # Every notification took exactly 3 attempts (two 500s, then 200) and succeeded.
    assert {n["attributes"]["delivery_status"] for n in notes} == {"succeeded"}
    assert {n["meta"]["attempts"] for n in notes} == {3}
    ids = [n["id"] for n in notes]
    assert len(set(ids)) == len(ids)
    assert all(flaky.seen[i] == 3 for i in ids)
    # Deliveries: signed, headers, body identical on each attempt.
    by_id: dict[str, set[bytes]] = {}
    for req in rx.requests:
        if req.path != "/flaky":
            continue
        assert req.headers["Content-Type"] == "application/json"
        assert req.headers["User-Agent"] == "Terminal49 Webhook Bot"
        assert (
            req.headers["X-T49-Webhook-Signature"]
            == hmac.new(secret, req.body, hashlib.sha256).hexdigest()
        )
        by_id.setdefault(json.loads(req.body)["data"]["id"], set()).add(req.body)
    assert all(len(by_id[i]) == 1 for i in ids)
    # Shapes like the captured examples; changesets and LFD values.
    for n in notes:
        body = json.loads(n["body"])
        ev = body["data"]["attributes"]["event"]
        assert body["data"]["attributes"]["delivery_status"] == "pending"
        ref_name = (
            ev
            if ev in CONTAINER_EXAMPLES
            else (
                "container.pickup_lfd.changed"
                if ev.startswith("container.pickup_lfd")
                else "container.transport.full_out"
            )
        )
        same_shape(body, example(ref_name))
        ref = body["data"]["relationships"]["reference_object"]["data"]
        obj = next(r for r in body["included"] if r["id"] == ref["id"])
        if ev == "container.updated":
            assert obj["type"] == "container_updated_event"
            assert obj["attributes"]["changeset"]
            for k, pair in obj["attributes"]["changeset"].items():
                assert isinstance(pair, list) and len(pair) == 2 and pair[0] != pair[1], k
        else:
            assert obj["type"] == "transport_event" and obj["attributes"]["event"] == ev
        if ev.startswith("container.pickup_lfd"):
            assert len(obj["attributes"]["value"]) == 10
    listed = sb.client.get(
        f"{sb.base_url}/webhook_notifications", params={"page[size]": 100}
    ).json()
    assert listed["meta"]["total"] == len(sb.deliveries())
    assert {"attempts", "last_status_code"} <= set(listed["data"][0]["meta"])
    sb.delete_webhook(hook["id"])


def test_failed_after_retries() -> None:
    with (
        WebhookReceiver(lambda p, h, b: 503) as rx,
        SandboxProcess(
            containers=60,
            seed=5,
            clock=CLOCK,
            webhook_backoff=0.01,
            document_delay=0,
            emails_per_day=0,
            extra_args=["--webhook-max-retries", "2"],
        ) as sb,
    ):
        sb.register_webhook(rx.url(), events=["container.updated"])
        body = sb.client.post(
            f"{sb.base_url}/webhooks/trigger",
            json={"url": rx.url("/t"), "event": "container.updated"},
        ).json()
        assert body["succeeded"] is False and body["status_code"] == 503
        assert "X-T49-Webhook-Signature" not in body["request_headers"]
        sb.advance(hours=48)
        assert sb.deliver_pending(timeout=20)["settled"]
        notes = sb.deliveries()
        assert notes
        assert {n["attributes"]["delivery_status"] for n in notes} == {"failed"}
        assert {n["meta"]["attempts"] for n in notes} == {3}
        assert {n["meta"]["last_status_code"] for n in notes} == {503}


def test_new_shipments_emit_tracking_request_and_eta(
    sb: SandboxProcess, rx: WebhookReceiver
) -> None:
    hook = sb.register_webhook(
        rx.url("/tr"), events=["tracking_request.succeeded", "shipment.estimated.arrival"]
    )
    out = sb.advance(hours=96)
    assert out["new_containers"] > 0
    assert sb.deliver_pending(timeout=20)["settled"]
    notes = [n for n in sb.deliveries() if n["webhook_id"] == hook["id"]]
    events = Counter(n["attributes"]["event"] for n in notes)
    assert events["tracking_request.succeeded"] >= 1
    for n in notes:
        same_shape(json.loads(n["body"]), example(n["attributes"]["event"]))
    sb.delete_webhook(hook["id"])


def test_blast_fault_mix(sb: SandboxProcess) -> None:
    stored: dict[str, bytes] = {}
    rejected: Counter[str] = Counter()
    dupes = Counter[str]()
    lock = threading.Lock()
    secret: list[bytes] = []

    def receive(path: str, headers: dict[str, str], body: bytes) -> int:
        sig = headers.get("X-T49-Webhook-Signature", "")
        if not hmac.compare_digest(sig, hmac.new(secret[0], body, hashlib.sha256).hexdigest()):
            with lock:
                rejected["signature"] += 1
            return 401
        try:
            nid = json.loads(body)["data"]["id"]
        except (ValueError, KeyError, TypeError):
            with lock:
                rejected["malformed"] += 1
            return 400
        with lock:
            if nid in stored:
                dupes[nid] += 1
            else:
                stored[nid] = body
        return 200

    with WebhookReceiver(receive) as rx:
        hook = sb.register_webhook(rx.url("/blast"))
        secret.append(hook["attributes"]["secret"].encode())
        rep = sb.blast(
            count=1000,
            duplicates=0.10,
            bad_signature=0.05,
            malformed=0.02,
            seed=7,
            webhook_id=hook["id"],
        )
        sb.delete_webhook(hook["id"])
    assert rep["count"] == 1000 and rep["deliveries"] == 1170
    assert rep["by_kind"] == {"valid": 1000, "duplicate": 100, "bad_signature": 50, "malformed": 20}
    assert len(set(rep["valid_ids"])) == 1000
    assert set(stored) == set(rep["valid_ids"])
    assert sum(dupes.values()) == len(rep["duplicate_ids"]) == 100
    assert set(rep["duplicate_ids"]) <= set(rep["valid_ids"])
    assert rejected == {"signature": 50, "malformed": 20}
    assert not set(rep["bad_signature_ids"]) & set(stored)
    assert not set(rep["malformed_ids"]) & set(stored)
    assert len(rep["results"]) == 1170 and rep["status_codes"]["200"] == 1100
    one = json.loads(next(iter(stored.values())))
    assert set(one) == {"data", "included"}
    assert one["data"]["relationships"]["webhook"]["data"]["id"] == hook["id"]


def test_hold_names_distinct_per_container() -> None:
    acct = Account.generate(4000, 3, 1_790_000_000)
    other = R.HOLD_NAMES.index("other")
    both = 0
    for i in range(len(acct.container_ids)):
        h1, h2 = acct.containers.get(i, "h1_kind"), acct.containers.get(i, "h2_kind")
        if h1 >= 0 and h2 >= 0:
            both += 1
            assert h1 != h2 or h1 == other
    assert both > 20
