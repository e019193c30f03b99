"""Client-side pacing under a rolling-window rate limit: per client, or shared by every
process on the machine that uses one key (:class:`SharedWindowLimiter`)."""

from __future__ import annotations

import collections
import contextlib
import fcntl
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol


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
        #: seconds during which at least one sender waited (wall time, not summed per thread)
        self.waited_s = 0.0
        self._waiters = 0
        self._wait_since = 0.0
        self._wait_guard = threading.Lock()

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
            self._wait(max(wait, 0.001))

    def _wait(self, seconds: float) -> None:
        with self._wait_guard:
            if self._waiters == 0:
                self._wait_since = self._clock()
            self._waiters += 1
        try:
            self._sleep(seconds)
        finally:
            with self._wait_guard:
                self._waiters -= 1
                if self._waiters == 0:
                    self.waited_s += self._clock() - self._wait_since

    def close(self) -> None:
        """Release what it holds (a subclass's connection); nothing here."""

    def penalise(self, seconds: float) -> None:
        """After a 429, hold every sender back: fill the window as if it were just used up."""
        if not self.limit:
            return
        with self._lock:
            until = self._clock() + seconds - self.window
            self._sent = collections.deque([until] * self.limit)


class SharedWindowLimiter(RollingWindowLimiter):
    """The same rolling window, shared by every process on this machine that paces through
    the file ``path`` (the writers of one warehouse: a full scan, the hourly sync, webhook
    applies, the events step): together they stay within ``limit`` a window.

    The window's send times live in ``path`` (JSON), read and rewritten under an exclusive
    ``fcntl`` lock for each acquisition; ``time.monotonic`` is the machine's clock on Linux, so
    the processes agree on it. A ``yielding`` limiter (the full scan, which has the whole
    night) spaces its requests evenly (a burst that filled the window would leave it only a
    window later, all at once: another writer would wait that long); it always leaves a tenth
    of the window free, so that another writer's first requests go at once, a quarter while
    one of them has sent in the last :data:`URGENT_HOLD_S` seconds, and it sends nothing
    while one of them waits for the window: every request that leaves the window then goes
    to the waiting writer, so the hourly sync is slowed as little as the budget allows.
    """

    #: seconds a non-yielding sender is considered active after its latest request
    URGENT_HOLD_S = 10.0
    #: seconds a non-yielding sender that waits for the window is considered waiting past the
    #: moment its wait ends (time to take the slot before a yielding sender does)
    WAITING_HOLD_S = 0.5

    def __init__(
        self,
        path: Path | None,
        limit: int | None,
        window: float = 60.0,
        margin: float = 0.5,
        *,
        yielding: bool = False,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(limit, window, margin, clock, sleep)
        self.path = path
        self.yielding = yielding
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def _shared(self) -> Iterator[dict[str, Any]]:
        """The window's state, read and written back under an exclusive lock: the one place
        a subclass keeping it elsewhere (a database shared by machines) overrides."""
        assert self.path is not None
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = b""
            while chunk := os.read(fd, 65536):
                raw += chunk
            try:
                state = json.loads(raw) if raw else {}
            except ValueError:  # a writer killed mid-write: start a fresh window
                state = {}
            if not isinstance(state, dict):
                state = {}
            yield state
            data = json.dumps(state).encode()
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, data)
        finally:
            os.close(fd)  # closing releases the lock

    def acquire(self) -> None:
        """Block until one more request fits in the shared window, then record it."""
        if not self.limit:
            return
        while True:
            with self._lock, self._shared() as state:
                now = self._clock()
                sent = [t for t in state.get("sent", []) if now - t < self.window]
                urgent = float(state.get("urgent_until", 0.0)) > now
                waiting = float(state.get("waiting_until", 0.0)) > now
                room = self.limit
                if self.yielding:  # a tenth always free, so another writer starts at once
                    room -= self.limit // 4 if urgent else self.limit // 10
                    if waiting:  # another writer waits for the budget: every slot is its
                        room = 0
                paced = float(state.get("yield_next", 0.0)) if self.yielding else 0.0
                if len(sent) < room and now >= paced:
                    sent.append(now)
                    state["sent"] = sent
                    if self.yielding:  # evenly spaced: its sends leave the window steadily
                        state["yield_next"] = now + self.window / (self.limit - self.limit // 10)
                    else:
                        state["urgent_until"] = now + self.URGENT_HOLD_S
                    return
                state["sent"] = sent
                if room <= 0:
                    full = self.window
                elif len(sent) >= room:  # until enough of the window's sends leave it
                    full = self.window - (now - sorted(sent)[len(sent) - room])
                else:
                    full = 0.0
                wait = max(full, paced - now, 0.05)
                if self.yielding and (urgent or waiting):
                    until = float(state["waiting_until" if waiting else "urgent_until"])
                    wait = min(wait, until - now + 0.05)
                elif not self.yielding:  # the yielding senders stop until it has sent
                    state["waiting_until"] = max(
                        float(state.get("waiting_until", 0.0)), now + wait + self.WAITING_HOLD_S
                    )
            self._wait(max(wait, 0.001))

    def penalise(self, seconds: float) -> None:
        """After a 429, hold every sender of every process back for ``seconds``."""
        if not self.limit:
            return
        with self._lock, self._shared() as state:
            until = self._clock() + seconds - self.window
            state["sent"] = [until] * self.limit


class BudgetStore(Protocol):
    """Where the key's window is shared beyond this machine (a database the writers share):
    makes the limiter of one key."""

    def limiter(
        self,
        key: str,
        limit: int | None,
        window: float,
        margin: float,
        *,
        yielding: bool,
        sleep: Callable[[float], None],
    ) -> RollingWindowLimiter: ...


def budget_key(base_url: str, api_key: str) -> str:
    """The name of one API key's (at one base URL) shared window: a digest, never the key."""
    return hashlib.sha256(f"{base_url.rstrip('/')}\n{api_key}".encode()).hexdigest()[:16]


def budget_file(folder: Path, base_url: str, api_key: str) -> Path:
    """The shared window of one API key (at one base URL) in ``folder``: the file is named
    by a digest, never by the key."""
    return folder / f"budget-{budget_key(base_url, api_key)}.json"
