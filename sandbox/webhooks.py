"""Webhooks of the sandbox: registrations, notifications, signed deliveries with retries.

A :class:`WebhookHub` lives in the server's event loop. :meth:`WebhookHub.emit` creates one
``webhook_notification`` per active webhook subscribed to the event (the notification's
``data.id`` is the idempotency key) and queues it; a background task (:meth:`WebhookHub.run`)
POSTs due notifications with ``httpx.AsyncClient``, at most ``concurrency`` at a time.

Delivery contract (as Terminal49's): ``POST`` of the raw JSON body with ``Content-Type:
application/json``, ``User-Agent: Terminal49 Webhook Bot`` and ``X-T49-Webhook-Signature`` =
lowercase hex HMAC-SHA256 of the raw body keyed with the webhook's secret, plus the webhook's own
``headers``. 200/201/202/204 is success; any other status, a transport error or a timeout is
retried up to ``max_retries`` times (so at most ``max_retries + 1`` attempts), the k-th retry
``backoff * min(2**(k-1), 64)`` seconds after the previous attempt. Then the notification is
``failed``.

:class:`ChangeEmitter` turns an advance of the account clock into the notifications a real
account would get: transport milestones, ``container.pickup_lfd*.changed``,
``container.updated`` (changeset of the alertable fields), ``tracking_request.succeeded`` and
``shipment.estimated.arrival`` for new shipments. Bodies are shaped like the captured examples
in ``shared/reference/terminal49/webhooks``.
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
from typing import Any

import httpx
import orjson

from sandbox import refdata as R
from sandbox import world as W
from sandbox.model import Account, derive_uuid, sub_id
from sandbox.render import Renderer, iso

Resource = dict[str, Any]

EVENTS: tuple[str, ...] = (
    "container.transport.vessel_arrived", "container.transport.estimated.vessel_arrived",
    "container.transport.vessel_discharged", "container.transport.vessel_loaded",
    "container.transport.vessel_departed", "container.transport.estimated.vessel_departed",
    "container.transport.rail_departed", "container.transport.rail_arrived",
    "container.transport.rail_loaded", "container.transport.rail_unloaded",
    "container.transport.transshipment_arrived", "container.transport.transshipment_discharged",
    "container.transport.transshipment_loaded", "container.transport.transshipment_departed",
    "container.transport.feeder_arrived", "container.transport.feeder_discharged",
    "container.transport.feeder_loaded", "container.transport.feeder_departed",
    "container.transport.empty_out", "container.transport.full_in",
    "container.transport.full_out", "container.transport.empty_in",
    "container.transport.vessel_berthed", "shipment.estimated.arrival",
    "tracking_request.succeeded", "tracking_request.failed",
    "tracking_request.awaiting_manifest", "tracking_request.tracking_stopped",
    "container.created", "container.updated", "container.pod_terminal_changed",
    "container.transport.arrived_at_inland_destination",
    "container.transport.estimated.arrived_at_inland_destination",
    "container.pickup_lfd.changed", "container.pickup_lfd_line.changed",
    "container.pickup_lfd_terminal.changed", "container.pickup_lfd_rail.changed",
    "container.pickup_appointment.changed", "container.transport.available",
    "container.transport.not_available", "container.transport.delivered",
    "document.extracted", "document.extraction_failed",
)
EVENT_SET = frozenset(EVENTS)
SUCCESS = frozenset({200, 201, 202, 204})
USER_AGENT = "Terminal49 Webhook Bot"
SIGNATURE_HEADER = "X-T49-Webhook-Signature"
DOCUMENT_EVENT_VERSION = "2026-03-10"
# container_updated_event changesets carry these attributes (openapi container_updated_event).
ALERT_FIELDS: tuple[str, ...] = ("available_for_pickup", "pickup_lfd", "fees_at_pod_terminal",
                                 "holds_at_pod_terminal", "pickup_appointment_at")
LFD_VARIANTS: tuple[tuple[str, str], ...] = (
    ("pickup_lfd_line", "container.pickup_lfd_line.changed"),
    ("pickup_lfd_terminal", "container.pickup_lfd_terminal.changed"),
    ("pickup_lfd_rail", "container.pickup_lfd_rail.changed"),
)


def sign(secret: str, body: bytes) -> str:
    """``X-T49-Webhook-Signature``: lowercase hex HMAC-SHA256 of ``body`` keyed with ``secret``."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _ident(rid: str, rtype: str) -> dict[str, str]:
    return {"id": rid, "type": rtype}


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
        return {"id": self.id, "type": "webhook", "attributes": {
            "url": self.url, "active": self.active, "events": list(self.events),
            "secret": self.secret, "headers": self.headers or None,
            "created_at": self.created_at}}


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

    def resource(self) -> Resource:
        """The notification as ``GET /webhook_notifications`` lists it (current status).

        ``meta`` carries the delivery bookkeeping: ``attempts``, ``last_status_code``,
        ``last_error``, ``last_attempt_at`` and ``next_attempt_at`` (wall-clock ISO, UTC).
        """
        data = dict(self.data)
        data["attributes"] = {**self.data["attributes"], "delivery_status": self.status}
        data["meta"] = {"attempts": self.attempts, "last_status_code": self.last_status_code,
                        "last_error": self.last_error, "last_attempt_at": self.last_attempt_at,
                        "next_attempt_at": self.next_attempt_at}
        return data

    def truth(self) -> dict[str, Any]:
        """Ground-truth record: resource plus the exact body bytes delivered (as text)."""
        return {**self.resource(), "webhook_id": self.webhook_id, "body": self.body.decode()}


