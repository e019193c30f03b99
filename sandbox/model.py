"""The synthetic account: seeded generation and compact columnar storage.

An :class:`Account` holds every shipment and container as typed ``array.array`` columns (one
machine integer per field, timestamps as epoch seconds, ``world.NEVER`` for "never happens"),
plus the uuid strings and an id -> index map. Resource dicts are rendered on demand by
:mod:`sandbox.render`; nothing JSON-shaped is kept in memory. At 1,000,000 containers the
columns take about 300 MB.

Determinism: given (seed, clock, n_containers) generation is a pure function; ids are uuids
derived from the seed (blake2b), every random draw comes from ``random.Random`` seeded from the
seed. The clock moves only through :meth:`Account.advance`.
"""

from __future__ import annotations

import bisect
import hashlib
import random
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field

from sandbox import refdata as R
from sandbox import world as W
from sandbox.world import DAY, HOUR, NEVER, NONE

CONTAINER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("ship", "i"),
    ("term", "h"),
    ("mode", "b"),
    ("post", "b"),
    ("owner", "h"),
    ("serial", "i"),
    ("etype", "b"),
    ("elen", "b"),
    ("ehigh", "b"),
    ("weight", "i"),
    ("seal", "q"),
    ("refs", "b"),
    ("avail_known", "b"),
    ("pickup_fac", "b"),
    ("chassis", "b"),
    ("fees_mode", "b"),
    ("exam_fee", "i"),
    ("stale", "b"),
    ("h1_kind", "b"),
    ("h1_status", "b"),
    ("h2_kind", "b"),
    ("h2_status", "b"),
    ("created", "q"),
    ("empty_out", "q"),
    ("full_in", "q"),
    ("loaded", "q"),
    ("atd", "q"),
    ("ata", "q"),
    ("discharged", "q"),
    ("available", "q"),
    ("full_out", "q"),
    ("offdock_at", "q"),
    ("rail_loaded", "q"),
    ("rail_departed", "q"),
    ("ind_ata", "q"),
    ("rail_unloaded", "q"),
    ("dest_full_out", "q"),
    ("post_at", "q"),
    ("empty_ret", "q"),
    ("appt", "q"),
    ("lfd_post", "q"),
    ("lfd1", "q"),
    ("lfd_chg", "q"),
    ("lfd2", "q"),
    ("lfd_line", "q"),
    ("lfd_rail", "q"),
    ("h1_on", "q"),
    ("h1_off", "q"),
    ("h2_on", "q"),
    ("h2_off", "q"),
    ("inv_at", "q"),
    ("refreshed", "q"),
    ("tchk", "q"),
)
"""Container ``refreshed`` is also its internal ``updated_at``: every change of what the container
renders happens at a change point, and the account sets ``refreshed`` to the clock then."""
SHIPMENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("created", "q"),
    ("carrier", "b"),
    ("pol", "b"),
    ("term", "h"),
    ("dest", "b"),
    ("customer", "h"),
    ("vessel", "h"),
    ("voyage", "i"),
    ("atd", "q"),
    ("etd_orig", "q"),
    ("ata", "q"),
    ("eta_orig", "q"),
    ("dest_eta", "q"),
    ("dest_eta_orig", "q"),
    ("stop_at", "q"),
    ("stop_reason", "b"),
    ("first", "i"),
    ("n", "b"),
    ("refs", "b"),
    ("tags", "b"),
    ("eta_chg", "q"),
    ("updated", "q"),
)

TAGS: tuple[str, ...] = ("priority", "retail", "fba", "promo", "hazmat", "q4-peak")

# Target status mix for generated shipments (weights; sums need not be 100).
TARGET_WEIGHTS: dict[str, int] = {
    "new": 5,
    "on_ship": 20,
    "available": 9,
    "not_available": 6,
    "grounded": 3,
    "on_rail": 5,
    "picked_up": 8,
    "off_dock": 2,
    "delivered": 5,
    "dropped": 3,
    "loaded": 2,
    "empty_returned": 28,
    "awaiting_inland_transfer": 4,
}

