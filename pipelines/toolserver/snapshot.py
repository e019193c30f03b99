"""Reads that never stand in a writer's way: the tool server answers from a private copy.

DuckDB lets one process write a file or many read it, never both. A server that kept the
warehouse open would block every load; one that opened it per call would still starve a load
under a steady stream of calls (the load only polls for the lock). So the server reads a
*snapshot*: a copy of the warehouse file (and its WAL) taken while holding a read-only
connection on it. The copy is private, so before it serves, ``prepare`` may add to it what
makes calls fast (indexes, derived tables) on a read-write connection; it is then reopened
read-only with file and network access disabled. A call compares the warehouse's size and
modification time with the snapshot's; when they differ it refreshes the snapshot in the
background (keeping on answering from the current one) as soon as no writer holds the file.
A writer waits at most for one copy. Only the first call, with no snapshot yet, has to wait
for the file (concurrent first calls share one copy): briefly, then :class:`WarehouseBusy`.

Answers are memoized per snapshot (:meth:`Snapshot.cached`): a snapshot never changes, so the
same question gets the same answer until the next snapshot replaces it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from pipelines.warehouse import WarehouseError, WarehouseLocked, WarehouseMissing, connect

#: DuckDB settings of every connection the server opens: no file, network or extension
#: access from SQL, whatever the defaults. The snapshot's connection then sets its time zone
#: to UTC and locks the configuration, so no statement can change any of it.
SAFE_CONFIG: dict[str, Any] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "memory_limit": "512MB",
}
#: Answers a snapshot remembers (the least recently used go first).
CACHED_ANSWERS = 256

BUSY_MESSAGE = "the warehouse is being written, retry in a few seconds"
#: Prefix of each server's folder of copies in the temporary directory; the pid follows.
COPIES_PREFIX = "freetime-mcp-"


def remove_orphaned_copies() -> None:
    """Delete the folders of copies in the temporary directory whose server process is gone:
    a server killed without its cleanup leaves a whole warehouse copy behind."""
    for folder in Path(tempfile.gettempdir()).glob(f"{COPIES_PREFIX}*-*"):
        pid = folder.name[len(COPIES_PREFIX) :].split("-", 1)[0]
        if folder.is_dir() and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        pass
    return True


def open_snapshot(path: Path) -> duckdb.DuckDBPyConnection:
    """A read-only connection to the snapshot at ``path`` with :data:`SAFE_CONFIG`, its time
    zone UTC and its configuration locked (cursors inherit all of it)."""
    con = duckdb.connect(str(path), read_only=True, config=SAFE_CONFIG)
    # GLOBAL: cursors are new connections to the same database and inherit these.
    con.execute("SET GLOBAL TimeZone = 'UTC'")
    con.execute("SET GLOBAL lock_configuration = true")
    return con


class WarehouseBusy(WarehouseError):
    """No snapshot yet and a writer held the warehouse for the whole wait."""


Signature = tuple[int, int, int, int]


def _signature(path: Path) -> Signature:
    """Size and mtime of the file and of its WAL: any write changes one of them."""
    out: list[int] = []
    for p in (path, Path(f"{path}.wal")):
        try:
            st = p.stat()
            out += [st.st_size, st.st_mtime_ns]
        except FileNotFoundError:
            out += [-1, -1]
    return (out[0], out[1], out[2], out[3])


def _copy(src: Path, dst: Path) -> None:
    """Copy in a child process: closing a descriptor of ``src`` in this process would drop
    the POSIX lock our read-only DuckDB connection holds on it, letting a writer in mid-copy."""
    subprocess.run(
        ["cp", "--reflink=auto", str(src), str(dst)],
        check=True,
        stdin=subprocess.DEVNULL,
        capture_output=True,
    )


@dataclass
class Snapshot:
    """One immutable copy of the warehouse and its read-only connection."""

    path: Path
    signature: Signature
    taken_at: float
    con: duckdb.DuckDBPyConnection
    users: int = 0
    retired: bool = False
    _answers: OrderedDict[Hashable, Any] = field(default_factory=OrderedDict)
    _answers_lock: threading.Lock = field(default_factory=threading.Lock)

    def cached(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()``, remembered under ``key`` for this snapshot. Not computed under a
        lock: two first calls may both compute, and the answers are equal."""
        with self._answers_lock:
            if key in self._answers:
                self._answers.move_to_end(key)
                return self._answers[key]
        value = compute()
        with self._answers_lock:
            self._answers[key] = value
            while len(self._answers) > CACHED_ANSWERS:
                self._answers.popitem(last=False)
        return value

    def close(self) -> None:
        self.con.close()
        for p in (self.path, Path(f"{self.path}.wal")):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()