def envelope(nid: str, event: str, created_at: str, webhook_id: str | None,
             reference: dict[str, str] | None, document_id: str | None = None) -> Resource:
    """``data`` of a notification body, shaped like the captured examples.

    Document events carry ``version`` and a ``document`` relationship (no webhook relationship);
    every other event carries ``reference_object``, ``webhook`` and ``webhook_notification_logs``.
    """
    if document_id is not None:
        return {"id": nid, "type": "webhook_notification",
                "attributes": {"event": event, "delivery_status": "pending",
                               "created_at": created_at, "version": DOCUMENT_EVENT_VERSION},
                "relationships": {"document": {"data": _ident(document_id, "document")}}}
    return {"id": nid, "type": "webhook_notification",
            "attributes": {"id": nid, "event": event, "delivery_status": "pending",
                           "created_at": created_at},
            "relationships": {
                "reference_object": {"data": reference},
                "webhook": {"data": _ident(webhook_id, "webhook") if webhook_id else None},
                "webhook_notification_logs": {"data": []}}}


@dataclass
class Occurrence:
    """Something that happened: an event name, its reference object and the ``included``."""

    event: str
    created_at: str
    reference: Resource | None  # reference object resource (None for document events)
    included: list[Resource]
    document_id: str | None = None


def _alert_subset(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: attrs.get(k) for k in ALERT_FIELDS}