OWNER_CODES: dict[str, tuple[str, ...]] = {
    "MSCU": ("MSCU", "MEDU"),
    "MEDU": ("MEDU", "MSDU"),
    "MAEU": ("MSKU", "MRKU", "MAEU"),
    "CMDU": ("CMAU", "TGHU"),
    "COSU": ("CSNU", "CBHU"),
    "HLCU": ("HLXU", "HLBU"),
    "ONEY": ("ONEU", "TCLU"),
    "EGLV": ("EGHU", "EMCU"),
    "HDMU": ("HMMU", "CAIU"),
    "YMLU": ("YMLU", "SEGU"),
    "ZIMU": ("ZIMU", "TRHU"),
    "OOLU": ("OOLU", "OOCU"),
}
OWNERS: tuple[str, ...] = tuple(sorted({o for v in OWNER_CODES.values() for o in v}))
_OWNER_INDEX = {o: i for i, o in enumerate(OWNERS)}
_STATUS_LIST = tuple(TARGET_WEIGHTS)
_STATUS_W = tuple(TARGET_WEIGHTS.values())


def _cum(weights: Iterable[int]) -> tuple[float, ...]:
    """Cumulative weights normalised to 1 (for :func:`_pick`)."""
    w = list(weights)
    total = float(sum(w))
    acc, out = 0.0, []
    for x in w:
        acc += x
        out.append(acc / total)
    return tuple(out)


def _pick(rng: random.Random, cum: tuple[float, ...]) -> int:
    """Index drawn with cumulative probabilities ``cum``."""
    return min(bisect.bisect_right(cum, rng.random()), len(cum) - 1)


def _ri(rng: random.Random, a: int, b: int) -> int:
    """Uniform integer in [a, b] (one ``random()`` draw; much cheaper than ``randint``)."""
    return a + int(rng.random() * (b - a + 1))


def _rr(rng: random.Random, n: int) -> int:
    """Uniform integer in [0, n)."""
    return int(rng.random() * n)


_STATUS_CUM = _cum(_STATUS_W)
_CARRIER_CUM = _cum(R.CARRIER_WEIGHTS)
_SIZE_CUM = _cum((38, 24, 15, 10, 7, 6))
_REFS_CUM = _cum((40, 40, 15, 5))
_ETYPE_CUM = _cum(R.EQUIPMENT_TYPE_WEIGHTS)
_ELEN_CUM = _cum(R.EQUIPMENT_LENGTH_WEIGHTS)
_HOLD_CUM = _cum(R.HOLD_WEIGHTS)
_POST_CUM = _cum((50, 35, 15))  # none, delivered, dropped
_HOLD_OTHER = R.HOLD_NAMES.index("other")


def mix(seed: int, index: int, salt: int) -> int:
    """A 32-bit hash of (seed, index, salt): per-record choices that draw nothing from the
    generation stream (so adding one leaves every other generated value unchanged)."""
    x = (index * 0x9E3779B1 + seed * 0x85EBCA6B + salt * 0xC2B2AE35) & 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


POD_SINCE_DAYS = 30
"""Containers created at most this many days before generation (and every later one) carry
``import_deadlines.pod``: the newer part of the book."""


def derive_uuid(seed: int, kind: str, index: int | str) -> str:
    """A version-4-shaped uuid derived from (seed, kind, index)."""
    b = bytearray(hashlib.blake2b(f"{seed}:{kind}:{index}".encode(), digest_size=16).digest())
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _iso6346_values() -> dict[str, int]:
    vals = {str(d): d for d in range(10)}
    v = 10
    for ch in "ABCDEFGHIJKLMNOPQRSTUVWXYZ":
        if v % 11 == 0:
            v += 1
        vals[ch] = v
        v += 1
    return vals


_ISO6346 = _iso6346_values()


def iso6346_check_digit(code: str) -> int:
    """ISO 6346 check digit of the first 10 characters of a container number."""
    total = 0
    for pos, ch in enumerate(code):
        total += _ISO6346[ch] << pos
    return total % 11 % 10


def sub_id(parent: str, salt: int) -> str:
    """A uuid-shaped id derived from ``parent`` (a derived uuid) and a small ``salt``.

    Used for per-container transport and raw events: cheap, stable, unique within the parent.
    """
    tail = (int(parent[-8:], 16) ^ (salt * 0x9E3779B1)) & 0xFFFFFFFF
    return f"{parent[:-8]}{tail:08x}"


def imo_number(key: int) -> str:
    """A 7-digit IMO number with a valid check digit, derived from ``key``."""
    base = 900000 + (key * 7919) % 99999
    digits = [int(x) for x in f"{base:06d}"]
    check = sum(d * w for d, w in zip(digits, range(7, 1, -1), strict=True)) % 10
    return f"{base:06d}{check}"


