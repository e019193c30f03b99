"""Webhook delivery of the sandbox: registrations, notifications, signed POSTs with retries.

A :class:`WebhookHub` lives in the server's event loop. :meth:`WebhookHub.emit` creates one
``webhook_notification`` per active webhook subscribed to the event (the notification's
``data.id`` is the idempotency key) and queues it; a background task (:meth:`WebhookHub.run`)
POSTs due notifications with ``httpx.AsyncClient``, at most ``concurrency`` at a time. What the
notifications say is built by :mod:`sandbox.webhook_events`.

Delivery contract (as Terminal49's): ``POST`` of the raw JSON body with ``Content-Type:
application/json``, ``User-Agent: Terminal49 Webhook Bot`` and ``X-T49-Webhook-Signature`` =
lowercase hex HMAC-SHA256 of the raw body keyed with the webhook's secret, plus the webhook's own
``headers``. 200/201/202/204 is success; any other status, a transport error or a timeout is
retried up to ``max_retries`` times (so at most ``max_retries + 1`` attempts), the k-th retry
``backoff * min(2**(k-1), 64)`` seconds after the previous attempt. Then the notification is
``failed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import hmac
import random
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from sandbox.model import derive_uuid
from sandbox.webhook_events import EVENTS, Builder, Occurrence, Resource, body_of, rand_below

if TYPE_CHECKING:
    import httpx

SUCCESS = frozenset({200, 201, 202, 204})
USER_AGENT = "Terminal49 Webhook Bot"
SIGNATURE_HEADER = "X-T49-Webhook-Signature"


def sign(secret: str, body: bytes) -> str:
    """``X-T49-Webhook-Signature``: lowercase hex HMAC-SHA256 of ``body`` keyed with ``secret``."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass
class Webhook:
    """A registered endpoint."""

    id: str
    url: str
    events: list[str]
    active: bool
    secret: str
    headers: list[dict[str, str]]
    created_at: str

    def resource(self) -> Resource:
        """The ``webhook`` resource (with ``secret``, as the API returns it)."""
        return {
            "id": self.id,
            "type": "webhook",
            "attributes": {
                "url": self.url,
                "active": self.active,
                "events": list(self.events),
                "secret": self.secret,
                "headers": self.headers or None,
                "created_at": self.created_at,
            },
        }


@dataclass
class Notification:
    """One notification for one webhook: its body, delivery state and attempt log."""

    id: str
    event: str
    webhook_id: str
    created_at: str
    data: Resource  # ``data`` of the body as delivered (delivery_status "pending")
    body: bytes
    reference: Resource | None  # the reference object resource (for include=reference_object)
    status: str = "pending"
    attempts: int = 0
    last_status_code: int | None = None
    last_error: str | None = None
    last_attempt_at: str | None = None
    next_attempt_at: str | None = None
    in_flight: bool = False
    sent_at: float | None = None  # wall clock (epoch seconds) when the first POST began
    seconds: float | None = None  # from the first POST's start to its answer

    def resource(self) -> Resource:
        """The notification as ``GET /webhook_notifications`` lists it (current status).

        ``meta`` carries the delivery bookkeeping: ``attempts``, ``last_status_code``,
        ``last_error``, ``last_attempt_at`` and ``next_attempt_at`` (wall-clock ISO, UTC).
        """
        data = dict(self.data)
        data["attributes"] = {**self.data["attributes"], "delivery_status": self.status}
        data["meta"] = {
            "attempts": self.attempts,
            "last_status_code": self.last_status_code,
            "last_error": self.last_error,
            "last_attempt_at": self.last_attempt_at,
            "next_attempt_at": self.next_attempt_at,
        }
        return data

    def truth(self) -> dict[str, Any]:
        """Ground-truth record: resource plus the exact body bytes delivered (as text), and the
        first attempt's ``sent_at`` (epoch seconds) and ``seconds`` (until its answer)."""
        return {
            **self.resource(),
            "webhook_id": self.webhook_id,
            "body": self.body.decode(),
            "sent_at": self.sent_at,
            "seconds": self.seconds,
        }


