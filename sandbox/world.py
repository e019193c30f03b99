"""How a container's state follows from its planned timeline and the sandbox clock.

Every container carries a *plan*: absolute epoch-second timestamps for each milestone it will
reach (``NEVER`` when it never will). The state served at clock ``t`` is a pure function of the
plan and ``t``: a milestone is visible once ``t >= planned time``. This module holds that function
(status, holds, LFDs, fees, transport events) and the list of *change points*, the instants at
which anything a container renders can change. The contract tying them together::

    for any t1 < t2 with no change point in (t1, t2]: the rendered container is identical

The account uses it to advance the clock: a container whose next change point falls in
``(old, new]`` is "changed" and gets its refresh time set to the new clock.

Rows are plain ``dict[str, int]`` built by :meth:`sandbox.model.Account.crow` (container) and
:meth:`sandbox.model.Account.srow` (shipment); field names are the column names of the model.
"""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import NamedTuple
from zoneinfo import ZoneInfo

HOUR = 3600
DAY = 86400
NEVER = 2**62  # a planned time that never comes (renders as null)
NONE = -1  # null for small codes and values

MODE_TRUCK = 0
MODE_RAIL = 1
POST_NONE = 0
POST_DELIVERED = 1
POST_DROPPED = 2
STALE_NO = 0
STALE_NULL = 1
STALE_FIXED = 2

STATUSES: tuple[str, ...] = (
    "new",
    "on_ship",
    "available",
    "not_available",
    "grounded",
    "on_rail",
    "picked_up",
    "off_dock",
    "delivered",
    "dropped",
    "loaded",
    "empty_returned",
    "awaiting_inland_transfer",
)
RAIL_ONLY = frozenset({"grounded", "on_rail", "off_dock", "loaded", "awaiting_inland_transfer"})
TRUCK_ONLY = frozenset({"available", "not_available"})

# Demurrage tiers (USD per day after the LFD), a carrier's published US import tariff.
DEMURRAGE_TIERS: tuple[tuple[int, int], ...] = ((4, 235), (9, 285), (10**6, 335))
EXTENDED_DWELL_AFTER_DAYS = 7
EXTENDED_DWELL_RATE = 45
TMF_PER_TEU = 37.71
MAX_FEE_DAYS = 120

Row = dict[str, int]


# Filled as met: a table of all 86,400 times of day cost every importing process 0.05 s.
_TIMES: dict[int, str] = {}
_DAYS: dict[int, str] = {}


def iso(ts: int) -> str:
    """Epoch seconds -> ``YYYY-MM-DDTHH:MM:SSZ`` (day and time-of-day strings cached)."""
    d, sec = divmod(ts, 86400)
    day = _DAYS.get(d)
    if day is None:
        day = _DAYS[d] = time.strftime("%Y-%m-%d", time.gmtime(d * 86400))
    tod = _TIMES.get(sec)
    if tod is None:
        h, rest = divmod(sec, 3600)
        tod = _TIMES[sec] = f"T{h:02d}:{rest // 60:02d}:{rest % 60:02d}Z"
    return day + tod


@lru_cache(maxsize=64)
def zone(name: str) -> ZoneInfo:
    """Cached ZoneInfo."""
    return ZoneInfo(name)


@lru_cache(maxsize=200_000)
def local_date(ts: int, tz: str) -> date:
    """Calendar date of instant ``ts`` in zone ``tz``."""
    return datetime.fromtimestamp(ts, zone(tz)).date()


@lru_cache(maxsize=200_000)
def local_midnight(d: date, tz: str) -> int:
    """Epoch seconds of local midnight starting date ``d`` in zone ``tz`` (DST aware)."""
    return int(datetime(d.year, d.month, d.day, tzinfo=zone(tz)).timestamp())


def lfd_after(ts: int, days: int, tz: str) -> int:
    """The LFD ``days`` local calendar days after the local date of ``ts``, as local midnight."""
    return local_midnight(local_date(ts, tz) + timedelta(days=days), tz)