class Table:
    """Rows of named integer fields stored in one flat ``array('q')`` (row-major, fixed stride).

    One machine integer per field keeps a row at ``8 * len(fields)`` bytes and lets
    :meth:`row` slice a whole row in one C call.
    """

    def __init__(self, spec: Iterable[tuple[str, str]]) -> None:
        self.names = tuple(n for n, _ in spec)
        self.stride = len(self.names)
        self.offset = {n: k for k, n in enumerate(self.names)}
        self.data = array("q")

    def __len__(self) -> int:
        return len(self.data) // self.stride

    def add(self, row: dict[str, int]) -> int:
        """Append a row (every field required); returns its index."""
        self.data.extend([row[n] for n in self.names])
        return len(self) - 1

    def row(self, i: int) -> dict[str, int]:
        """Row ``i`` as a dict."""
        k = i * self.stride
        return dict(zip(self.names, self.data[k : k + self.stride], strict=True))

    def get(self, i: int, name: str) -> int:
        """Field ``name`` of row ``i``."""
        return self.data[i * self.stride + self.offset[name]]

    def set(self, i: int, name: str, value: int) -> None:
        """Set field ``name`` of row ``i``."""
        self.data[i * self.stride + self.offset[name]] = value

    def column(self, name: str) -> array:
        """A copy of one column."""
        return self.data[self.offset[name] :: self.stride]

    def nbytes(self) -> int:
        """Bytes held by the table."""
        return self.data.itemsize * len(self.data)


