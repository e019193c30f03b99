"""What the sandbox's webhooks announce: event names and notification bodies.

:class:`Builder` turns the account into :class:`Occurrence` objects (an event name, its
reference object and the ``included`` resources): :meth:`Builder.changes` gives what an advance
of the account clock emits, as a real account would: transport milestones,
``container.pickup_lfd*.changed``, ``container.updated`` (changeset of the alertable fields),
``tracking_request.succeeded`` and ``shipment.estimated.arrival`` for new shipments;
:meth:`Builder.sample` gives a realistic example of any event. :func:`envelope` and
:func:`body_of` shape the notification body like the captured examples in
``shared/reference/terminal49/webhooks``. Delivery lives in :mod:`sandbox.webhook_hub`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from sandbox import refdata as R
from sandbox import world as W
from sandbox.model import Account, derive_uuid, sub_id
from sandbox.render import Renderer, iso

Resource = dict[str, Any]

EVENTS: tuple[str, ...] = (
    "container.transport.vessel_arrived",
    "container.transport.estimated.vessel_arrived",
    "container.transport.vessel_discharged",
    "container.transport.vessel_loaded",
    "container.transport.vessel_departed",
    "container.transport.estimated.vessel_departed",
    "container.transport.rail_departed",
    "container.transport.rail_arrived",
    "container.transport.rail_loaded",
    "container.transport.rail_unloaded",
    "container.transport.transshipment_arrived",
    "container.transport.transshipment_discharged",
    "container.transport.transshipment_loaded",
    "container.transport.transshipment_departed",
    "container.transport.feeder_arrived",
    "container.transport.feeder_discharged",
    "container.transport.feeder_loaded",
    "container.transport.feeder_departed",
    "container.transport.empty_out",
    "container.transport.full_in",
    "container.transport.full_out",
    "container.transport.empty_in",
    "container.transport.vessel_berthed",
    "shipment.estimated.arrival",
    "tracking_request.succeeded",
    "tracking_request.failed",
    "tracking_request.awaiting_manifest",
    "tracking_request.tracking_stopped",
    "container.created",
    "container.updated",
    "container.pod_terminal_changed",
    "container.transport.arrived_at_inland_destination",
    "container.transport.estimated.arrived_at_inland_destination",
    "container.pickup_lfd.changed",
    "container.pickup_lfd_line.changed",
    "container.pickup_lfd_terminal.changed",
    "container.pickup_lfd_rail.changed",
    "container.pickup_appointment.changed",
    "container.transport.available",
    "container.transport.not_available",
    "container.transport.delivered",
    "document.extracted",
    "document.extraction_failed",
)
EVENT_SET = frozenset(EVENTS)
DOCUMENT_EVENT_VERSION = "2026-03-10"
# container_updated_event changesets carry these attributes (openapi container_updated_event).
ALERT_FIELDS: tuple[str, ...] = (
    "available_for_pickup",
    "pickup_lfd",
    "fees_at_pod_terminal",
    "holds_at_pod_terminal",
    "pickup_appointment_at",
)
LFD_VARIANTS: tuple[tuple[str, str], ...] = (
    ("pickup_lfd_line", "container.pickup_lfd_line.changed"),
    ("pickup_lfd_terminal", "container.pickup_lfd_terminal.changed"),
    ("pickup_lfd_rail", "container.pickup_lfd_rail.changed"),
)


def ident(rid: str, rtype: str) -> dict[str, str]:
    """A JSON:API resource identifier."""
    return {"id": rid, "type": rtype}


def envelope(
    nid: str,
    event: str,
    created_at: str,
    webhook_id: str | None,
    reference: dict[str, str] | None,
    document_id: str | None = None,
) -> Resource:
    """``data`` of a notification body, shaped like the captured examples.

    Document events carry ``version`` and a ``document`` relationship (no webhook relationship);
    every other event carries ``reference_object``, ``webhook`` and ``webhook_notification_logs``.
    """
    if document_id is not None:
        return {
            "id": nid,
            "type": "webhook_notification",
            "attributes": {
                "event": event,
                "delivery_status": "pending",
                "created_at": created_at,
                "version": DOCUMENT_EVENT_VERSION,
            },
            "relationships": {"document": {"data": ident(document_id, "document")}},
        }
    return {
        "id": nid,
        "type": "webhook_notification",
        "attributes": {
            "id": nid,
            "event": event,
            "delivery_status": "pending",
            "created_at": created_at,
        },
        "relationships": {
            "reference_object": {"data": reference},
            "webhook": {"data": ident(webhook_id, "webhook") if webhook_id else None},
            "webhook_notification_logs": {"data": []},
        },
    }


@dataclass
class Occurrence:
    """Something that happened: an event name, its reference object and the ``included``."""

    event: str
    created_at: str
    reference: Resource | None  # reference object resource (None for document events)
    included: list[Resource]
    document_id: str | None = None

    def envelope(self, nid: str, webhook_id: str | None) -> Resource:
        """``data`` of the notification ``nid`` announcing this occurrence to ``webhook_id``."""
        ref = (
            ident(self.reference["id"], self.reference["type"])
            if self.reference is not None
            else None
        )
        return envelope(nid, self.event, self.created_at, webhook_id, ref, self.document_id)


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
            terminal: dict[str, str] | None = ident(self.r.rail_ids[s["dest"]], "rail_terminal")
        else:
            code, tz = port["attributes"]["code"], port["attributes"]["time_zone"]
            loc_id = port["id"]
            terminal = ident(term["id"], "terminal")
        ev = {
            "id": derive_uuid(a.seed, "lfd_event", f"{cid}:{event}:{when}"),
            "type": "transport_event",
            "attributes": {
                "event": event,
                "created_at": iso(when),
                "voyage_number": None,
                "timestamp": iso(when),
                "data_source": "terminal" if "terminal" in event else "shipping_line",
                "invalidated_at": None,
                "location_locode": code,
                "timezone": tz,
                "value": value,
            },
            "relationships": {
                "shipment": {"data": ident(a.shipment_ids[c["ship"]], "shipment")},
                "container": {"data": ident(cid, "container")},
                "vessel": {"data": None},
                "source_event": {"data": None},
                "previous_version": {"data": None},
                "location": {"data": ident(loc_id, "port")},
                "terminal": {"data": terminal},
            },
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
            "attributes": {
                "changeset": changeset,
                "timestamp": iso(when),
                "data_source": "terminal",
                "timezone": port["attributes"]["time_zone"],
            },
            "relationships": {
                "container": {"data": ident(cid, "container")},
                "terminal": {"data": ident(term["id"], "terminal")},
                "shipment": {"data": ident(a.shipment_ids[ship], "shipment")},
            },
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
            "id": tr_id,
            "type": "tracking_request",
            "attributes": {
                "request_number": sa["bill_of_lading_number"],
                "request_type": "bill_of_lading",
                "scac": sa["shipping_line_scac"],
                "ref_numbers": sa["ref_numbers"] or [],
                "shipment_tags": sa["tags"],
                "created_at": iso(created - 3600),
                "updated_at": iso(created),
                "status": "created",
                "failed_reason": None,
                "is_retrying": False,
                "retry_count": None,
            },
            "relationships": {
                "tracked_object": {"data": ident(ship["id"], "shipment")},
                "customer": {"data": None},
                "user": {"data": None},
            },
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
            "attributes": {
                "created_at": iso(when),
                "estimated_timestamp": sa["pod_eta_at"],
                "voyage_number": sa["pod_voyage_number"],
                "event": "shipment.estimated.arrival",
                "location_locode": sa["port_of_discharge_locode"],
                "data_source": "shipping_line",
                "timezone": sa["pod_timezone"],
            },
            "relationships": {
                "shipment": {"data": ident(ship["id"], "shipment")},
                "port": {"data": ident(pod["id"], "port")},
                "vessel": {
                    "data": ident(
                        derive_uuid(a.seed, "vessel", f"{row['carrier']}:{row['vessel']}"), "vessel"
                    )
                },
            },
        }
        return Occurrence("shipment.estimated.arrival", iso(a.clock), ev, [ship, pod, ev])

    # ---- what an advance emits -------------------------------------------------------------
    def changes(
        self, old: int, changed: list[int], new_idx: list[int], wanted: frozenset[str]
    ) -> list[Occurrence]:
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
            ind_tz = (
                R.INLAND[a.shipments.get(c["ship"], "dest")].time_zone
                if c["mode"] == W.MODE_RAIL
                else None
            )
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
            return self.tracking_request(rand_below(rng, len(a.shipment_ids)))
        if event == "shipment.estimated.arrival":
            for _ in range(200):
                occ = self.estimated_arrival(rand_below(rng, len(a.shipment_ids)), a.clock)
                if occ is not None:
                    return occ
            s = rand_below(rng, len(a.shipment_ids))
            ship = self.r.shipment(s)
            occ2 = self.tracking_request(s)
            occ2.event = event
            occ2.included = [ship]
            return occ2
        if event == "container.updated":
            i = rand_below(rng, n)
            attrs = self.r.container(i)["attributes"]
            key = ALERT_FIELDS[rand_below(rng, len(ALERT_FIELDS))]
            cur = attrs[key]
            was: Any = (
                not cur if isinstance(cur, bool) else [] if isinstance(cur, list) and cur else None
            )
            if was == cur:
                was, cur = None, iso(a.clock)
                key = "pickup_lfd" if attrs["pickup_lfd"] is None else key
            return self.container_updated(i, {key: [was, cur]}, a.clock)
        for key, ev_name in LFD_VARIANTS:
            if event == ev_name:
                i = rand_below(rng, n)
                val = self.r.container(i)["attributes"]["import_deadlines"][key]
                day = (val or iso(a.clock + 4 * W.DAY))[:10]
                return self.lfd_variant(i, event, day, a.clock)
        start = rand_below(rng, n)
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
            i = rand_below(rng, n)
            evs = self.r.transport_events(i)
            if evs:
                return self.transport(i, evs[rand_below(rng, len(evs))])
            return self.sample("container.updated", rng)
        if x < 0.85:
            return self.sample("container.updated", rng)
        if x < 0.93:
            return self.sample("container.pickup_lfd_terminal.changed", rng)
        if x < 0.97:
            return self.sample("tracking_request.succeeded", rng)
        return self.sample("shipment.estimated.arrival", rng)


def rand_below(rng: random.Random, n: int) -> int:
    """An index in ``range(n)`` from one ``rng.random()`` draw (the sandbox's seeded picks)."""
    return int(rng.random() * n)


def body_of(
    data: Resource, included: list[Resource], links: dict[str, str] | None = None
) -> dict[str, Any]:
    """A notification body: ``data``, optional ``links``, ``included``."""
    out: dict[str, Any] = {"data": data}
    if links is not None:
        out["links"] = links
    out["included"] = included
    return out