def shift_lfd(lfd: int, days: int, tz: str) -> int:
    """Move an LFD (local midnight) by whole local days."""
    return local_midnight(local_date(lfd, tz) + timedelta(days=days), tz)


def yard_exit(c: Row) -> int:
    """When the box leaves the port-of-discharge terminal (full-out, off-dock or rail load)."""
    if c["mode"] == MODE_TRUCK:
        return c["full_out"]
    return min(c["offdock_at"], c["rail_loaded"])


def in_yard(c: Row, t: int) -> bool:
    """Whether the box sits discharged in the POD terminal at ``t``."""
    return c["discharged"] <= t < yard_exit(c)


class Hold(NamedTuple):
    """A hold active at some instant."""

    kind: int  # index into refdata.HOLD_NAMES
    blocking: bool  # status "hold" (True) or "pending" (False)
    slot: int  # 1 or 2


def active_holds(c: Row, t: int) -> list[Hold]:
    """Holds shown at ``t``: between their on/off times and only while the box is in the yard."""
    if not in_yard(c, t):
        return []
    out = []
    if c["h1_kind"] >= 0 and c["h1_on"] <= t < c["h1_off"]:
        out.append(Hold(c["h1_kind"], c["h1_status"] == 1, 1))
    if c["h2_kind"] >= 0 and c["h2_on"] <= t < c["h2_off"]:
        out.append(Hold(c["h2_kind"], c["h2_status"] == 1, 2))
    return out


def blocked(c: Row, t: int) -> bool:
    """Whether a hold with status ``hold`` blocks pickup at ``t``."""
    return any(h.blocking for h in active_holds(c, t))


def status(c: Row, t: int) -> str:
    """``current_status`` of container row ``c`` at clock ``t``."""
    if t >= c["empty_ret"]:
        return "empty_returned"
    out_at = c["full_out"] if c["mode"] == MODE_TRUCK else c["dest_full_out"]
    if t >= out_at:
        if t >= c["post_at"]:
            return "delivered" if c["post"] == POST_DELIVERED else "dropped"
        return "picked_up"
    if c["mode"] == MODE_RAIL:
        if t >= c["rail_unloaded"]:
            return "grounded"
        if t >= c["rail_departed"]:
            return "on_rail"
        if t >= c["rail_loaded"]:
            return "loaded"
        if t >= c["offdock_at"]:
            return "off_dock"
        if t >= c["discharged"]:
            return "awaiting_inland_transfer"
    elif t >= c["discharged"]:
        if t >= c["available"] and not blocked(c, t):
            return "available"
        return "not_available"
    if t >= c["loaded"]:
        return "on_ship"
    return "new"


def status_points(c: Row) -> list[int]:
    """The instants at which :func:`status` can change, sorted (used to place a plan in time)."""
    pts = {
        c["loaded"],
        c["discharged"],
        c["available"],
        c["full_out"],
        c["offdock_at"],
        c["rail_loaded"],
        c["rail_departed"],
        c["rail_unloaded"],
        c["dest_full_out"],
        c["post_at"],
        c["empty_ret"],
        c["h1_on"],
        c["h1_off"],
        c["h2_on"],
        c["h2_off"],
    }
    return sorted(p for p in pts if p < NEVER)


def terminal_lfd(c: Row, t: int) -> int:
    """Terminal LFD shown at ``t`` (local midnight in pod zone) or NEVER."""
    if t >= c["lfd_chg"]:
        return c["lfd2"]
    if t >= c["lfd_post"]:
        return c["lfd1"]
    return NEVER


def line_lfd(c: Row, t: int) -> int:
    """Shipping-line LFD shown at ``t`` or NEVER (posted at vessel arrival)."""
    return c["lfd_line"] if t >= c["ata"] else NEVER


def rail_lfd(c: Row, t: int) -> int:
    """Rail LFD shown at ``t`` or NEVER (posted when unloaded at the inland ramp)."""
    return c["lfd_rail"] if t >= c["rail_unloaded"] else NEVER