@dataclass
class Account:
    """A whole synthetic account at a clock, stored column-wise.

    Invariants: ``containers.get(i, "ship")`` indexes ``shipments``; a shipment's containers are
    the contiguous range ``first .. first + n - 1``; ``order`` lists container indices most
    recently refreshed first (ties: lower index first) and never holds a deleted container;
    ``ship_order`` lists shipments newest created first (ties: higher index first).

    Internal timestamps (never rendered): a container's ``refreshed`` is its ``updated_at``; a
    shipment's ``updated`` is its ``updated_at``, ``eta_chg`` its planned ETA slip (see
    :meth:`eta_changed_at`).
    ``version`` grows whenever a list answer may change without the clock moving.
    """

    seed: int
    clock: int
    containers: Table = field(default_factory=lambda: Table(CONTAINER_COLUMNS))
    shipments: Table = field(default_factory=lambda: Table(SHIPMENT_COLUMNS))
    container_ids: list[str] = field(default_factory=list)
    shipment_ids: list[str] = field(default_factory=list)
    container_index: dict[str, int] = field(default_factory=dict)
    shipment_index: dict[str, int] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)
    ship_order: list[int] = field(default_factory=list)
    next_chg: array = field(default_factory=lambda: array("q"))
    customers: tuple[str, ...] = ()
    daily_rate: float = 0.0  # new shipments per day on advance
    advances: int = 0
    refreshes: int = 0
    # Set by :meth:`advance`: the clock before it, the changed existing containers and the new
    # containers (indices). Read by the webhook emitter.
    last_old_clock: int = 0
    last_changed: list[int] = field(default_factory=list)
    last_new: list[int] = field(default_factory=list)
    active_share: float | None = None  # None: the default status mix; else ACTIVE vs SETTLED
    pod_since: int = 0  # containers created at or after this carry import_deadlines.pod
    deleted: set[int] = field(default_factory=set)
    version: int = 0

    # ---- row access -------------------------------------------------------------------
    def crow(self, i: int) -> dict[str, int]:
        """Container row ``i`` (see :data:`CONTAINER_COLUMNS`)."""
        return self.containers.row(i)

    def srow(self, s: int) -> dict[str, int]:
        """Shipment row ``s`` (see :data:`SHIPMENT_COLUMNS`)."""
        return self.shipments.row(s)

    # ---- ordering -----------------------------------------------------------------------
    def sort_all(self) -> None:
        """Rebuild both orders from scratch."""
        ref = self.containers.column("refreshed")
        self.order = sorted(range(len(ref)), key=lambda i: (-ref[i], i))
        cr = self.shipments.column("created")
        self.ship_order = sorted(range(len(cr)), key=lambda s: (-cr[s], -s))

    def move_to_front(self, indices: Iterable[int]) -> None:
        """Put ``indices`` (just refreshed at the current clock) first, keeping the rest's order."""
        front = sorted(set(indices) - self.deleted)
        if not front:
            return
        mark = bytearray(len(self.container_ids))
        for i in front:
            mark[i] = 1
        rest = [i for i in self.order if not mark[i]]
        self.order = front + rest

    # ---- the world moves ---------------------------------------------------------------------
    def refresh(self, count: int) -> list[int]:
        """Mark ``count`` seeded-random containers as refreshed now; returns their indices."""
        self.refreshes += 1
        self.version += 1
        pool: range | list[int] = range(len(self.container_ids))
        if self.deleted:
            pool = [i for i in pool if i not in self.deleted]
        count = max(0, min(count, len(pool)))
        rng = random.Random(f"{self.seed}:refresh:{self.clock}:{self.refreshes}")
        chosen = rng.sample(pool, count)
        self._touch(chosen)
        for s in {self.containers.get(i, "ship") for i in chosen}:
            self.shipments.set(s, "updated", self.clock)
        return sorted(chosen)

    def delete(self, i: int) -> None:
        """Remove container ``i`` upstream: it leaves every list, lookup and relationship."""
        if i in self.deleted:
            return
        self.deleted.add(i)
        self.version += 1
        del self.container_index[self.container_ids[i]]
        self.order.remove(i)
        self.shipments.set(self.containers.get(i, "ship"), "updated", self.clock)

    def _touch(self, indices: list[int]) -> None:
        c = self.containers
        for i in indices:
            c.set(i, "refreshed", self.clock)
            if c.get(i, "stale") == W.STALE_NO:
                c.set(i, "tchk", self.clock)
        self.move_to_front(indices)

    def _ship_points(self, s: int) -> tuple[int, ...]:
        """Instants at which what shipment ``s`` renders changes (besides the continuous
        ``line_tracking_last_attempted_at`` while tracking runs, up to ``stop_at``)."""
        sh = self.shipments
        dest_ata = (
            self.containers.get(sh.get(s, "first"), "ind_ata")
            if sh.get(s, "dest") != NONE
            else NEVER
        )
        return (
            sh.get(s, "created"),
            sh.get(s, "atd"),
            sh.get(s, "ata"),
            dest_ata,
            sh.get(s, "stop_at"),
            sh.get(s, "eta_chg"),
        )

    def _update_shipments(self, old: int, new: int) -> None:
        """Set ``updated`` of every shipment whose rendering changed in (old, new]."""
        sh = self.shipments
        stop = sh.column("stop_at")
        for s in range(len(stop)):
            if stop[s] > old or any(old < p <= new for p in self._ship_points(s)):
                sh.set(s, "updated", new)

    def advance(self, seconds: int) -> tuple[int, int]:
        """Move the clock forward; returns (changed existing containers, new containers).

        A container changes when one of its change points falls in (old, new]; it then gets
        refreshed at the new clock. New shipments (with new containers) are created with
        ``created_at`` in (old, new] at the account's daily rate.
        """
        self.last_old_clock = self.clock
        self.last_changed, self.last_new = [], []
        if seconds <= 0:
            return 0, 0
        old, new = self.clock, self.clock + seconds
        self.advances += 1
        nc = self.next_chg
        n_before = len(self.container_ids)
        changed: list[int] = []
        deleted = self.deleted
        # only containers whose next change is unknown or due are looked at (a comprehension
        # over the array: an advance of a large account in small steps stays cheap)
        due = [i for i, v in enumerate(nc) if v <= new and i < n_before]
        for i in due:
            if deleted and i in deleted:
                continue
            v = nc[i]
            if v == NONE:
                v = W.next_change(self.crow(i), old)
                nc[i] = v
            if v <= new:
                changed.append(i)
        self.clock = new
        self.version += 1
        for i in changed:
            nc[i] = W.next_change(self.crow(i), new)
        self._update_shipments(old, new)
        rng = random.Random(f"{self.seed}:advance:{old}:{new}")
        expected = self.daily_rate * seconds / DAY
        n_new = int(expected) + (1 if rng.random() < expected - int(expected) else 0)
        created = sorted(_ri(rng, old + 1, new) for _ in range(n_new))
        new_idx: list[int] = []
        for c in created:
            new_idx.extend(self._add_shipment(rng, "new", new, created_at=c))
        self._touch(changed)
        self.last_changed, self.last_new = changed, new_idx
        if new_idx:
            self.move_to_front(new_idx)
            cr = self.shipments.column("created")
            self.ship_order = sorted(range(len(cr)), key=lambda s: (-cr[s], -s))
        return len(changed), len(new_idx)

    # ---- generation ---------------------------------------------------------------------------
    @classmethod
    def generate(
        cls,
        n_containers: int,
        seed: int,
        clock: int,
        active_share: float | None = None,
        pod_deadlines: bool = True,
    ) -> Account:
        """Generate an account of about ``n_containers`` containers (exactly that many).

        ``active_share`` None keeps the default status mix. A share in [0, 1] makes that share
        of shipments ACTIVE (the default mix) and the rest SETTLED: delivered and empty-returned
        30 to 400 days before ``clock``, with no change point after it (they never change).
        New shipments then arrive at ``active_share`` times the default rate.
        ``pod_deadlines`` False serves no container the newer ``import_deadlines.pod``.
        """
        acct = cls(
            seed=seed,
            clock=clock,
            active_share=active_share,
            pod_since=clock - POD_SINCE_DAYS * DAY if pod_deadlines else W.NEVER,
        )
        rng = random.Random(seed)
        n_cust = _ri(rng, 12, 24)
        acct.customers = tuple(rng.sample(R.CUSTOMERS, n_cust))
        acct.daily_rate = max(n_containers, 1) / 2.6 / 90.0  # shipments/day: ~90-day book turnover
        if active_share is not None:
            acct.daily_rate *= active_share
        while len(acct.container_ids) < n_containers:
            if active_share is not None and rng.random() >= active_share:
                target = "settled"
            else:
                target = _STATUS_LIST[_pick(rng, _STATUS_CUM)]
            acct._add_shipment(rng, target, clock, limit=n_containers - len(acct.container_ids))
        acct.next_chg = array("q", [NONE]) * len(acct.container_ids)
        acct.sort_all()
        return acct

    def _add_shipment(
        self,
        rng: random.Random,
        target: str,
        clock: int,
        created_at: int | None = None,
        limit: int = 6,
    ) -> list[int]:
        """Plan one shipment, place it in time, append it; returns the new container indices.

        With ``created_at`` None the plan is shifted so that at ``clock`` its first container is
        in status ``target``; otherwise it is shifted so the shipment is created at ``created_at``.
        """
        s_index = len(self.shipment_ids)
        carrier_i = _pick(rng, _CARRIER_CUM)
        carrier = R.CARRIERS[carrier_i]
        term_i = _rr(rng, len(R.TERMINALS))
        term = R.TERMINALS[term_i]
        pod = term.port
        west = pod in R.WEST_COAST
        rail_share = 0.55 if pod in R.RAIL_HEAVY else 0.15
        if target in W.RAIL_ONLY:
            rail = True
        elif target in W.TRUCK_ONLY:
            rail = False
        else:
            rail = rng.random() < rail_share
        dest = _rr(rng, len(R.INLAND)) if rail else NONE
        n = min(limit, 1 + _pick(rng, _SIZE_CUM))

        # Relative plan: departure from the port of lading at 0.
        mins = 60
        transit = _ri(rng, 12 * DAY, 18 * DAY) if west else _ri(rng, 28 * DAY, 36 * DAY)
        ata = transit // mins * mins
        slip = _ri(rng, 1 * DAY, 5 * DAY) // HOUR * HOUR if rng.random() < 0.3 else 0
        eta_orig = ata - slip if rng.random() < 0.9 else NEVER
        etd_orig = -_ri(rng, 0, 3 * DAY) // HOUR * HOUR if rng.random() < 0.35 else NEVER
        created = -_ri(rng, -6 * DAY, 14 * DAY) // mins * mins
        rows: list[dict[str, int]] = []
        for k in range(n):
            rows.append(
                self._plan_container(rng, k, rail, west, term, ata, target if k == 0 else "")
            )
        first_loaded = min(r["loaded"] for r in rows)
        if target == "new" or created_at is not None and rng.random() < 0.7:
            created = first_loaded - _ri(rng, DAY, 12 * DAY) // mins * mins
        for r in rows:
            r["created"] = created

        if created_at is not None:
            shift = created_at - created
        elif target == "settled":
            shift = clock - max(r["empty_ret"] for r in rows) - _ri(rng, 30 * DAY, 400 * DAY)
        else:
            shift = clock - self._pick_time(rng, rows[0], target, created)
        for r in rows:
            for key, val in r.items():
                if key in _TIME_KEYS and val < NEVER:
                    r[key] = val + shift
        ata += shift
        created += shift

        # Absolute-time details: LFDs (local dates), stale checks, tracking stops.
        pod_tz = next(p.time_zone for p in R.US_PORTS if p.code == pod)
        ind_tz = R.INLAND[dest].time_zone if rail else pod_tz
        for r in rows:
            self._place_lfds(rng, r, term, carrier, pod_tz, ind_tz, west)
            if created_at is None and r["ata"] <= clock and rng.random() < 0.15:
                if rng.random() < 0.5:
                    r["stale"] = W.STALE_NULL
                else:
                    r["stale"] = W.STALE_FIXED
                    r["tchk"] = clock - _ri(rng, 8 * DAY, 30 * DAY)
        last_empty = max(r["empty_ret"] for r in rows)
        stop_at, stop_reason = NEVER, NONE
        if last_empty < NEVER:
            stop_at, stop_reason = last_empty + _ri(rng, HOUR, 2 * DAY), 0
        elif rng.random() < 0.06:
            stop_reason = _ri(rng, 1, 5)
            stop_at = created + _ri(rng, 20 * DAY, 60 * DAY)
        dest_eta = NEVER
        dest_eta_orig = NEVER
        if rail:
            dest_eta = rows[0]["ind_ata"] + _ri(rng, -12, 30) * HOUR
            dest_eta_orig = dest_eta - _ri(rng, 0, 3) * DAY
        srow = {
            "created": created,
            "carrier": carrier_i,
            "pol": _rr(rng, len(R.ORIGINS)),
            "term": term_i,
            "dest": dest,
            "customer": _rr(rng, len(self.customers)) if rng.random() < 0.95 else NONE,
            "vessel": _rr(rng, len(R.VESSEL_WORDS)),
            "voyage": _ri(rng, 100, 999) * 10 + _rr(rng, 3),
            "atd": shift,
            "etd_orig": etd_orig + shift if etd_orig < NEVER else NEVER,
            "ata": ata,
            "eta_orig": eta_orig + shift if eta_orig < NEVER else NEVER,
            "dest_eta": dest_eta,
            "dest_eta_orig": dest_eta_orig,
            "stop_at": stop_at,
            "stop_reason": stop_reason,
            "first": len(self.container_ids),
            "n": n,
            "refs": _pick(rng, _REFS_CUM),
            "tags": sum(1 << b for b in rng.sample(range(len(TAGS)), _ri(rng, 1, 2)))
            if rng.random() < 0.4
            else 0,
        }
        srow["eta_chg"] = self._eta_change(s_index, srow)
        srow["updated"] = NEVER
        s_stop = srow["stop_at"]
        self.shipments.add(srow)
        if created_at is not None or s_stop > clock:
            upd = clock  # tracking runs: line_tracking_last_attempted_at moves with the clock
        else:
            dest_ata = rows[0]["ind_ata"] if rail else NEVER
            upd = max(
                p for p in (created, shift, ata, dest_ata, s_stop, srow["eta_chg"]) if p <= clock
            )
        self.shipments.set(s_index, "updated", upd)
        sid = derive_uuid(self.seed, "shipment", s_index)
        self.shipment_ids.append(sid)
        self.shipment_index[sid] = s_index
        out = []
        owners = OWNER_CODES[carrier.scac]
        for r in rows:
            i = len(self.container_ids)
            r["ship"] = s_index
            r["owner"] = _OWNER_INDEX[owners[_rr(rng, len(owners))]]
            r["serial"] = (i * 7919 + self.seed * 104729) % 1_000_000
            # Refresh time: last change point, or recently for boxes still moving.
            last = W.last_change(r, self.clock)
            if r["empty_ret"] <= self.clock:
                ref = min(self.clock, last + _ri(rng, 0, 6 * HOUR))
            else:
                ref = max(last, self.clock - _ri(rng, 0, 12 * HOUR))
            r["refreshed"] = max(ref, r["created"]) if created_at is None else self.clock
            if r["stale"] == W.STALE_NO:
                r["tchk"] = r["refreshed"]
            self.containers.add(r)
            cid = derive_uuid(self.seed, "container", i)
            self.container_ids.append(cid)
            self.container_index[cid] = i
            if created_at is not None:
                self.next_chg.append(NONE)
            out.append(i)
        return out

    def eta_changed_at(self, s: int) -> int:
        """``pod_eta_changed_at`` of shipment ``s`` at the clock: the planned slip once it has
        happened, before that the creation (when the ETA first appeared)."""
        chg = self.shipments.get(s, "eta_chg")
        return chg if chg <= self.clock else self.shipments.get(s, "created")

    def _eta_change(self, s_index: int, srow: dict[str, int]) -> int:
        """When the POD ETA last changed its date: for a slipped ETA (original differs from the
        arrival), a seeded instant between creation and arrival (``pod_eta_at`` shows the
        original before it); otherwise creation, when the ETA first appeared."""
        created, ata, orig = srow["created"], srow["ata"], srow["eta_orig"]
        if orig >= NEVER or orig == ata:
            return created
        frac = 0.3 + 0.6 * (mix(self.seed, s_index, 3) % 1000) / 1000
        return max(created + HOUR, (created + int((ata - created) * frac)) // HOUR * HOUR)

    @staticmethod
    def _pick_time(rng: random.Random, c: dict[str, int], target: str, created: int) -> int:
        """A relative instant at which container plan ``c`` is in status ``target``."""
        pts = [p for p in W.status_points(c) if p >= created]
        bounds = [created, *pts]
        segs = []
        for k, start in enumerate(bounds):
            end = bounds[k + 1] if k + 1 < len(bounds) else start + 45 * DAY
            if end > start and W.status(c, start) == target:
                segs.append((start, end))
        if not segs:
            return created + _ri(rng, 0, 60 * DAY)
        start, end = segs[_rr(rng, len(segs))]
        return _ri(rng, start, end - 1) // 60 * 60

    def _plan_container(
        self,
        rng: random.Random,
        k: int,
        rail: bool,
        west: bool,
        term: R.Terminal,
        ata: int,
        target: str,
    ) -> dict[str, int]:
        """Relative timeline (departure at 0) and static attributes of one container."""
        m = 60
        r: dict[str, int] = {key: NEVER for key in _TIME_KEYS}
        r.update(
            {
                "term": R.TERMINALS.index(term),
                "mode": W.MODE_RAIL if rail else W.MODE_TRUCK,
                "post": W.POST_NONE,
                "etype": _pick(rng, _ETYPE_CUM),
                "elen": _pick(rng, _ELEN_CUM),
                "ehigh": 1 if rng.random() < 0.6 else 0,
                "weight": _ri(rng, 8000, 52000) if rng.random() < 0.8 else NONE,
                "seal": _ri(rng, 10**7, 10**9) if rng.random() < 0.7 else NONE,
                "refs": 1 if rng.random() < 0.2 else 0,
                "avail_known": 1 if term.provides_availability else 0,
                "pickup_fac": 1 if (not rail and rng.random() < 0.3) else 0,
                "chassis": 1 if rng.random() < 0.6 else 0,
                "fees_mode": (
                    0
                    if not term.provides_fees or rng.random() < 0.2
                    else (2 if rng.random() < 0.3 else 1)
                ),
                "exam_fee": _ri(rng, 352, 1682),
                "stale": W.STALE_NO,
                "tchk": NONE,
                "h1_kind": NONE,
                "h1_status": 0,
                "h2_kind": NONE,
                "h2_status": 0,
                "refreshed": 0,
                "ship": 0,
                "owner": 0,
                "serial": 0,
            }
        )
        if r["elen"] == 0:
            r["ehigh"] = 0
        r["atd"] = 0
        r["ata"] = ata
        r["loaded"] = -_ri(rng, 2 * HOUR, 30 * HOUR) // m * m
        r["full_in"] = r["loaded"] - _ri(rng, DAY, 6 * DAY) // m * m
        if rng.random() < 0.7:
            r["empty_out"] = r["full_in"] - _ri(rng, DAY, 5 * DAY) // m * m
        r["discharged"] = ata + _ri(rng, 3 * HOUR, 40 * HOUR) // m * m
        r["available"] = r["discharged"] + _ri(rng, 0, 24 * HOUR) // m * m
        if rng.random() < 0.15:
            r["inv_at"] = ata + 12 * HOUR
        # Holds.
        force_hold = target == "not_available"
        ready = r["available"]
        for slot in (1, 2):
            p = 0.35 if slot == 1 else 0.08
            if force_hold and slot == 1 or rng.random() < p:
                kind = _pick(rng, _HOLD_CUM)
                if slot == 2 and kind == r["h1_kind"] and kind != _HOLD_OTHER:
                    # Hold names are distinct on a container except "other" (which repeats
                    # with another description); shift without a new draw (same stream).
                    kind = (kind + 1) % len(R.HOLD_NAMES)
                blocking = 1 if (force_hold or rng.random() < 0.8) else 0
                on = ata - _ri(rng, 0, 3 * DAY) // m * m
                exam = kind in (1, 4)
                dur = _ri(rng, 2 * DAY, 7 * DAY) if exam else _ri(rng, 6 * HOUR, 4 * DAY)
                off = r["discharged"] + dur // m * m
                r[f"h{slot}_kind"], r[f"h{slot}_status"] = kind, blocking
                r[f"h{slot}_on"], r[f"h{slot}_off"] = on, off
                if blocking:
                    ready = max(ready, off)
        # Leaving the POD.
        if not rail:
            long_dwell = rng.random() < 0.12
            dwell = (
                _ri(rng, 6 * DAY, 14 * DAY)
                if long_dwell
                else int(rng.lognormvariate(0, 0.45) * 2.6 * DAY)
            )
            r["full_out"] = ready + max(dwell, 2 * HOUR) // m * m
            if rng.random() < 0.4:
                r["appt"] = r["full_out"] - _ri(rng, HOUR, 4 * HOUR) // m * m
            out_at = r["full_out"]
        else:
            dwell = (
                _ri(rng, 2 * DAY, 7 * DAY) if rng.random() < 0.7 else _ri(rng, 7 * DAY, 12 * DAY)
            )
            start = max(ready, r["discharged"] + dwell // m * m)
            if target == "off_dock" or rng.random() < 0.15:
                r["offdock_at"] = start
                start += _ri(rng, 12 * HOUR, 3 * DAY) // m * m
            r["rail_loaded"] = start
            r["rail_departed"] = start + _ri(rng, 4 * HOUR, 20 * HOUR) // m * m
            r["ind_ata"] = r["rail_departed"] + _ri(rng, 3 * DAY, 6 * DAY) // m * m
            r["rail_unloaded"] = r["ind_ata"] + _ri(rng, 2 * HOUR, 12 * HOUR) // m * m
            r["dest_full_out"] = r["rail_unloaded"] + _ri(rng, 12 * HOUR, 5 * DAY) // m * m
            out_at = r["dest_full_out"]
        post = _pick(rng, _POST_CUM)
        if target == "delivered":
            post = W.POST_DELIVERED
        elif target == "dropped":
            post = W.POST_DROPPED
        r["post"] = post
        if post != W.POST_NONE:
            r["post_at"] = out_at + _ri(rng, 2 * HOUR, 30 * HOUR) // m * m
        r["empty_ret"] = (
            max(out_at, r["post_at"] if post else out_at) + _ri(rng, 2 * DAY, 12 * DAY) // m * m
        )
        return r

    @staticmethod
    def _place_lfds(
        rng: random.Random,
        r: dict[str, int],
        term: R.Terminal,
        carrier: R.Carrier,
        pod_tz: str,
        ind_tz: str,
        west: bool,
    ) -> None:
        """Terminal, line and rail LFDs of an absolutely placed container (local midnights)."""
        exit_at = W.yard_exit(r)
        free_days = 4 if west else 5
        lfd1 = W.lfd_after(r["discharged"], free_days, pod_tz)
        if term.provides_lfd:
            post = r["discharged"] + _ri(rng, HOUR, 20 * HOUR) // 60 * 60
            if post < exit_at:
                r["lfd_post"], r["lfd1"] = post, lfd1
                if rng.random() < 0.25:
                    chg = post + _ri(rng, 12 * HOUR, 3 * DAY) // 60 * 60
                    if chg < exit_at:
                        r["lfd_chg"] = chg
                        r["lfd2"] = W.shift_lfd(lfd1, rng.choice((-1, 1, 2, 3)), pod_tz)
        if carrier.posts_line_lfd and rng.random() < 0.6:
            r["lfd_line"] = W.shift_lfd(lfd1, rng.choice((0, 0, 1, 2, -1)), pod_tz)
        if r["mode"] == W.MODE_RAIL and r["rail_unloaded"] < NEVER:
            r["lfd_rail"] = W.lfd_after(r["rail_unloaded"], 2, ind_tz)


_TIME_KEYS = frozenset(
    {
        "created",
        "empty_out",
        "full_in",
        "loaded",
        "atd",
        "ata",
        "discharged",
        "available",
        "full_out",
        "offdock_at",
        "rail_loaded",
        "rail_departed",
        "ind_ata",
        "rail_unloaded",
        "dest_full_out",
        "post_at",
        "empty_ret",
        "appt",
        "lfd_post",
        "lfd1",
        "lfd_chg",
        "lfd2",
        "lfd_line",
        "lfd_rail",
        "h1_on",
        "h1_off",
        "h2_on",
        "h2_off",
        "inv_at",
    }
)