@dataclass
class DeliveryResult:
    """What one HTTP attempt gave."""

    status_code: int | None
    error: str | None
    response_headers: dict[str, str] | None = None
    response_body: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the status counts as success (200/201/202/204)."""
        return self.status_code in SUCCESS


@dataclass
class WebhookHub:
    """Registered webhooks, their notifications, the delivery queue and its worker.

    All methods run on the server's event loop thread; ``emit`` is synchronous (queues only).
    """

    seed: int
    backoff: float = 60.0  # seconds before the first retry; doubles per retry (capped x64)
    max_retries: int = 12
    timeout: float = 10.0  # seconds per delivery attempt
    concurrency: int = 20
    webhooks: dict[str, Webhook] = field(default_factory=dict)
    notifications: dict[str, Notification] = field(default_factory=dict)
    emitted: Counter[str] = field(default_factory=Counter)
    _heap: list[tuple[float, int, str]] = field(default_factory=list)
    _seq: int = 0
    _counter: int = 0
    _blasts: int = 0
    _wake: asyncio.Event | None = None
    _idle: asyncio.Event | None = None
    _inflight: int = 0
    _client: httpx.AsyncClient | None = None
    _task: asyncio.Task[None] | None = None

    # ---- registration ------------------------------------------------------------------------
    def register(
        self,
        url: str,
        events: list[str] | None,
        active: bool,
        created_at: str,
        headers: list[dict[str, str]] | None = None,
    ) -> Webhook:
        """Add a webhook (``events`` None = every event); returns it with a fresh secret."""
        wid = derive_uuid(self.seed, "webhook", f"{len(self.webhooks)}:{secrets.token_hex(4)}")
        hook = Webhook(
            wid,
            url,
            list(events) if events else list(EVENTS),
            active,
            secrets.token_hex(32),
            list(headers or []),
            created_at,
        )
        self.webhooks[wid] = hook
        return hook

    def wanted(self) -> frozenset[str]:
        """Events some active webhook subscribes to."""
        return frozenset(e for h in self.webhooks.values() if h.active for e in h.events)

    # ---- notifications -------------------------------------------------------------------------
    def _next_id(self) -> str:
        self._counter += 1
        return derive_uuid(self.seed, "webhook_notification", self._counter)

    def emit(self, occ: Occurrence, delay: float = 0.0) -> list[str]:
        """Create and queue one notification per active webhook subscribed to ``occ.event``,
        its first attempt ``delay`` seconds from now."""
        ids = []
        self.emitted[occ.event] += 1
        for hook in self.webhooks.values():
            if not hook.active or occ.event not in hook.events:
                continue
            nid = self._next_id()
            data = occ.envelope(nid, hook.id)
            body = orjson.dumps(body_of(data, occ.included))
            note = Notification(nid, occ.event, hook.id, occ.created_at, data, body, occ.reference)
            self.notifications[nid] = note
            self._schedule(note, delay)
            ids.append(nid)
        return ids

    def _schedule(self, note: Notification, delay: float) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time.monotonic() + delay, self._seq, note.id))
        note.next_attempt_at = _wall_iso(delay)
        if self._wake is not None:
            self._wake.set()

    def pending(self) -> int:
        """Notifications not yet succeeded or failed."""
        return sum(1 for n in self.notifications.values() if n.status == "pending")

    def summary(self) -> dict[str, Any]:
        """Counts by delivery status and by event."""
        by_status = Counter(n.status for n in self.notifications.values())
        return {
            "notifications": len(self.notifications),
            "by_status": dict(by_status),
            "in_flight": self._inflight,
            "emitted": dict(self.emitted),
        }

    # ---- delivery --------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the worker (call inside the running loop); the HTTP client is made by the
        first delivery (most sandboxes never send one, and httpx takes a tenth of a second
        to import)."""
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._task = asyncio.create_task(self.run())

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(
                timeout=self.timeout,
                follow_redirects=False,
                limits=httpx.Limits(
                    max_connections=max(self.concurrency, 20) * 2,
                    max_keepalive_connections=max(self.concurrency, 20),
                ),
            )
        return self._client

    async def stop(self) -> None:
        """Stop the worker and close the client."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._client is not None:
            await self._client.aclose()

    async def post(
        self,
        url: str,
        body: bytes,
        signature: str | None,
        extra: list[dict[str, str]] | None = None,
    ) -> DeliveryResult:
        """One POST of ``body`` to ``url`` with the delivery headers; never raises."""
        import httpx

        client = self._http()
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
        if signature is not None:
            headers[SIGNATURE_HEADER] = signature
        for h in extra or []:
            headers[str(h.get("name"))] = str(h.get("value"))
        try:
            resp = await client.post(url, content=body, headers=headers)
        except httpx.TimeoutException:
            return DeliveryResult(None, "timeout")
        except httpx.HTTPError as e:
            return DeliveryResult(None, f"{type(e).__name__}: {e}"[:300])
        return DeliveryResult(
            resp.status_code,
            None if resp.status_code in SUCCESS else f"HTTP {resp.status_code}",
            dict(resp.headers),
            resp.text[:2000],
        )

    async def run(self) -> None:
        """Worker: attempt every due notification, ``concurrency`` at a time, forever."""
        assert self._wake is not None and self._idle is not None
        sem = asyncio.Semaphore(self.concurrency)
        tasks: set[asyncio.Task[None]] = set()
        while True:
            now = time.monotonic()
            while self._heap and self._heap[0][0] <= now:
                _, _, nid = heapq.heappop(self._heap)
                note = self.notifications.get(nid)
                if note is None or note.status != "pending" or note.in_flight:
                    continue
                note.in_flight = True
                self._inflight += 1
                await sem.acquire()
                task = asyncio.create_task(self._attempt(note, sem))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if self._inflight == 0:
                self._idle.set()
            self._wake.clear()
            delay = self._heap[0][0] - time.monotonic() if self._heap else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=delay)

    async def _attempt(self, note: Notification, sem: asyncio.Semaphore) -> None:
        try:
            hook = self.webhooks.get(note.webhook_id)
            if hook is None:
                note.status, note.last_error = "failed", "webhook deleted"
                note.next_attempt_at = None
                return
            sent_at, began = time.time(), time.monotonic()
            res = await self.post(hook.url, note.body, sign(hook.secret, note.body), hook.headers)
            if note.sent_at is None:
                note.sent_at, note.seconds = sent_at, round(time.monotonic() - began, 4)
            note.attempts += 1
            note.last_status_code, note.last_error = res.status_code, res.error
            note.last_attempt_at = _wall_iso(0.0)
            if res.ok:
                note.status, note.next_attempt_at = "succeeded", None
            elif note.attempts > self.max_retries:
                note.status, note.next_attempt_at = "failed", None
            else:
                note.in_flight = False
                self._schedule(note, self.retry_delay(note.attempts))
        finally:
            note.in_flight = False
            self._inflight -= 1
            sem.release()
            if self._wake is not None:
                self._wake.set()

    def retry_delay(self, attempts: int) -> float:
        """Seconds before the retry that follows attempt number ``attempts`` (1-based)."""
        return self.backoff * min(2 ** (attempts - 1), 64)

    async def flush(self, timeout: float, due_only: bool) -> bool:
        """Wait until nothing is in flight and no attempt is due (``due_only``) or until no
        notification is pending at all; False on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            if due_only:
                done = self._inflight == 0 and not any(
                    d <= now and self.notifications[n].status == "pending" for d, _, n in self._heap
                )
            else:
                done = self._inflight == 0 and self.pending() == 0
            if done:
                return True
            if now >= deadline:
                return False
            await asyncio.sleep(0.01)

    # ---- blast -------------------------------------------------------------------------------
    async def blast(
        self,
        builder: Builder,
        hook: Webhook,
        count: int,
        duplicates: float,
        bad_signature: float,
        malformed: float,
        seed: int,
        concurrency: int,
    ) -> dict[str, Any]:
        """Deliver ``count`` valid notifications plus injected faults to ``hook`` once each.

        Injected deliveries (exact counts, ``round(count * rate)``): ``duplicates`` re-send the
        exact body and signature of an already listed valid notification (always after its first
        delivery in send order; concurrent sending may still overlap them); ``bad_signature``
        send a fresh notification (id never sent validly) with a wrong, missing or mismatched
        signature; ``malformed`` send a correctly signed body that is not a usable notification
        (truncated JSON, not JSON, JSON without ``data.id``, a JSON array). No retries; blast
        notifications are not listed by ``/webhook_notifications``. Returns the exact report
        (each result with ``sent_at``, the POST's start in epoch seconds, and ``seconds``, the
        time to its answer).
        """
        self._blasts += 1
        rng = random.Random(f"{self.seed}:blast:{seed}")
        kind_tag = f"blast:{seed}:{self._blasts}"
        seq = 0

        def make() -> tuple[str, bytes]:
            nonlocal seq
            seq += 1
            nid = derive_uuid(self.seed, kind_tag, seq)
            occ = builder.random_occurrence(rng)
            return nid, orjson.dumps(body_of(occ.envelope(nid, hook.id), occ.included))

        plan: list[dict[str, Any]] = []
        valid: list[tuple[str, bytes]] = [make() for _ in range(count)]
        for nid, body in valid:
            plan.append(
                {"id": nid, "kind": "valid", "body": body, "signature": sign(hook.secret, body)}
            )
        n_dup = round(count * duplicates) if count else 0
        n_bad = round(count * bad_signature)
        n_mal = round(count * malformed)
        for _ in range(n_dup):
            k = rand_below(rng, len(plan))
            while plan[k]["kind"] != "valid":
                k = rand_below(rng, len(plan))
            src = plan[k]
            pos = k + 1 + rand_below(rng, len(plan) - k)
            plan.insert(pos, {**src, "kind": "duplicate"})
        bad_kinds = ("wrong_secret", "missing", "mismatched")
        mal_kinds = ("truncated", "not_json", "missing_id", "array")
        extra: list[dict[str, Any]] = []
        for k in range(n_bad):
            nid, body = make()
            how = bad_kinds[k % 3]
            sig: str | None = (
                sign("not-" + hook.secret, body)
                if how == "wrong_secret"
                else None
                if how == "missing"
                else sign(hook.secret, body + b" ")
            )
            extra.append(
                {"id": nid, "kind": "bad_signature", "how": how, "body": body, "signature": sig}
            )
        for k in range(n_mal):
            nid, body = make()
            how = mal_kinds[k % 4]
            if how == "truncated":
                body = body[: max(10, len(body) // 2)]
            elif how == "not_json":
                body = b"<html><body>502 Bad Gateway " + nid.encode() + b"</body></html>"
            elif how == "missing_id":
                doc = orjson.loads(body)
                del doc["data"]["id"]
                doc["data"]["attributes"].pop("id", None)
                body = orjson.dumps(doc)
            else:
                body = orjson.dumps([orjson.loads(body)["data"]])
            extra.append(
                {
                    "id": nid,
                    "kind": "malformed",
                    "how": how,
                    "body": body,
                    "signature": sign(hook.secret, body),
                }
            )
        for item in extra:
            plan.insert(rand_below(rng, len(plan) + 1), item)

        sem = asyncio.Semaphore(max(1, concurrency))
        results: list[dict[str, Any]] = [{} for _ in plan]
        started = time.monotonic()

        async def one(k: int, item: dict[str, Any]) -> None:
            async with sem:
                sent_at, began = time.time(), time.monotonic()
                res = await self.post(hook.url, item["body"], item["signature"], hook.headers)
                seconds = time.monotonic() - began
            results[k] = {
                "seq": k,
                "id": item["id"],
                "kind": item["kind"],
                "how": item.get("how"),
                "status_code": res.status_code,
                "error": res.error,
                "sent_at": sent_at,  # wall clock (epoch seconds) when the POST began
                "seconds": round(seconds, 4),  # until its answer
            }

        await asyncio.gather(*(one(k, item) for k, item in enumerate(plan)))
        codes = Counter(str(r["status_code"]) for r in results)
        return {
            "webhook_id": hook.id,
            "url": hook.url,
            "count": count,
            "deliveries": len(plan),
            "valid_ids": [nid for nid, _ in valid],
            "duplicate_ids": [p["id"] for p in plan if p["kind"] == "duplicate"],
            "bad_signature_ids": [p["id"] for p in plan if p["kind"] == "bad_signature"],
            "malformed_ids": [p["id"] for p in plan if p["kind"] == "malformed"],
            "malformed": [
                {"id": p["id"], "how": p["how"]} for p in plan if p["kind"] == "malformed"
            ],
            "by_kind": dict(Counter(p["kind"] for p in plan)),
            "status_codes": dict(codes),
            "results": results,
            "seconds": round(time.monotonic() - started, 3),
        }


def _wall_iso(delay: float) -> str:
    ts = time.time() + delay
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"