def pickup_lfd(c: Row, t: int) -> int:
    """Coalesced LFD: line, else terminal, else rail (fixed priority, not the earliest)."""
    v = line_lfd(c, t)
    if v == NEVER:
        v = terminal_lfd(c, t)
    if v == NEVER:
        v = rail_lfd(c, t)
    return v


def demurrage_days(c: Row, t: int) -> int:
    """Chargeable days after the terminal LFD, counted up to ``t`` or yard exit."""
    lfd = terminal_lfd(c, t)
    if lfd == NEVER:
        return 0
    until = min(t, yard_exit(c))
    if until < lfd + DAY:
        return 0
    return min((until - lfd - DAY) // DAY + 1, MAX_FEE_DAYS)


def demurrage_amount(days: int) -> int:
    """Tiered demurrage for ``days`` chargeable days."""
    total, prev = 0, 0
    for upto, rate in DEMURRAGE_TIERS:
        n = min(days, upto) - prev
        if n <= 0:
            break
        total += n * rate
        prev = upto
    return total


def fee_lines(c: Row, t: int, teu: int, tmf_port: bool) -> list[tuple[str, float]]:
    """Fee lines (type, amount) the terminal reports at ``t``, including the ``total`` line.

    Empty when the terminal reports no fees for this box or it is not discharged yet.
    """
    if c["fees_mode"] == 0 or t < c["discharged"]:
        return []
    days = demurrage_days(c, t)
    lines: list[tuple[str, float]] = [("demurrage", float(demurrage_amount(days)))]
    exam_seen = any(c[f"h{k}_kind"] in (1, 4) and c[f"h{k}_on"] <= t for k in (1, 2))
    if exam_seen and c["exam_fee"] > 0:
        lines.append(("exam", float(c["exam_fee"])))
    if days > EXTENDED_DWELL_AFTER_DAYS:
        lines.append(
            ("extended_dwell_time", float((days - EXTENDED_DWELL_AFTER_DAYS) * EXTENDED_DWELL_RATE))
        )
    if tmf_port and c["fees_mode"] == 2:
        lines.append(("other", round(TMF_PER_TEU * teu, 2)))
    lines.append(("total", round(sum(a for _, a in lines), 2)))
    return lines


def change_points(c: Row) -> list[int]:
    """Every instant at which anything rendered for container ``c`` may change, sorted.

    Includes milestones, visibility thresholds (terminal checks start a day before arrival,
    appointments show two days ahead), hold on/off, LFD postings and changes, the daily accrual
    boundaries of demurrage while the box sits past its LFD, and event invalidation.
    """
    pts = set(status_points(c))
    pts.update(
        (
            c["empty_out"],
            c["full_in"],
            c["atd"],
            c["ata"] - DAY,
            c["ata"],
            c["ata"] + 2 * HOUR,
            c["ind_ata"],
            c["lfd_post"],
            c["lfd_chg"],
            c["inv_at"],
        )
    )
    if c["appt"] < NEVER:
        pts.add(c["appt"] - 2 * DAY)
    exit_at = yard_exit(c)
    for lfd, start in ((c["lfd1"], c["lfd_post"]), (c["lfd2"], c["lfd_chg"])):
        if lfd >= NEVER or start >= NEVER:
            continue
        k = 1
        while k <= MAX_FEE_DAYS:
            b = lfd + k * DAY
            if b > exit_at:
                break
            pts.add(b)
            k += 1
    return sorted(p for p in pts if 0 < p < NEVER)


def next_change(c: Row, t: int) -> int:
    """First change point strictly after ``t`` (NEVER when the container is settled)."""
    for p in change_points(c):
        if p > t:
            return p
    return NEVER


def last_change(c: Row, t: int) -> int:
    """Last change point at or before ``t`` (0 when none)."""
    last = 0
    for p in change_points(c):
        if p > t:
            break
        last = p
    return last


class Event(NamedTuple):
    """A transport event of a container, as shown at some instant."""

    slot: int  # stable per container: the event id derives from (container, slot)
    name: str
    timestamp: int
    created_at: int
    place: str  # "pol", "pod" or "ind"
    data_source: str
    value: str | None
    invalidated_at: int  # NEVER when valid
    previous_slot: int  # NONE when first version


def events(c: Row, t: int, pod_tz: str, ind_tz: str | None) -> list[Event]:
    """Transport events visible at ``t``, in slot order (not timestamp order).

    ``created_at`` is when the sandbox learnt of the event (never before tracking began).
    """
    created = c["created"]
    out: list[Event] = []

    def add(
        slot: int,
        name: str,
        ts: int,
        place: str,
        source: str = "shipping_line",
        value: str | None = None,
        seen: int | None = None,
        inv: int = NEVER,
        prev: int = NONE,
    ) -> None:
        seen_at = ts if seen is None else seen
        if seen_at <= t and ts < NEVER:
            out.append(
                Event(
                    slot,
                    name,
                    ts,
                    max(seen_at, created),
                    place,
                    source,
                    value,
                    inv if inv <= t else NEVER,
                    prev,
                )
            )

    add(1, "container.transport.empty_out", c["empty_out"], "pol")
    add(2, "container.transport.full_in", c["full_in"], "pol")
    add(3, "container.transport.vessel_loaded", c["loaded"], "pol")
    add(4, "container.transport.vessel_departed", c["atd"], "pol")
    if c["inv_at"] < NEVER:
        # The line first reported arrival six hours early, then corrected it.
        add(
            5,
            "container.transport.vessel_arrived",
            c["ata"] - 6 * HOUR,
            "pod",
            seen=c["ata"],
            inv=c["inv_at"],
        )
        add(17, "container.transport.vessel_arrived", c["ata"], "pod", seen=c["inv_at"], prev=5)
    else:
        add(5, "container.transport.vessel_arrived", c["ata"], "pod")
    add(6, "container.transport.vessel_berthed", c["ata"] + 2 * HOUR, "pod", source="ais")
    add(7, "container.transport.vessel_discharged", c["discharged"], "pod", source="terminal")
    if c["available"] < yard_exit(c) and c["mode"] == MODE_TRUCK:
        add(8, "container.transport.available", c["available"], "pod", source="terminal")
    if c["mode"] == MODE_TRUCK:
        add(9, "container.transport.full_out", c["full_out"], "pod", source="terminal")
    else:
        add(10, "container.transport.rail_loaded", c["rail_loaded"], "pod")
        add(11, "container.transport.rail_departed", c["rail_departed"], "pod")
        add(12, "container.transport.rail_arrived", c["ind_ata"], "ind")
        add(13, "container.transport.rail_unloaded", c["rail_unloaded"], "ind")
        add(14, "container.transport.full_out", c["dest_full_out"], "ind")
    if c["post"] == POST_DELIVERED:
        add(15, "container.transport.delivered", c["post_at"], "ind" if c["mode"] else "pod")
    add(16, "container.transport.empty_in", c["empty_ret"], "ind" if c["mode"] else "pod")
    # Coalesced LFD changes: one event each time pickup_lfd takes a new value.
    prev_val = NEVER
    slot = 20
    for when in sorted({c["ata"], c["lfd_post"], c["lfd_chg"], c["rail_unloaded"]}):
        if when >= NEVER:
            continue
        val = pickup_lfd(c, when)
        if val != prev_val and val < NEVER:
            # An LFD is local midnight of a US zone (UTC-4..-10): its UTC date is the local date.
            add(slot, "container.pickup_lfd.changed", when, "pod", value=_utc_date(val))
            prev_val = val
        slot += 1
    return out


def _utc_date(ts: int) -> str:
    """``YYYY-MM-DD`` of instant ``ts`` in UTC."""
    return datetime.fromtimestamp(ts, UTC).date().isoformat()
