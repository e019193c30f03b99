"""Client-side pacing under a rolling-window rate limit."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable


class RollingWindowLimiter:
    """At most ``limit`` acquisitions in any ``window`` seconds (plus ``margin``), thread-safe.

    The API counts requests in a rolling 60 s window per key. Pacing to exactly that window keeps
    the budget fully used without 429s; a token bucket with a burst would overshoot it.
    ``limit=None`` disables pacing.
    """

    def __init__(
        self,
        limit: int | None,
        window: float = 60.0,
        margin: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.limit = limit
        self.window = window + margin
        self._sent: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()
        self._clock = clock
        self._sleep = sleep
        self.waited_s = 0.0

    def acquire(self) -> None:
        """Block until one more request fits in the window, then record it."""
        if not self.limit:
            return
        while True:
            with self._lock:
                now = self._clock()
                while self._sent and now - self._sent[0] >= self.window:
                    self._sent.popleft()
                if len(self._sent) < self.limit:
                    self._sent.append(now)
                    return
                wait = self.window - (now - self._sent[0])
            self.waited_s += wait
            self._sleep(max(wait, 0.001))

    def penalise(self, seconds: float) -> None:
        """After a 429, hold every sender back: fill the window as if it were just used up."""
        if not self.limit:
            return
        with self._lock:
            until = self._clock() + seconds - self.window
            self._sent = collections.deque([until] * self.limit)