class Builder:
    """Builds :class:`Occurrence` objects from the account (at its current clock)."""

    def __init__(self, account: Account, renderer: Renderer) -> None:
        self.a = account
        self.r = renderer
        self._ports = {p["id"]: p for p in renderer.ports()}
        self._terms = {t["id"]: t for t in renderer.terminals()}

    def _pod(self, i: int) -> tuple[Resource, Resource]:
        term = self.a.containers.get(i, "term")
        t = self.r.terminals()[term]
        return self._ports[t["relationships"]["port"]["data"]["id"]], t

    def transport(self, i: int, ev: Resource, event: str | None = None) -> Occurrence:
        """A transport-event notification (``ev`` a rendered transport_event)."""
        ship = self.a.containers.get(i, "ship")
        rel = ev["relationships"]
        inc: list[Resource] = [self.r.shipment(ship), self.r.container(i)]
        loc = rel["location"]["data"]
        if loc and loc["id"] in self._ports:
            inc.append(self._ports[loc["id"]])
        pod_term = self._pod(i)[1]
        inc.append(pod_term)  # the captured examples always carry the POD terminal
        term = rel["terminal"]["data"]
        if term and term["id"] in self._terms and term["id"] != pod_term["id"]:
            inc.append(self._terms[term["id"]])
        inc.append(ev)
        return Occurrence(event or ev["attributes"]["event"], iso(self.a.clock), ev, inc)

    def lfd_variant(self, i: int, event: str, value: str, when: int) -> Occurrence:
        """``container.pickup_lfd_{line,terminal,rail}.changed``: a synthetic transport_event
        whose ``value`` is the new date (``YYYY-MM-DD``)."""
        a = self.a
        cid = a.container_ids[i]
        c = a.crow(i)
        port, term = self._pod(i)
        rail = event.endswith("_rail.changed") and c["mode"] == W.MODE_RAIL
        s = a.srow(c["ship"])
        if rail:
            ind = R.INLAND[s["dest"]]
            code, tz = ind.code, ind.time_zone
            loc_id = self.r.port_ids[code]
            terminal: dict[str, str] | None = _ident(self.r.rail_ids[s["dest"]], "rail_terminal")
        else:
            code, tz = port["attributes"]["code"], port["attributes"]["time_zone"]
            loc_id = port["id"]
            terminal = _ident(term["id"], "terminal")
        ev = {
            "id": derive_uuid(a.seed, "lfd_event", f"{cid}:{event}:{when}"),
            "type": "transport_event",
            "attributes": {"event": event, "created_at": iso(when), "voyage_number": None,
                           "timestamp": iso(when),
                           "data_source": "terminal" if "terminal" in event else "shipping_line",
                           "invalidated_at": None, "location_locode": code, "timezone": tz,
                           "value": value},
            "relationships": {
                "shipment": {"data": _ident(a.shipment_ids[c["ship"]], "shipment")},
                "container": {"data": _ident(cid, "container")},
                "vessel": {"data": None}, "source_event": {"data": None},
                "previous_version": {"data": None},
                "location": {"data": _ident(loc_id, "port")},
                "terminal": {"data": terminal}},
        }
        return self.transport(i, ev)

    def container_updated(self, i: int, changeset: dict[str, list[Any]], when: int) -> Occurrence:
        """``container.updated`` with a ``container_updated_event`` reference object."""
        a = self.a
        cid = a.container_ids[i]
        ship = a.containers.get(i, "ship")
        port, term = self._pod(i)
        ev = {
            "id": derive_uuid(a.seed, "container_updated_event", f"{cid}:{when}"),
            "type": "container_updated_event",
            "attributes": {"changeset": changeset, "timestamp": iso(when),
                           "data_source": "terminal",
                           "timezone": port["attributes"]["time_zone"]},
            "relationships": {
                "container": {"data": _ident(cid, "container")},
                "terminal": {"data": _ident(term["id"], "terminal")},
                "shipment": {"data": _ident(a.shipment_ids[ship], "shipment")}},
        }
        inc = [self.r.shipment(ship), port, term, self.r.container(i), ev]
        return Occurrence("container.updated", iso(a.clock), ev, inc)

    def tracking_request(self, s: int) -> Occurrence:
        """``tracking_request.succeeded`` for shipment ``s`` (containers, shipment, request)."""
        a = self.a
        ship = self.r.shipment(s)
        sa = ship["attributes"]
        created = a.shipments.get(s, "created")
        tr_id = derive_uuid(a.seed, "tracking_request", s)
        tr = {
            "id": tr_id, "type": "tracking_request",
            "attributes": {
                "request_number": sa["bill_of_lading_number"], "request_type": "bill_of_lading",
                "scac": sa["shipping_line_scac"], "ref_numbers": sa["ref_numbers"] or [],
                "shipment_tags": sa["tags"], "created_at": iso(created - 3600),
                "updated_at": iso(created), "status": "created", "failed_reason": None,
                "is_retrying": False, "retry_count": None},
            "relationships": {"tracked_object": {"data": _ident(ship["id"], "shipment")},
                              "customer": {"data": None}, "user": {"data": None}},
            "links": {"self": f"/v2/tracking_requests/{tr_id}"},
        }
        first, n = a.shipments.get(s, "first"), a.shipments.get(s, "n")
        inc = [self.r.container(j) for j in range(first, first + n)] + [ship, tr]
        return Occurrence("tracking_request.succeeded", iso(a.clock), tr, inc)

    def estimated_arrival(self, s: int, when: int) -> Occurrence | None:
        """``shipment.estimated.arrival`` (None when the shipment has no ETA any more)."""
        a = self.a
        ship = self.r.shipment(s)
        sa = ship["attributes"]
        if sa["pod_eta_at"] is None:
            return None
        pod = self._ports[ship["relationships"]["port_of_discharge"]["data"]["id"]]
        row = a.srow(s)
        ev = {
            "id": derive_uuid(a.seed, "estimated_event", f"{s}:{when}"),
            "type": "estimated_event",
            "attributes": {"created_at": iso(when), "estimated_timestamp": sa["pod_eta_at"],
                           "voyage_number": sa["pod_voyage_number"],
                           "event": "shipment.estimated.arrival",
                           "location_locode": sa["port_of_discharge_locode"],
                           "data_source": "shipping_line", "timezone": sa["pod_timezone"]},
            "relationships": {
                "shipment": {"data": _ident(ship["id"], "shipment")},
                "port": {"data": _ident(pod["id"], "port")},
                "vessel": {"data": _ident(derive_uuid(
                    a.seed, "vessel", f"{row['carrier']}:{row['vessel']}"), "vessel")}},
        }
        return Occurrence("shipment.estimated.arrival", iso(a.clock), ev, [ship, pod, ev])

    # ---- what an advance emits -------------------------------------------------------------
    def changes(self, old: int, changed: list[int], new_idx: list[int],
                wanted: frozenset[str]) -> list[Occurrence]:
        """Occurrences between clock ``old`` and the account's clock, limited to ``wanted``.

        Per changed container: every transport event that became visible (milestones and the
        coalesced ``container.pickup_lfd.changed``), ``container.pickup_lfd_{line,terminal,
        rail}.changed`` for each changed non-null import deadline, and one
        ``container.updated`` when an alertable attribute changed. Per new shipment:
        ``tracking_request.succeeded`` then ``shipment.estimated.arrival``.
        """
        a = self.a
        new = a.clock
        out: list[Occurrence] = []
        want_updated = "container.updated" in wanted
        want_lfd = any(e in wanted for _, e in LFD_VARIANTS)
        for i in changed:
            c = a.crow(i)
            cid = a.container_ids[i]
            term = c["term"]
            pod_tz = self.r._pod_tz[term]
            ind_tz = (R.INLAND[a.shipments.get(c["ship"], "dest")].time_zone
                      if c["mode"] == W.MODE_RAIL else None)
            before = {e.slot for e in W.events(c, old, pod_tz, ind_tz)}
            old_ids = {sub_id(cid, slot) for slot in before}
            for ev in self.r.transport_events(i):
                name = ev["attributes"]["event"]
                if ev["id"] not in old_ids and name in wanted:
                    out.append(self.transport(i, ev))
            if not (want_updated or want_lfd):
                continue
            a.clock = old
            try:
                prev = self.r.container(i)["attributes"]
            finally:
                a.clock = new
            cur = self.r.container(i)["attributes"]
            if want_lfd:
                for key, event in LFD_VARIANTS:
                    was, now = prev["import_deadlines"][key], cur["import_deadlines"][key]
                    if now is not None and was != now and event in wanted:
                        out.append(self.lfd_variant(i, event, now[:10], new))
            if want_updated:
                p, q = _alert_subset(prev), _alert_subset(cur)
                changeset = {k: [p[k], q[k]] for k in ALERT_FIELDS if p[k] != q[k]}
                if changeset:
                    out.append(self.container_updated(i, changeset, new))
        ships = sorted({a.containers.get(i, "ship") for i in new_idx})
        for s in ships:
            if "tracking_request.succeeded" in wanted:
                out.append(self.tracking_request(s))
            if "shipment.estimated.arrival" in wanted:
                occ = self.estimated_arrival(s, new)
                if occ is not None:
                    out.append(occ)
        return out

    # ---- samples ---------------------------------------------------------------------------
    def sample(self, event: str, rng: random.Random) -> Occurrence:
        """A realistic occurrence of ``event`` from the current account (any container event
        name; falls back to a synthetic transport event when no container shows it)."""
        a = self.a
        n = len(a.container_ids)
        if n == 0:
            raise ValueError("the account has no containers")
        if event == "tracking_request.succeeded":
            return self.tracking_request(_rand(rng, len(a.shipment_ids)))
        if event == "shipment.estimated.arrival":
            for _ in range(200):
                occ = self.estimated_arrival(_rand(rng, len(a.shipment_ids)), a.clock)
                if occ is not None:
                    return occ
            s = _rand(rng, len(a.shipment_ids))
            ship = self.r.shipment(s)
            occ2 = self.tracking_request(s)
            occ2.event = event
            occ2.included = [ship]
            return occ2
        if event == "container.updated":
            i = _rand(rng, n)
            attrs = self.r.container(i)["attributes"]
            key = ALERT_FIELDS[_rand(rng, len(ALERT_FIELDS))]
            cur = attrs[key]
            was: Any = (not cur if isinstance(cur, bool) else
                        [] if isinstance(cur, list) and cur else None)
            if was == cur:
                was, cur = None, iso(a.clock)
                key = "pickup_lfd" if attrs["pickup_lfd"] is None else key
            return self.container_updated(i, {key: [was, cur]}, a.clock)
        for key, ev_name in LFD_VARIANTS:
            if event == ev_name:
                i = _rand(rng, n)
                val = self.r.container(i)["attributes"]["import_deadlines"][key]
                day = (val or iso(a.clock + 4 * W.DAY))[:10]
                return self.lfd_variant(i, event, day, a.clock)
        start = _rand(rng, n)
        for k in range(min(n, 400)):
            i = (start + k * 7919) % n
            for ev in self.r.transport_events(i):
                if ev["attributes"]["event"] == event:
                    return self.transport(i, ev)
        i = start
        evs = self.r.transport_events(i)
        if evs:
            ev = {**evs[-1], "attributes": {**evs[-1]["attributes"], "event": event}}
            return self.transport(i, ev)
        return self.lfd_variant(i, event, iso(a.clock)[:10], a.clock)

    def random_occurrence(self, rng: random.Random) -> Occurrence:
        """A random realistic container/shipment occurrence (for blasts)."""
        x = rng.random()
        n = len(self.a.container_ids)
        if x < 0.7:
            i = _rand(rng, n)
            evs = self.r.transport_events(i)
            if evs:
                return self.transport(i, evs[_rand(rng, len(evs))])
            return self.sample("container.updated", rng)
        if x < 0.85:
            return self.sample("container.updated", rng)
        if x < 0.93:
            return self.sample("container.pickup_lfd_terminal.changed", rng)
        if x < 0.97:
            return self.sample("tracking_request.succeeded", rng)
        return self.sample("shipment.estimated.arrival", rng)


