"""Seeded fault injection for ``/v2`` GET requests.

Spec syntax: comma-separated ``key=value`` pairs, e.g.
``5xx=0.05,429=0.05,truncate=0.01,drop=0.01,slow=0.02,slow_seconds=2``.

- ``5xx``: answer 500, 502 or 503 with a JSON:API error body.
- ``429``: answer 429 with ``Retry-After: 1`` (a short burst, not the configured rate limit).
- ``truncate``: send the full ``Content-Length`` but only part of the body, then close.
- ``drop``: close the connection without answering.
- ``slow``: answer normally after ``slow_seconds * U(0.5, 1.5)`` seconds (default 2 -> 1-3 s).

Rates are probabilities in [0, 1] whose sum is at most 1. The decision for the n-th ``/v2`` GET
depends only on (seed, n), so a run is reproducible for a given request sequence.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

#: seconds of the API's rolling rate-limit window (``--rate-limit`` counts in it; a test may
#: shorten it with ``--rate-window-seconds``)
RATE_WINDOW = 60.0

FAULT_KINDS: tuple[str, ...] = ("5xx", "429", "truncate", "drop", "slow")


class FaultSpecError(ValueError):
    """A malformed ``--faults`` spec; the message is one line meant for the user."""


@dataclass(frozen=True)
class FaultSpec:
    """Fault probabilities per request and the slow-answer scale."""

    rates: tuple[tuple[str, float], ...] = ()
    slow_seconds: float = 2.0

    @property
    def enabled(self) -> bool:
        """Whether any fault has a positive rate."""
        return any(r > 0 for _, r in self.rates)

    @classmethod
    def parse(cls, spec: str | None) -> FaultSpec:
        """Parse a spec string (None or empty -> no faults). Raises :class:`FaultSpecError`."""
        if spec is None or not spec.strip():
            return cls()
        rates: dict[str, float] = {}
        slow_seconds = 2.0
        for part in spec.split(","):
            part = part.strip()
            if not part:
                continue
            key, sep, raw = part.partition("=")
            key = key.strip()
            if not sep:
                raise FaultSpecError(f"fault spec item {part!r} is not key=value")
            try:
                value = float(raw)
            except ValueError:
                raise FaultSpecError(
                    f"fault spec value for {key!r} is not a number: {raw!r}"
                ) from None
            if key == "slow_seconds":
                if not 0 <= value <= 60:
                    raise FaultSpecError("slow_seconds must be between 0 and 60")
                slow_seconds = value
                continue
            if key not in FAULT_KINDS:
                raise FaultSpecError(
                    f"unknown fault {key!r}; expected one of {', '.join(FAULT_KINDS)}, slow_seconds"
                )
            if not 0.0 <= value <= 1.0:
                raise FaultSpecError(f"fault rate for {key!r} must be within [0, 1], got {value}")
            rates[key] = value
        if sum(rates.values()) > 1.0 + 1e-9:
            raise FaultSpecError("fault rates add up to more than 1")
        return cls(tuple((k, rates[k]) for k in FAULT_KINDS if k in rates), slow_seconds)


@dataclass(frozen=True)
class Fault:
    """The fault chosen for one request."""

    kind: str  # one of FAULT_KINDS
    status: int = 0  # for 5xx
    delay: float = 0.0  # for slow
    cut: float = 0.5  # for truncate: fraction of the body sent


class FaultInjector:
    """Decides, per request number, whether and how to misbehave."""

    def __init__(self, spec: FaultSpec, seed: int) -> None:
        self.spec = spec
        self.seed = seed

    def decide(self, n: int) -> Fault | None:
        """Fault for the ``n``-th /v2 GET (None = answer normally)."""
        if not self.spec.enabled:
            return None
        rng = random.Random(f"{self.seed}:fault:{n}")
        u = rng.random()
        acc = 0.0
        for kind, rate in self.spec.rates:
            acc += rate
            if u < acc:
                if kind == "5xx":
                    return Fault(kind, status=rng.choice((500, 502, 503)))
                if kind == "slow":
                    return Fault(kind, delay=self.spec.slow_seconds * rng.uniform(0.5, 1.5))
                if kind == "truncate":
                    return Fault(kind, cut=rng.uniform(0.1, 0.9))
                return Fault(kind)
        return None
