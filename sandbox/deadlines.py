"""The LFD attributes of a container as the live API of 2026 sends them.

The world model holds every LFD as a local midnight (epoch seconds) in its zone: terminal and
line LFDs in the POD's zone, the rail LFD in the inland destination's zone. On the wire an LFD
is either an instant (that local midnight in UTC, ``2026-11-05T05:00:00Z``) or a bare date
(``2026-11-05``, the local calendar date). Each container keeps one :data:`FORMS` member for
life, chosen from (seed, index):

- ``FORM_INSTANT``: every LFD value an instant;
- ``FORM_DATE``: every LFD value a bare date;
- ``FORM_MIXED``: the rail LFDs (``pickup_lfd_rail``, ``ind_facility_lfd_on``) bare dates, the
  others instants.

Zones: ``pickup_lfd``, ``pickup_lfd_terminal``, ``pickup_lfd_line``, ``ssl_lfd`` and the
``import_deadlines.pod`` values are in the POD's zone (a ``pickup_lfd`` coalesced from the rail
LFD is re-expressed there); ``pickup_lfd_rail`` and ``ind_facility_lfd_on`` in the inland zone.

``import_deadlines.pod`` is sent for containers created at or after ``Account.pod_since``. Its
content follows one of :data:`POD_KINDS` (chosen from seed and index), every value visible only
from the change point at which its source is (terminal LFD posting or change, vessel arrival,
discharge), so the rendering keeps the change-point contract of :mod:`sandbox.world`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sandbox import world as W
from sandbox.model import mix
from sandbox.world import NEVER, NONE, iso

FORM_INSTANT, FORM_DATE, FORM_MIXED = 0, 1, 2
FORMS = (FORM_INSTANT, FORM_DATE, FORM_MIXED)

POD_KINDS: tuple[str, ...] = (
    "facility",  # unified = facility.current
    "line",  # unified = line.current
    "line_calculated",  # unified = line.calculated (the line posts no value of its own)
    "withheld",  # unified null although line/facility have values
    "manual",  # facility overridden by hand (+2 days); unified keeps the original
    "line_revised",  # line revised (+1 day) after the legacy pickup_lfd_line was sent
)
LINE_FREE_DAYS = 4  # free days of the line's calculated LFD, counted from discharge


def wire_form(seed: int, i: int) -> int:
    """The wire form of container ``i`` (one of :data:`FORMS`)."""
    return mix(seed, i, 1) % len(FORMS)


def pod_kind(seed: int, i: int, created: int, pod_since: int) -> int:
    """Index into :data:`POD_KINDS` of container ``i``, or ``NONE`` when it has no pod object."""
    if created < pod_since:
        return NONE
    return mix(seed, i, 2) % len(POD_KINDS)


@lru_cache(maxsize=65536)
def bare_date(ts: int, tz: str) -> str:
    """``YYYY-MM-DD`` of instant ``ts`` in zone ``tz``."""
    return W.local_date(ts, tz).isoformat()


def _wire(ts: int, tz: str | None, as_date: bool) -> str | None:
    if ts >= NEVER:
        return None
    if as_date and tz is not None:
        return bare_date(ts, tz)
    return iso(ts)


def lfd_attributes(
    c: W.Row, i: int, t: int, seed: int, pod_since: int, pod_tz: str, ind_tz: str | None
) -> dict[str, Any]:
    """``pickup_lfd``, ``ind_facility_lfd_on``, ``import_deadlines`` and ``ssl_lfd`` of container
    row ``c`` (index ``i``) at clock ``t``."""
    form = wire_form(seed, i)
    dates = form == FORM_DATE
    rail_dates = form != FORM_INSTANT
    lfd_t = W.terminal_lfd(c, t)
    lfd_l = W.line_lfd(c, t)
    lfd_r = W.rail_lfd(c, t)
    lfd = lfd_l if lfd_l < NEVER else lfd_t
    if lfd >= NEVER and lfd_r < NEVER and ind_tz is not None:
        lfd = W.local_midnight(W.local_date(lfd_r, ind_tz), pod_tz)
    line = _wire(lfd_l, pod_tz, dates)
    rail = _wire(lfd_r, ind_tz, rail_dates)
    deadlines: dict[str, Any] = {
        "pickup_lfd_terminal": _wire(lfd_t, pod_tz, dates),
        "pickup_lfd_rail": rail,
        "pickup_lfd_line": line,
    }
    kind = pod_kind(seed, i, c["created"], pod_since)
    if kind != NONE:
        deadlines["pod"] = _pod(c, t, kind, lfd_t, lfd_l, pod_tz, dates)
    return {
        "pickup_lfd": _wire(lfd, pod_tz, dates),
        "ind_facility_lfd_on": rail,
        "import_deadlines": deadlines,
        "ssl_lfd": line,
    }


def _pod(
    c: W.Row, t: int, kind: int, lfd_t: int, lfd_l: int, tz: str, dates: bool
) -> dict[str, Any]:
    """The ``import_deadlines.pod`` object of one container (shape of the vendor's reference)."""
    name = POD_KINDS[kind]
    line_orig = line_calc = fac_orig = NEVER
    line_cur, fac_cur = lfd_l, lfd_t
    fac_manual = False
    calc = W.lfd_after(c["discharged"], LINE_FREE_DAYS, tz) if t >= c["discharged"] else NEVER
    unified, selection = NEVER, ""
    orig_value, orig_selection = NEVER, ""
    if name == "facility":
        unified, selection = fac_cur, "facility"
    elif name == "line":
        unified, selection = line_cur, "line"
    elif name == "line_calculated":
        line_calc = calc
        unified, selection = calc, "line_calculated"
    elif name == "manual" and lfd_t < NEVER:
        fac_orig, fac_cur, fac_manual = lfd_t, W.shift_lfd(lfd_t, 2, tz), True
        unified, selection = fac_cur, "facility"
        orig_value, orig_selection = lfd_t, "facility"
    elif name == "line_revised":
        base = lfd_l if lfd_l < NEVER else calc
        if base < NEVER:
            line_orig, line_cur = base, W.shift_lfd(base, 1, tz)
        unified, selection = line_cur, "line"

    def w(ts: int) -> str | None:
        return _wire(ts, tz, dates)

    has_unified = unified < NEVER
    return {
        "line": {
            "original": w(line_orig),
            "current": w(line_cur),
            "calculated": w(line_calc),
            "manual": False,
        },
        "facility": {
            "original": w(fac_orig),
            "current": w(fac_cur),
            "calculated": None,
            "manual": fac_manual,
        },
        "unified": {
            "original_value": w(orig_value),
            "original_selection": orig_selection if orig_value < NEVER else None,
            "current_value": w(unified),
            "current_selection": selection if has_unified else None,
        },
    }