class SnapshotReader:
    """Hands out read-only cursors on the latest snapshot of the warehouse at ``path``.

    ``first_wait``: seconds the first call waits for a writer to finish (no snapshot yet);
    ``recheck``: seconds between two looks at the warehouse's signature; ``prepare``: run on a
    read-write connection to each new copy before it serves (indexes, derived tables).
    """

    def __init__(
        self,
        path: Path,
        *,
        first_wait: float = 3.0,
        recheck: float = 0.5,
        prepare: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.prepare = prepare
        self.first_wait = first_wait
        self.recheck = recheck
        remove_orphaned_copies()
        self._dir = Path(tempfile.mkdtemp(prefix=f"{COPIES_PREFIX}{os.getpid()}-"))
        self._lock = threading.Condition()
        self._current: Snapshot | None = None
        self._refreshing = False
        self._checked_at = 0.0
        self._generation = 0
        self._first = threading.Lock()  # concurrent first calls take one snapshot

    # -- taking a snapshot -------------------------------------------------------------
    def _take(self, retry_seconds: float) -> Snapshot:
        """Copy the warehouse under a read-only connection and open the copy."""
        if not self.path.exists():
            raise WarehouseMissing(
                f"no warehouse at {self.path}: run `freetime load` (or `freetime run`) first"
            )
        try:
            guard = connect(
                self.path,
                read_only=True,
                retry_seconds=retry_seconds,
                poll_seconds=0.05,
                config=SAFE_CONFIG,
            )
        except WarehouseLocked as exc:
            raise WarehouseBusy(BUSY_MESSAGE) from exc
        with self._lock:
            self._generation += 1
            dst = self._dir / f"snapshot-{self._generation}.duckdb"
        try:
            signature = _signature(self.path)
            _copy(self.path, dst)
            wal = Path(f"{self.path}.wal")
            if wal.exists():
                _copy(wal, Path(f"{dst}.wal"))
        finally:
            guard.close()
        if self.prepare is not None:
            rw = duckdb.connect(str(dst), config=SAFE_CONFIG)
            try:
                rw.execute("SET TimeZone = 'UTC'")
                self.prepare(rw)
                rw.execute("CHECKPOINT")
            finally:
                rw.close()
        return Snapshot(dst, signature, time.time(), open_snapshot(dst))

    def _install(self, snap: Snapshot) -> None:
        with self._lock:
            old, self._current = self._current, snap
            self._checked_at = time.monotonic()
        if old is not None:
            self._retire(old)

    def _retire(self, snap: Snapshot) -> None:
        with self._lock:
            snap.retired = True
            idle = snap.users == 0
        if idle:
            snap.close()

    def _refresh_in_background(self) -> None:
        def run() -> None:
            try:
                self._install(self._take(retry_seconds=0))
            except WarehouseError:
                pass  # a writer holds the file (or it vanished): the next call tries again
            finally:
                with self._lock:
                    self._refreshing = False
                    self._checked_at = time.monotonic()

        threading.Thread(target=run, name="freetime-mcp-snapshot", daemon=True).start()

    def _current_snapshot(self) -> Snapshot:
        with self._lock:
            snap = self._current
            due = time.monotonic() - self._checked_at >= self.recheck
            if snap is not None and due and not self._refreshing:
                self._checked_at = time.monotonic()
                if _signature(self.path) != snap.signature:
                    self._refreshing = True
                    self._refresh_in_background()
            if snap is not None:
                snap.users += 1
                return snap
        with self._first:
            with self._lock:
                snap = self._current
                if snap is not None:  # another first call took it meanwhile
                    snap.users += 1
                    return snap
            snap = self._take(retry_seconds=self.first_wait)
            with self._lock:
                self._current = snap
                self._checked_at = time.monotonic()
                snap.users += 1
                return snap

    # -- public --------------------------------------------------------------------------
    @contextlib.contextmanager
    def snapshot(self) -> Iterator[Snapshot]:
        """The latest snapshot, kept open (not replaced under the caller) for the block."""
        snap = self._current_snapshot()
        try:
            yield snap
        finally:
            with self._lock:
                snap.users -= 1
                done = snap.retired and snap.users == 0
            if done:
                snap.close()

    def close(self) -> None:
        """Close the snapshot and delete the copies."""
        with self._lock:
            snap, self._current = self._current, None
        if snap is not None:
            snap.close()
        shutil.rmtree(self._dir, ignore_errors=True)
