"""One writer publishes at a time: the warehouse's writer lock.

A writer stages its rows without the lock (:mod:`.staging`) and holds it only for the
publishing transaction (:func:`pipelines.write.write`). The lock is a small interface,
:class:`WriterLock`: :class:`FileWriterLock` is the DuckDB warehouse's (an advisory lock on a
file in its working folder); a database warehouse implements the same two-line contract with
the database's own lock (e.g. PostgreSQL's ``pg_try_advisory_lock`` in a loop).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from pipelines.config import resolve_writer_wait, working_folder
from pipelines.warehouse import WarehouseError

log = logging.getLogger("freetime.write")


class WriterBusy(WarehouseError):
    """Another writer of the warehouse kept it for the whole wait."""


class WriterLock(Protocol):
    """The warehouse's writer lock.

    ``hold(what, wait_seconds, on_wait)`` is a context manager holding the lock for its block:
    while another process holds it, say once (``on_wait``) whom we wait for, and raise
    :class:`WriterBusy` after ``wait_seconds`` (None: :func:`pipelines.config.resolve_writer_wait`).
    A process that dies releases it. Re-entrant within a thread.
    """

    def hold(
        self,
        what: str,
        wait_seconds: float | None = None,
        on_wait: Callable[[str], None] | None = None,
    ) -> contextlib.AbstractContextManager[None]: ...


class HeldLocks:
    """The writer locks this process holds, by key, with their depth: a step nested inside
    another step's hold takes nothing more (every warehouse's lock uses one of these)."""

    def __init__(self) -> None:
        self._depth: dict[object, int] = {}
        self._guard = threading.Lock()

    @contextlib.contextmanager
    def nested(self, key: object) -> Iterator[bool]:
        """True (and counted while inside) when ``key`` is held already."""
        with self._guard:
            nested = key in self._depth
            if nested:
                self._depth[key] += 1
        try:
            yield nested
        finally:
            if nested:
                with self._guard:
                    self._depth[key] -= 1

    @contextlib.contextmanager
    def holding(self, key: object) -> Iterator[None]:
        """Mark ``key`` held while inside (the caller has just acquired it)."""
        with self._guard:
            self._depth[key] = 1
        try:
            yield
        finally:
            with self._guard:
                del self._depth[key]


# lock file and thread: a thread that publishes in nested steps takes it once; another thread
# of the process waits like another process would
_held = HeldLocks()


class FileWriterLock:
    """:class:`WriterLock` of a DuckDB warehouse: ``flock`` on ``writer.lock`` in its working
    folder, which also names the holder (what, pid, since when) for the waiting message."""

    def __init__(self, duckdb_path: Path) -> None:
        self.path = working_folder(duckdb_path) / "writer.lock"

    @contextlib.contextmanager
    def hold(
        self,
        what: str,
        wait_seconds: float | None = None,
        on_wait: Callable[[str], None] | None = None,
    ) -> Iterator[None]:
        key = (self.path, threading.get_ident())
        with _held.nested(key) as nested:
            if nested:
                yield
                return
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                wait = resolve_writer_wait(wait_seconds)
                _acquire(fd, self.path, wait, on_wait or (lambda line: log.warning("%s", line)))
                os.ftruncate(fd, 0)
                holder = {"what": what, "pid": os.getpid(), "started_at": _now().isoformat()}
                os.write(fd, json.dumps(holder).encode())
                try:
                    with _held.holding(key):
                        yield
                finally:
                    os.ftruncate(fd, 0)
            finally:
                os.close(fd)  # closing releases the lock


def writer_lock(
    duckdb_path: Path,
    what: str,
    wait_seconds: float | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> contextlib.AbstractContextManager[None]:
    """Hold the writer lock of the DuckDB warehouse at ``duckdb_path`` (see
    :class:`WriterLock`; default message: a warning)."""
    return FileWriterLock(duckdb_path).hold(what, wait_seconds, on_wait)


def flock_within(
    fd: int, wait_seconds: float, on_first_wait: Callable[[], None] | None = None
) -> bool:
    """Take an exclusive ``flock`` on ``fd``, trying until ``wait_seconds`` have passed: True
    once held, False when another holder still had it then. ``on_first_wait`` runs once, when
    the first try finds it held. Closing ``fd`` (or the process ending) releases it."""
    deadline = time.monotonic() + wait_seconds
    said = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            if not said and on_first_wait is not None:
                on_first_wait()
            said = True
            time.sleep(0.05)


def _acquire(fd: int, path: Path, wait_seconds: float, on_wait: Callable[[str], None]) -> None:
    def say() -> None:
        on_wait(f"waiting for {_holder(path)} to finish writing the warehouse")

    if not flock_within(fd, wait_seconds, say):
        raise WriterBusy(
            f"the warehouse is being written by {_holder(path)} and was not free after "
            f"{wait_seconds:.0f}s; try again later"
        )


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
        started = dt.datetime.fromisoformat(info["started_at"]).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"the {info['what']} (pid {info['pid']}) that started at {started}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another writer"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
