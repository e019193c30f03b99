"""JSON:API rendering of the account at its current clock.

Each ``*_resource`` method returns one resource object (``id``, ``type``, ``attributes``,
``relationships`` and, for shipments, ``links``) with exactly the attribute keys the live API
sends (see the captured responses under ``shared/reference/terminal49/responses``). Dicts are
built on demand from the columns of :class:`sandbox.model.Account`; terminals and ports are
static and cached. :meth:`Renderer.included` resolves ``include`` paths, deduplicated by
(type, id) in first-seen order.
"""

from __future__ import annotations

from typing import Any

from sandbox import refdata as R
from sandbox import world as W
from sandbox.deadlines import lfd_attributes
from sandbox.model import (
    OWNERS,
    TAGS,
    Account,
    derive_uuid,
    imo_number,
    iso6346_check_digit,
    sub_id,
)
from sandbox.world import NEVER, NONE, iso

__all__ = ["CONTAINER_INCLUDES", "EVENT_INCLUDES", "SHIPMENT_INCLUDES", "Renderer", "iso"]

Resource = dict[str, Any]

CONTAINER_INCLUDES = ("shipment", "pod_terminal", "pickup_facility", "transport_events")
SHIPMENT_INCLUDES = (
    "containers",
    "pod_terminal",
    "port_of_lading",
    "port_of_discharge",
    "destination",
    "destination_terminal",
)
EVENT_INCLUDES = ("location", "terminal", "container", "shipment")

_ALL_PORTS: tuple[R.Port, ...] = R.ORIGINS + R.US_PORTS + R.INLAND
_PORT_BY_CODE = {p.code: p for p in _ALL_PORTS}
_CHASSIS = ("APMZ", "TRAC", "DCLZ", "FLXZ", "MCCZ")


def _ident(rid: str, rtype: str) -> dict[str, str]:
    return {"id": rid, "type": rtype}