def _rand(rng: random.Random, n: int) -> int:
    return int(rng.random() * n)


def body_of(data: Resource, included: list[Resource], links: dict[str, str] | None = None
            ) -> dict[str, Any]:
    """A notification body: ``data``, optional ``links``, ``included``."""
    out: dict[str, Any] = {"data": data}
    if links is not None:
        out["links"] = links
    out["included"] = included
    return out


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
    def register(self, url: str, events: list[str] | None, active: bool, created_at: str,
                 headers: list[dict[str, str]] | None = None) -> Webhook:
        """Add a webhook (``events`` None = every event); returns it with a fresh secret."""
        wid = derive_uuid(self.seed, "webhook", f"{len(self.webhooks)}:{secrets.token_hex(4)}")
        hook = Webhook(wid, url, list(events) if events else list(EVENTS), active,
                       secrets.token_hex(32), list(headers or []), created_at)
        self.webhooks[wid] = hook
        return hook

    def wanted(self) -> frozenset[str]:
        """Events some active webhook subscribes to."""
        return frozenset(e for h in self.webhooks.values() if h.active for e in h.events)

    # ---- notifications -------------------------------------------------------------------------
    def _next_id(self) -> str:
        self._counter += 1
        return derive_uuid(self.seed, "webhook_notification", self._counter)

    def emit(self, occ: Occurrence) -> list[str]:
        """Create and queue one notification per active webhook subscribed to ``occ.event``."""
        ids = []
        self.emitted[occ.event] += 1
        for hook in self.webhooks.values():
            if not hook.active or occ.event not in hook.events:
                continue
            nid = self._next_id()
            ref = (_ident(occ.reference["id"], occ.reference["type"])
                   if occ.reference is not None else None)
            data = envelope(nid, occ.event, occ.created_at, hook.id, ref, occ.document_id)
            body = orjson.dumps(body_of(data, occ.included))
            note = Notification(nid, occ.event, hook.id, occ.created_at, data, body,
                                occ.reference)
            self.notifications[nid] = note
            self._schedule(note, 0.0)
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
        return {"notifications": len(self.notifications), "by_status": dict(by_status),
                "in_flight": self._inflight, "emitted": dict(self.emitted)}

    # ---- delivery --------------------------------------------------------------------------
    async def start(self) -> None:
        """Create the HTTP client and start the worker (call inside the running loop)."""
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._client = httpx.AsyncClient(
            timeout=self.timeout, follow_redirects=False,
            limits=httpx.Limits(max_connections=max(self.concurrency, 20) * 2,
                                max_keepalive_connections=max(self.concurrency, 20)))
        self._task = asyncio.create_task(self.run())

    async def stop(self) -> None:
        """Stop the worker and close the client."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._client is not None:
            await self._client.aclose()

    async def post(self, url: str, body: bytes, signature: str | None,
                   extra: list[dict[str, str]] | None = None) -> DeliveryResult:
        """One POST of ``body`` to ``url`` with the delivery headers; never raises."""
        assert self._client is not None
        headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
        if signature is not None:
            headers[SIGNATURE_HEADER] = signature
        for h in extra or []:
            headers[str(h.get("name"))] = str(h.get("value"))
        try:
            resp = await self._client.post(url, content=body, headers=headers)
        except httpx.TimeoutException:
            return DeliveryResult(None, "timeout")
        except httpx.HTTPError as e:
            return DeliveryResult(None, f"{type(e).__name__}: {e}"[:300])
        return DeliveryResult(resp.status_code, None if resp.status_code in SUCCESS else
                              f"HTTP {resp.status_code}", dict(resp.headers),
                              resp.text[:2000])

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
            res = await self.post(hook.url, note.body, sign(hook.secret, note.body),
                                  hook.headers)
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
                    d <= now and self.notifications[n].status == "pending"
                    for d, _, n in self._heap)
            else:
                done = self._inflight == 0 and self.pending() == 0
            if done:
                return True
            if now >= deadline:
                return False
            await asyncio.sleep(0.01)

    # ---- blast -------------------------------------------------------------------------------
    async def blast(self, builder: Builder, hook: Webhook, count: int, duplicates: float,
                    bad_signature: float, malformed: float, seed: int,
                    concurrency: int) -> dict[str, Any]:
        """Deliver ``count`` valid notifications plus injected faults to ``hook`` once each.

        Injected deliveries (exact counts, ``round(count * rate)``): ``duplicates`` re-send the
        exact body and signature of an already listed valid notification (always after its first
        delivery in send order; concurrent sending may still overlap them); ``bad_signature``
        send a fresh notification (id never sent validly) with a wrong, missing or mismatched
        signature; ``malformed`` send a correctly signed body that is not a usable notification
        (truncated JSON, not JSON, JSON without ``data.id``, a JSON array). No retries; blast
        notifications are not listed by ``/webhook_notifications``. Returns the exact report.
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
            ref = (_ident(occ.reference["id"], occ.reference["type"])
                   if occ.reference is not None else None)
            data = envelope(nid, occ.event, occ.created_at, hook.id, ref, occ.document_id)
            return nid, orjson.dumps(body_of(data, occ.included))

        plan: list[dict[str, Any]] = []
        valid: list[tuple[str, bytes]] = [make() for _ in range(count)]
        for nid, body in valid:
            plan.append({"id": nid, "kind": "valid", "body": body,
                         "signature": sign(hook.secret, body)})
        n_dup = round(count * duplicates) if count else 0
        n_bad = round(count * bad_signature)
        n_mal = round(count * malformed)
        for _ in range(n_dup):
            k = _rand(rng, len(plan))
            while plan[k]["kind"] != "valid":
                k = _rand(rng, len(plan))
            src = plan[k]
            pos = k + 1 + _rand(rng, len(plan) - k)
            plan.insert(pos, {**src, "kind": "duplicate"})
        bad_kinds = ("wrong_secret", "missing", "mismatched")
        mal_kinds = ("truncated", "not_json", "missing_id", "array")
        extra: list[dict[str, Any]] = []
        for k in range(n_bad):
            nid, body = make()
            how = bad_kinds[k % 3]
            sig: str | None = (sign("not-" + hook.secret, body) if how == "wrong_secret" else
                               None if how == "missing" else sign(hook.secret, body + b" "))
            extra.append({"id": nid, "kind": "bad_signature", "how": how, "body": body,
                          "signature": sig})
        for k in range(n_mal):
            nid, body = make()
            how = mal_kinds[k % 4]
            if how == "truncated":
                body = body[:max(10, len(body) // 2)]
            elif how == "not_json":
                body = b"<html><body>502 Bad Gateway " + nid.encode() + b"</body></html>"
            elif how == "missing_id":
                doc = orjson.loads(body)
                del doc["data"]["id"]
                doc["data"]["attributes"].pop("id", None)
                body = orjson.dumps(doc)
            else:
                body = orjson.dumps([orjson.loads(body)["data"]])
            extra.append({"id": nid, "kind": "malformed", "how": how, "body": body,
                          "signature": sign(hook.secret, body)})
        for item in extra:
            plan.insert(_rand(rng, len(plan) + 1), item)

        sem = asyncio.Semaphore(max(1, concurrency))
        results: list[dict[str, Any]] = [{} for _ in plan]
        started = time.monotonic()

        async def one(k: int, item: dict[str, Any]) -> None:
            async with sem:
                res = await self.post(hook.url, item["body"], item["signature"], hook.headers)
            results[k] = {"seq": k, "id": item["id"], "kind": item["kind"],
                          "how": item.get("how"), "status_code": res.status_code,
                          "error": res.error}

        await asyncio.gather(*(one(k, item) for k, item in enumerate(plan)))
        codes = Counter(str(r["status_code"]) for r in results)
        return {
            "webhook_id": hook.id, "url": hook.url, "count": count, "deliveries": len(plan),
            "valid_ids": [nid for nid, _ in valid],
            "duplicate_ids": [p["id"] for p in plan if p["kind"] == "duplicate"],
            "bad_signature_ids": [p["id"] for p in plan if p["kind"] == "bad_signature"],
            "malformed_ids": [p["id"] for p in plan if p["kind"] == "malformed"],
            "malformed": [{"id": p["id"], "how": p["how"]} for p in plan
                          if p["kind"] == "malformed"],
            "by_kind": dict(Counter(p["kind"] for p in plan)),
            "status_codes": dict(codes), "results": results,
            "seconds": round(time.monotonic() - started, 3),
        }


def _wall_iso(delay: float) -> str:
    ts = time.time() + delay
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"


