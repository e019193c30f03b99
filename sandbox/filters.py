"""List filters of ``GET /containers`` and ``GET /shipments`` (the vendor's reference of 2026-10).

A filter parameter is ``filter[NAME]=EXPR`` or ``filter[NAME][]=EXPR`` (repeatable). Every EXPR
given for a NAME must hold (AND); inside one EXPR, comma-separated terms are alternatives (OR).
A term is an optional operator (``=``, ``<``, ``<=``, ``>``, ``>=``; none means ``=``) and a
value, or ``@exists`` / ``@not_exists``. Filters on different names combine with AND.

- Containers, ``updated_at`` and ``created_at``: a value is ``YYYY-MM-DD``, ``today``,
  ``N.days.ago`` or ``N.days.from_now`` (counted from the UTC date of the sandbox clock); it is
  compared with the UTC date component of the stored timestamp, never a port's local date.
- Shipments, ``created_at`` and ``pod_eta_changed_at``: a value is an ISO 8601 timestamp with a
  zone, compared with the stored instant. ``pod_eta_changed_at`` needs a lower bound and selects
  only active (tracking not stopped), unarrived shipments.

Unknown names are ignored (the unfiltered list, as live); ``pod_eta_at`` and ``pod_ata_at`` on
containers raise :class:`Unavailable` (live answers 500); a malformed value raises
:class:`FilterError`. Every term becomes a half-open interval of epoch seconds, so matching a
record is a few integer comparisons.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, timedelta

from sandbox.model import Account
from sandbox.world import DAY

LOW, HIGH = -(2**63), 2**63
Interval = tuple[int, int]  # [lo, hi)
Clause = tuple[Interval, ...]  # alternatives (OR)
Spec = dict[str, tuple[Clause, ...]]  # name -> clauses that must all hold (AND)

CONTAINER_DATE_FILTERS = ("updated_at", "created_at")
CONTAINER_UNAVAILABLE = ("pod_eta_at", "pod_ata_at")
SHIPMENT_TIME_FILTERS = ("created_at", "pod_eta_changed_at")

_KEY = re.compile(r"^filter\[([^\[\]]+)\](\[\])?$")
_TERM = re.compile(r"^(>=|<=|=|<|>)?(.*)$")
_RELATIVE = re.compile(r"^(\d+)\.days?\.(ago|from_now)$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class FilterError(ValueError):
    """A filter value that cannot be parsed (answered 400 with ``source.parameter``)."""

    def __init__(self, parameter: str, detail: str) -> None:
        super().__init__(detail)
        self.parameter = parameter
        self.detail = detail


class Unavailable(Exception):
    """A documented filter the live API answers with 500."""

    def __init__(self, parameter: str) -> None:
        super().__init__(parameter)
        self.parameter = parameter


def filter_params(items: Iterable[tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """``filter[...]`` query items grouped by filter name: name -> [(key as sent, value)]."""
    out: dict[str, list[tuple[str, str]]] = {}
    for key, value in items:
        m = _KEY.match(key)
        if m:
            out.setdefault(m.group(1), []).append((key, value))
    return out


def _interval(op: str, lo: int, hi: int) -> Interval:
    """Values compared with operator ``op`` to a value whose "equal" set is [lo, hi)."""
    if op == "<":
        return (LOW, lo)
    if op == "<=":
        return (LOW, hi)
    if op == ">":
        return (hi, HIGH)
    if op == ">=":
        return (lo, HIGH)
    return (lo, hi)


def _day(value: str, today: date) -> date | None:
    if value == "today":
        return today
    m = _RELATIVE.match(value)
    if m:
        n = timedelta(days=int(m.group(1)))
        return today - n if m.group(2) == "ago" else today + n
    if _DATE.match(value):
        try:
            return date.fromisoformat(value)
        except ValueError:
            return None
    return None


def _date_term(op: str, value: str, today: date) -> Interval | None:
    d = _day(value, today)
    if d is None:
        return None
    lo = int(datetime(d.year, d.month, d.day, tzinfo=UTC).timestamp())
    return _interval(op, lo, lo + DAY)


def _time_term(op: str, value: str) -> Interval | None:
    text = value.strip().replace(" ", "+")  # an unencoded "+" of the offset arrives as a space
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None or "T" not in text.upper():
        return None
    x = dt.timestamp()
    return _interval(op, math.ceil(x), math.floor(x) + 1)


def _clauses(
    given: list[tuple[str, str]], parse_value: Callable[[str, str], Interval | None], what: str
) -> tuple[Clause, ...]:
    out = []
    for key, raw in given:
        alts = []
        for term in raw.split(","):
            term = term.strip()
            if term == "@exists":
                alts.append((LOW, HIGH))
                continue
            if term == "@not_exists":
                continue  # these timestamps are never null
            m = _TERM.match(term)
            assert m is not None  # the pattern matches every string
            iv = parse_value(m.group(1) or "=", m.group(2))
            if iv is None:
                raise FilterError(key, f"{key} must be {what}, got {raw!r}")
            alts.append(iv)
        out.append(tuple(alts))
    return tuple(out)


def container_spec(items: Iterable[tuple[str, str]], clock: int) -> Spec:
    """The container filters in query ``items`` at sandbox ``clock``."""
    today = datetime.fromtimestamp(clock, UTC).date()
    spec: Spec = {}
    for name, given in filter_params(items).items():
        if name in CONTAINER_UNAVAILABLE:
            raise Unavailable(given[0][0])
        if name in CONTAINER_DATE_FILTERS:
            spec[name] = _clauses(
                given,
                lambda op, v: _date_term(op, v, today),
                "a date expression such as >=2026-10-01, today or 3.days.ago",
            )
    return spec


def shipment_spec(items: Iterable[tuple[str, str]]) -> Spec:
    """The shipment filters in query ``items``."""
    spec: Spec = {}
    for name, given in filter_params(items).items():
        if name in SHIPMENT_TIME_FILTERS:
            spec[name] = _clauses(
                given,
                _time_term,
                "an ISO 8601 timestamp with a zone such as >=2026-10-01T00:00:00Z",
            )
    clauses = spec.get("pod_eta_changed_at")
    if clauses is not None and not any(
        clause and all(lo > LOW for lo, _ in clause) for clause in clauses
    ):
        key = filter_params(items)["pod_eta_changed_at"][0][0]
        raise FilterError(key, f"{key} needs a lower bound such as >=2026-10-01T00:00:00Z")
    return spec


def _holds(v: int, clauses: tuple[Clause, ...]) -> bool:
    for clause in clauses:
        for lo, hi in clause:
            if lo <= v < hi:
                break
        else:
            return False
    return True


def select_containers(acct: Account, spec: Spec) -> list[int]:
    """Container indices of ``acct.order`` (same order) that satisfy ``spec``."""
    order = acct.order
    for name, column in (("updated_at", "refreshed"), ("created_at", "created")):
        clauses = spec.get(name)
        if clauses is not None:
            col = acct.containers.column(column)
            order = [i for i in order if _holds(col[i], clauses)]
    return order


def select_shipments(acct: Account, spec: Spec) -> list[int]:
    """Shipment indices of ``acct.ship_order`` (same order) that satisfy ``spec``."""
    order = acct.ship_order
    sh = acct.shipments
    clauses = spec.get("created_at")
    if clauses is not None:
        col = sh.column("created")
        order = [s for s in order if _holds(col[s], clauses)]
    clauses = spec.get("pod_eta_changed_at")
    if clauses is not None:
        t = acct.clock
        stop, ata = sh.column("stop_at"), sh.column("ata")
        order = [
            s
            for s in order
            if stop[s] > t and ata[s] > t and _holds(acct.eta_changed_at(s), clauses)
        ]
    return order