class Renderer:
    """Renders resources of one account; reads ``account.clock`` at each call."""

    def __init__(self, account: Account) -> None:
        self.a = account
        seed = account.seed
        self.port_ids = {p.code: derive_uuid(seed, "port", p.code) for p in _ALL_PORTS}
        self.terminal_ids = [derive_uuid(seed, "terminal", t.firms_code) for t in R.TERMINALS]
        self.rail_ids = [derive_uuid(seed, "rail_terminal", t.firms_code) for t in R.RAIL_TERMINALS]
        self._terminals = [self._terminal(k) for k in range(len(R.TERMINALS))]
        self._rails = [self._rail_terminal(k) for k in range(len(R.RAIL_TERMINALS))]
        self._ports = {p.code: self._port(p) for p in _ALL_PORTS}
        self._pod_tz = [_PORT_BY_CODE[t.port].time_zone for t in R.TERMINALS]

    # ---- static resources ---------------------------------------------------------------------
    def _terminal(self, k: int) -> Resource:
        t = R.TERMINALS[k]
        tid = self.terminal_ids[k]
        return {
            "id": tid,
            "type": "terminal",
            "attributes": {
                "id": tid,
                "nickname": t.nickname,
                "name": t.name,
                "firms_code": t.firms_code,
                "smdg_code": t.smdg_code,
                "bic_facility_code": None,
                "provided_data": {
                    "pickup_lfd": t.provides_lfd,
                    "pod_full_out_at": True,
                    "pickup_lfd_notes": "",
                    "available_for_pickup": t.provides_availability,
                    "fees_at_pod_terminal": t.provides_fees,
                    "holds_at_pod_terminal": True,
                    "pickup_appointment_at": True,
                    "location_at_pod_terminal": t.provides_availability,
                    "available_for_pickup_notes": "",
                    "fees_at_pod_terminal_notes": "",
                    "holds_at_pod_terminal_notes": "",
                    "pickup_appointment_at_notes": "",
                    "pod_full_out_chassis_number": True,
                    "location_at_pod_terminal_notes": "",
                    "pod_full_out_chassis_number_notes": "",
                },
                "street": t.street,
                "city": t.city,
                "state": t.state,
                "state_abbr": t.state_abbr,
                "zip": t.zip,
                "country": "United States",
                "facility_type": "ocean_terminal",
            },
            "relationships": {"port": {"data": _ident(self.port_ids[t.port], "port")}},
        }

    def _rail_terminal(self, k: int) -> Resource:
        t = R.RAIL_TERMINALS[k]
        rid = self.rail_ids[k]
        return {
            "id": rid,
            "type": "rail_terminal",
            "attributes": {
                "id": rid,
                "name": t.name,
                "nickname": t.nickname,
                "firms_code": t.firms_code,
                "facility_type": "rail_terminal",
            },
            "relationships": {"port": {"data": _ident(self.port_ids[t.port], "port")}},
        }

    def _port(self, p: R.Port) -> Resource:
        pid = self.port_ids[p.code]
        terms = [
            _ident(self.terminal_ids[k], "terminal")
            for k, t in enumerate(R.TERMINALS)
            if t.port == p.code
        ]
        return {
            "id": pid,
            "type": "port",
            "attributes": {
                "id": pid,
                "name": p.name,
                "code": p.code,
                "state_abbr": p.state_abbr,
                "city": p.city,
                "country_code": p.country_code,
                "latitude": p.latitude,
                "longitude": p.longitude,
                "time_zone": p.time_zone,
            },
            "relationships": {"terminals": {"data": terms}},
        }

    def terminals(self) -> list[Resource]:
        """All ocean and rail terminals."""
        return self._terminals + self._rails

    def ports(self) -> list[Resource]:
        """All ports (origins, US ports, inland points)."""
        return list(self._ports.values())

    # ---- containers ------------------------------------------------------------------------
    def container(self, i: int) -> Resource:
        """Container ``i`` as ``GET /containers/{id}`` renders it at the current clock."""
        a = self.a
        t = a.clock
        c = a.crow(i)
        s = a.srow(c["ship"])

        def vis(x: int) -> str | None:
            return iso(x) if x <= t else None

        term = c["term"]
        pod_tz = self._pod_tz[term]
        rail = c["mode"] == W.MODE_RAIL
        dest = s["dest"]
        ind_tz = R.INLAND[dest].time_zone if rail else None
        lfds = lfd_attributes(c, i, t, a.seed, a.pod_since, pod_tz, ind_tz)
        yard = W.in_yard(c, t)
        holds = []
        for h in W.active_holds(c, t):
            name = R.HOLD_NAMES[h.kind]
            desc = None
            if name == "other":
                desc = R.OTHER_HOLD_TEXT[(i + h.slot) % len(R.OTHER_HOLD_TEXT)]
            elif name == "customs":
                desc = R.CUSTOMS_HOLD_TEXT[(i + h.slot) % len(R.CUSTOMS_HOLD_TEXT)]
            holds.append(
                {"name": name, "status": "hold" if h.blocking else "pending", "description": desc}
            )
        teu = 1 if c["elen"] <= 1 else 2
        pod_code = R.TERMINALS[term].port
        fees = [
            {"type": typ, "amount": amt, "currency_code": "USD"}
            for typ, amt in W.fee_lines(c, t, teu, pod_code in R.RAIL_HEAVY)
        ]
        avail_known = c["avail_known"] == 1
        if not avail_known:
            available: bool | None = None
        elif yard:
            available = t >= c["available"] and not W.blocked(c, t)
        else:
            available = False if t >= c["discharged"] else None
        truck = not rail
        full_out = c["full_out"] if truck else NEVER
        arrived_soon = t >= c["ata"] - W.DAY
        ref = c["refreshed"]
        tchk = c["tchk"] if (c["stale"] == W.STALE_FIXED or arrived_soon) else NONE
        if c["stale"] == W.STALE_NULL:
            tchk = NONE
        status = W.status(c, t)
        location = None
        if yard and avail_known:
            location = (
                f"{R.TERMINAL_LOCATIONS[i % len(R.TERMINAL_LOCATIONS)]} - "
                f"{chr(65 + i % 20)}{(i * 7) % 90 + 10:02d}{chr(65 + (i // 20) % 6)}"
            )
        chassis = None
        if c["chassis"] and truck and t >= full_out:
            chassis = f"{_CHASSIS[i % len(_CHASSIS)]}{(i * 131) % 1_000_000:06d}"
        owner = OWNERS[c["owner"]]
        num10 = f"{owner}{c['serial']:06d}"
        number = f"{num10}{iso6346_check_digit(num10)}"
        rail_scacs = R.INLAND_RAIL[dest] if rail else (None, None)
        evs = W.events(c, t, pod_tz, ind_tz)
        cid = a.container_ids[i]
        post_visible = c["post"] == W.POST_DELIVERED and t >= c["post_at"]
        return {
            "id": cid,
            "type": "container",
            "attributes": {
                "number": number,
                "seal_number": str(c["seal"]) if c["seal"] != NONE else None,
                "created_at": iso(c["created"]),
                "ref_numbers": [f"PO-{(c['serial'] * 31) % 1_000_000:06d}"] if c["refs"] else [],
                "pod_arrived_at": vis(c["ata"]),
                "pod_discharged_at": vis(c["discharged"]),
                "final_destination_full_out_at": vis(c["dest_full_out"]) if rail else None,
                "holds_at_pod_terminal": holds,
                "available_for_pickup": available,
                "delivered_at": iso(c["post_at"]) if post_visible else None,
                "current_status": status,
                "empty_out_at": vis(c["empty_out"]),
                "pol_full_in_at": vis(c["full_in"]),
                "pol_vessel_loaded_at": vis(c["loaded"]),
                "pol_vessel_departed_at": vis(c["atd"]),
                "equipment_type": R.EQUIPMENT_TYPES[c["etype"]],
                "equipment_length": R.EQUIPMENT_LENGTHS[c["elen"]],
                "equipment_height": R.EQUIPMENT_HEIGHTS[c["ehigh"]],
                "pod_full_out_at": vis(full_out),
                "empty_terminated_at": vis(c["empty_ret"]),
                "terminal_checked_at": iso(tchk) if tchk != NONE else None,
                "fees_at_pod_terminal": fees,
                "pickup_lfd": lfds["pickup_lfd"],
                "pickup_appointment_at": (
                    iso(c["appt"]) if c["appt"] < NEVER and t >= c["appt"] - 2 * W.DAY else None
                ),
                "pod_full_out_chassis_number": chassis,
                "location_at_pod_terminal": location,
                "pod_last_tracking_request_at": iso(ref) if arrived_soon else None,
                "shipment_last_tracking_request_at": iso(max(ref - (i * 53) % 900, c["created"])),
                "rail_last_tracking_request_at": (
                    iso(ref) if rail and t >= c["rail_loaded"] else None
                ),
                "availability_known": avail_known,
                "pod_timezone": pod_tz,
                "final_destination_timezone": ind_tz,
                "weight_in_lbs": c["weight"] if c["weight"] != NONE else None,
                "empty_terminated_timezone": ind_tz if rail else pod_tz,
                "pod_rail_carrier_scac": rail_scacs[0],
                "ind_rail_carrier_scac": rail_scacs[1],
                "pod_rail_loaded_at": vis(c["rail_loaded"]),
                "pod_rail_departed_at": vis(c["rail_departed"]),
                "ind_eta_at": (
                    iso(c["ind_ata"]) if rail and c["rail_departed"] <= t < c["ind_ata"] else None
                ),
                "ind_ata_at": vis(c["ind_ata"]),
                "ind_rail_unloaded_at": vis(c["rail_unloaded"]),
                "ind_facility_holds": [] if rail and t >= c["rail_unloaded"] else None,
                "ind_facility_fees": [] if rail and t >= c["rail_unloaded"] else None,
                "ind_facility_lfd_on": lfds["ind_facility_lfd_on"],
                "import_deadlines": lfds["import_deadlines"],
                "ssl_lfd": lfds["ssl_lfd"],
            },
            "relationships": {
                "shipment": {"data": _ident(a.shipment_ids[c["ship"]], "shipment")},
                "pickup_facility": {
                    "data": _ident(self.terminal_ids[term], "terminal") if c["pickup_fac"] else None
                },
                "pod_terminal": {"data": _ident(self.terminal_ids[term], "terminal")},
                "transport_events": {
                    "data": [_ident(sub_id(cid, e.slot), "transport_event") for e in evs]
                },
                "raw_events": {
                    "data": [_ident(sub_id(cid, 1000 + e.slot), "raw_event") for e in evs]
                },
            },
        }

    def transport_events(self, i: int) -> list[Resource]:
        """Transport events of container ``i`` at the current clock (slot order)."""
        a = self.a
        t = a.clock
        c = a.crow(i)
        s = a.srow(c["ship"])
        term = c["term"]
        pod_code = R.TERMINALS[term].port
        rail = c["mode"] == W.MODE_RAIL
        ind = R.INLAND[s["dest"]] if rail else None
        pol = R.ORIGINS[s["pol"]]
        pod_tz = self._pod_tz[term]
        seed = a.seed
        sid = a.shipment_ids[c["ship"]]
        cid = a.container_ids[i]
        vessel_id = derive_uuid(seed, "vessel", f"{s['carrier']}:{s['vessel']}")
        voyage = _voyage(s["voyage"])
        out = []
        for e in W.events(c, t, pod_tz, ind.time_zone if ind else None):
            if e.place == "pol":
                code, tz = pol.code, pol.time_zone
            elif e.place == "ind" and ind is not None:
                code, tz = ind.code, ind.time_zone
            else:
                code, tz = pod_code, pod_tz
            vessel_event = "vessel" in e.name
            if e.place == "pod" and e.data_source == "terminal":
                terminal: dict[str, str] | None = _ident(self.terminal_ids[term], "terminal")
            elif e.place == "ind" and ind is not None:
                terminal = _ident(self.rail_ids[s["dest"]], "rail_terminal")
            else:
                terminal = None
            out.append(
                {
                    "id": sub_id(cid, e.slot),
                    "type": "transport_event",
                    "attributes": {
                        "event": e.name,
                        "created_at": iso(e.created_at),
                        "voyage_number": voyage if vessel_event else None,
                        "timestamp": iso(e.timestamp),
                        "data_source": e.data_source,
                        "invalidated_at": iso(e.invalidated_at)
                        if e.invalidated_at < NEVER
                        else None,
                        "location_locode": code,
                        "timezone": tz,
                        "value": e.value,
                    },
                    "relationships": {
                        "shipment": {"data": _ident(sid, "shipment")},
                        "container": {"data": _ident(cid, "container")},
                        "vessel": {"data": _ident(vessel_id, "vessel") if vessel_event else None},
                        "source_event": {"data": _ident(sub_id(cid, 1000 + e.slot), "raw_event")},
                        "previous_version": {
                            "data": _ident(sub_id(cid, e.previous_slot), "transport_event")
                            if e.previous_slot != NONE
                            else None
                        },
                        "location": {"data": _ident(self.port_ids[code], "port")},
                        "terminal": {"data": terminal},
                    },
                }
            )
        return out

    # ---- shipments -------------------------------------------------------------------------
    def shipment(self, k: int) -> Resource:
        """Shipment ``k`` as ``GET /shipments/{id}`` renders it at the current clock."""
        a = self.a
        t = a.clock
        s = a.srow(k)
        carrier = R.CARRIERS[s["carrier"]]
        pol = R.ORIGINS[s["pol"]]
        term = R.TERMINALS[s["term"]]
        pod = _PORT_BY_CODE[term.port]
        dest = R.INLAND[s["dest"]] if s["dest"] != NONE else None
        sid = a.shipment_ids[k]
        seed = a.seed
        normalized = f"{(k * 104729 + seed * 7919) % 10**10:010d}"
        refs = s["refs"]
        ref_numbers: list[str] | None = (
            None
            if refs == 3
            else [
                f"{p}-{(k * 7 + j * 13 + seed) % 100000:05d}"
                for j, p in enumerate(("PO", "SO")[:refs])
            ]
        )
        word = R.VESSEL_WORDS[s["vessel"]]
        vessel = f"{carrier.vessel_prefix} {word}" if carrier.vessel_prefix else f"{word} EXPRESS"
        atd, ata = s["atd"], s["ata"]
        eta = s["eta_orig"] if t < s["eta_chg"] and s["eta_orig"] < NEVER else ata
        first = s["first"]
        dest_ata = a.containers.get(first, "ind_ata") if dest else NEVER
        stopped = s["stop_at"] <= t
        attempted = max(min(t, s["stop_at"]) - (k * 337) % 3600, s["created"])
        succeeded = attempted - (0 if k % 7 else 6 * W.HOUR)
        succeeded = max(succeeded, s["created"])
        reason = R.STOP_REASONS[s["stop_reason"]] if stopped else None

        def vis(x: int) -> str | None:
            return iso(x) if x <= t else None

        def opt(x: int) -> str | None:
            return iso(x) if x < NEVER else None

        return {
            "id": sid,
            "type": "shipment",
            "attributes": {
                "created_at": iso(s["created"]),
                "ref_numbers": ref_numbers,
                "tags": [tag for b, tag in enumerate(TAGS) if s["tags"] >> b & 1],
                "bill_of_lading_number": f"{carrier.scac}{normalized}",
                "normalized_number": normalized,
                "shipping_line_scac": carrier.scac,
                "shipping_line_name": carrier.name,
                "shipping_line_short_name": carrier.short_name,
                "customer_name": a.customers[s["customer"]] if s["customer"] != NONE else None,
                "port_of_lading_locode": pol.code,
                "port_of_lading_name": pol.name,
                "port_of_discharge_locode": pod.code,
                "port_of_discharge_name": pod.name,
                "pod_vessel_name": vessel,
                "pod_vessel_imo": imo_number(s["carrier"] * 100 + s["vessel"]),
                "pod_voyage_number": _voyage(s["voyage"]),
                "destination_locode": dest.code if dest else None,
                "destination_name": dest.name if dest else None,
                "destination_timezone": dest.time_zone if dest else None,
                "destination_ata_at": vis(dest_ata) if dest else None,
                "destination_eta_at": iso(s["dest_eta"]) if dest and t < dest_ata else None,
                "pol_etd_at": iso(atd) if t < atd else None,
                "pol_atd_at": vis(atd),
                "pol_timezone": pol.time_zone,
                "pod_eta_at": iso(eta) if t < ata else None,
                "pod_original_eta_at": opt(s["eta_orig"]),
                "pol_original_etd_at": opt(s["etd_orig"]),
                "destination_original_eta_at": opt(s["dest_eta_orig"]) if dest else None,
                "pod_ata_at": vis(ata),
                "pod_timezone": pod.time_zone,
                "line_tracking_last_attempted_at": iso(attempted),
                "line_tracking_last_succeeded_at": iso(succeeded),
                "line_tracking_stopped_at": iso(s["stop_at"]) if stopped else None,
                "line_tracking_stopped_reason": reason,
            },
            "links": {"self": f"/v2/shipments/{sid}"},
            "relationships": {
                "port_of_lading": {"data": _ident(self.port_ids[pol.code], "port")},
                "port_of_discharge": {"data": _ident(self.port_ids[pod.code], "port")},
                "pod_terminal": {"data": _ident(self.terminal_ids[s["term"]], "terminal")},
                "destination": {"data": _ident(self.port_ids[dest.code], "port") if dest else None},
                "destination_terminal": {
                    "data": _ident(self.rail_ids[s["dest"]], "rail_terminal") if dest else None
                },
                "line_tracking_stopped_by_user": {
                    "data": _ident(derive_uuid(seed, "user", k % 5), "user")
                    if reason == "cancelled_by_user"
                    else None
                },
                "containers": {
                    "data": [
                        _ident(a.container_ids[j], "container")
                        for j in range(first, first + s["n"])
                        if not (a.deleted and j in a.deleted)
                    ]
                },
            },
        }

    # ---- includes -----------------------------------------------------------------------------
    def included(self, primary: list[tuple[str, int]], includes: list[str]) -> list[Resource]:
        """Resources named by ``includes`` for primary resources (kind, index), deduplicated.

        ``kind`` is ``"container"``, ``"shipment"`` or ``"event:<container index>"`` for the
        transport-events endpoint (index = position in that container's event list, unused).
        """
        out: dict[tuple[str, str], Resource] = {}
        a = self.a

        def put(key: tuple[str, str], make: Any) -> None:
            if key not in out:
                out[key] = make()

        for kind, idx in primary:
            if kind == "container":
                c = a.containers
                term = c.get(idx, "term")
                ship = c.get(idx, "ship")
                for inc in includes:
                    if inc == "shipment":
                        put(("shipment", a.shipment_ids[ship]), lambda s=ship: self.shipment(s))
                    elif inc == "pod_terminal" or (
                        inc == "pickup_facility" and c.get(idx, "pickup_fac")
                    ):
                        put(
                            ("terminal", self.terminal_ids[term]), lambda k=term: self._terminals[k]
                        )
                    elif inc == "transport_events":
                        for ev in self.transport_events(idx):
                            put(("transport_event", ev["id"]), lambda e=ev: e)
            elif kind == "shipment":
                s = a.srow(idx)
                pol = R.ORIGINS[s["pol"]].code
                pod = R.TERMINALS[s["term"]].port
                for inc in includes:
                    if inc == "containers":
                        for j in range(s["first"], s["first"] + s["n"]):
                            if a.deleted and j in a.deleted:
                                continue
                            put(("container", a.container_ids[j]), lambda j=j: self.container(j))
                    elif inc == "pod_terminal":
                        put(
                            ("terminal", self.terminal_ids[s["term"]]),
                            lambda k=s["term"]: self._terminals[k],
                        )
                    elif inc == "port_of_lading":
                        put(("port", self.port_ids[pol]), lambda p=pol: self._ports[p])
                    elif inc == "port_of_discharge":
                        put(("port", self.port_ids[pod]), lambda p=pod: self._ports[p])
                    elif inc == "destination" and s["dest"] != NONE:
                        code = R.INLAND[s["dest"]].code
                        put(("port", self.port_ids[code]), lambda p=code: self._ports[p])
                    elif inc == "destination_terminal" and s["dest"] != NONE:
                        put(
                            ("rail_terminal", self.rail_ids[s["dest"]]),
                            lambda k=s["dest"]: self._rails[k],
                        )
        return list(out.values())

    def event_included(self, i: int, evs: list[Resource], includes: list[str]) -> list[Resource]:
        """Includes for the transport events of container ``i``: location, terminal, etc."""
        out: dict[tuple[str, str], Resource] = {}
        code_to_port = {r["id"]: r for r in self._ports.values()}
        term_by_id = {r["id"]: r for r in self.terminals()}
        for ev in evs:
            rel = ev["relationships"]
            for inc in includes:
                if inc == "location":
                    pid = rel["location"]["data"]["id"]
                    out.setdefault(("port", pid), code_to_port[pid])
                elif inc == "terminal" and rel["terminal"]["data"]:
                    tid = rel["terminal"]["data"]["id"]
                    out.setdefault((rel["terminal"]["data"]["type"], tid), term_by_id[tid])
                elif inc == "container":
                    out.setdefault(("container", self.a.container_ids[i]), self.container(i))
                elif inc == "shipment":
                    ship = self.a.containers.get(i, "ship")
                    out.setdefault(("shipment", self.a.shipment_ids[ship]), self.shipment(ship))
        return list(out.values())


def _voyage(v: int) -> str:
    return f"{v // 10}{'EWN'[v % 10]}"
