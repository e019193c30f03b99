"""The durable local inbox: one SQLite file, one row per notification id.

Contract:
- a notification is stored once however often it is delivered (``id`` is the primary key,
  ``INSERT OR IGNORE``); a repeat only bumps ``deliveries``;
- :meth:`Inbox.add_many` returns only after its transaction is committed with
  ``synchronous=FULL`` in WAL mode, so a notification acknowledged after it survives a killed
  process (and a power cut);
- the receiver writes here, :func:`pipelines.webhooks.apply.apply_inbox` reads the rows not yet
  applied and marks them; neither ever holds the DuckDB lock while the other works. SQLite lets
  a reader and one writer work at once (WAL); writers wait for each other (``busy_timeout``).

:class:`GroupCommitter` batches concurrent deliveries into one transaction (one fsync for many
notifications), which is what lets one receiver acknowledge hundreds per second.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from pipelines.config import ConfigError, Warehouse, resolve_warehouse

INBOX_ENV = "FREETIME_INBOX"
MAX_BODY_BYTES = 10 * 1024 * 1024

SCHEMA = """
CREATE TABLE IF NOT EXISTS notifications (
    id          TEXT PRIMARY KEY,
    event       TEXT NOT NULL,
    created_at  TEXT,
    received_at TEXT NOT NULL,
    source      TEXT NOT NULL,
    deliveries  INTEGER NOT NULL DEFAULT 1,
    body        BLOB NOT NULL,
    applied_at  TEXT
);
CREATE INDEX IF NOT EXISTS notifications_pending
    ON notifications (created_at) WHERE applied_at IS NULL;
CREATE INDEX IF NOT EXISTS notifications_applied
    ON notifications (applied_at) WHERE applied_at IS NOT NULL;
"""


def default_inbox_path(
    duckdb_path: str | os.PathLike[str] | Warehouse | None = None,
) -> Path:
    """Env ``FREETIME_INBOX``, else ``inbox.sqlite`` beside the warehouse file; for a
    PostgreSQL warehouse, in its local working folder (:meth:`Warehouse.working_folder`)."""
    env = os.environ.get(INBOX_ENV)
    if env:
        return Path(env)
    warehouse = resolve_warehouse(duckdb_path)
    if warehouse.path is None:
        return warehouse.working_folder() / "inbox.sqlite"
    return warehouse.path.parent / "inbox.sqlite"


class InboxUnusable(ConfigError):
    """The inbox path is a folder, not an SQLite inbox, or cannot be created (message says)."""


class MalformedNotification(ValueError):
    """The body is not a webhook notification; the message says why (safe to send back)."""


@dataclass(frozen=True)
class Notification:
    """A delivery that parsed as a notification: its id, event, creation time and raw body."""

    id: str
    event: str
    created_at: str | None
    body: bytes


def parse_notification(body: bytes) -> Notification:
    """Check the shape the apply step relies on; raise :class:`MalformedNotification`.

    Required: a JSON object whose ``data`` is an object with a non-empty string ``id``, ``type``
    ``webhook_notification`` (when present) and ``attributes.event`` a non-empty string;
    ``included``, when present, an array.
    """
    if len(body) > MAX_BODY_BYTES:
        raise MalformedNotification(f"body larger than {MAX_BODY_BYTES} bytes")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedNotification(f"body is not JSON ({exc.msg})") from None
    return notification_from_doc(doc, body)


def notification_from_doc(doc: Any, body: bytes) -> Notification:
    if not isinstance(doc, dict):
        raise MalformedNotification("body is not a JSON object")
    data = doc.get("data")
    if not isinstance(data, dict):
        raise MalformedNotification("`data` is missing or not an object")
    nid = data.get("id")
    if not isinstance(nid, str) or not nid.strip():
        raise MalformedNotification("`data.id` is missing or not a string")
    kind = data.get("type")
    if kind is not None and kind != "webhook_notification":
        raise MalformedNotification(f"`data.type` is {kind!r}, not webhook_notification")
    attributes = data.get("attributes")
    if not isinstance(attributes, dict):
        raise MalformedNotification("`data.attributes` is missing or not an object")
    event = attributes.get("event")
    if not isinstance(event, str) or not event:
        raise MalformedNotification("`data.attributes.event` is missing or not a string")
    included = doc.get("included")
    if included is not None and not isinstance(included, list):
        raise MalformedNotification("`included` is not an array")
    created = attributes.get("created_at")
    return Notification(nid, event, created if isinstance(created, str) else None, body)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class InboxRow:
    id: str
    event: str
    created_at: str | None
    received_at: str
    source: str
    deliveries: int
    body: bytes
    applied_at: str | None


class Inbox:
    """One connection to the inbox file; use one instance per thread."""

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 30.0) -> None:
        """Open (creating if missing) the inbox at ``path``; :class:`InboxUnusable` if it is a
        folder, not an SQLite file, or cannot be created."""
        self.path = Path(path)
        if self.path.is_dir():
            raise InboxUnusable(
                f"the inbox path {self.path} is a folder; give a file, e.g. "
                f"{self.path / 'inbox.sqlite'}"
            )
        con = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(
                str(self.path), timeout=timeout_s, isolation_level=None, check_same_thread=False
            )
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=FULL")
            con.execute(f"PRAGMA busy_timeout={int(timeout_s * 1000)}")
            con.executescript(SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            if con is not None:
                con.close()
            raise InboxUnusable(f"cannot open the inbox {self.path}: {exc}") from exc
        self._con = con

    def close(self) -> None:
        self._con.close()

    @contextlib.contextmanager
    def applying(self) -> Iterator[None]:
        """Be the one applier of this inbox for the block (the receiver's, ``webhooks apply``,
        the sync flow's step): another waits its turn, then finds applied what was. An advisory
        lock on ``<inbox>.apply.lock``, released if the process dies."""
        fd = os.open(f"{self.path}.apply.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def __enter__(self) -> Inbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes --------------------------------------------------------------------------------
    def add_many(
        self,
        items: Sequence[Notification],
        source: str = "delivery",
        received_at: str | None = None,
    ) -> list[bool]:
        """Store ``items`` in one committed transaction; True for each id not seen before."""
        if not items:
            return []
        received = received_at or _now()
        con = self._con
        new: list[bool] = []
        con.execute("BEGIN IMMEDIATE")
        try:
            for n in items:
                cur = con.execute(
                    "INSERT OR IGNORE INTO notifications "
                    "(id, event, created_at, received_at, source, body) VALUES (?,?,?,?,?,?)",
                    (n.id, n.event, n.created_at, received, source, n.body),
                )
                if cur.rowcount == 1:
                    new.append(True)
                else:
                    new.append(False)
                    con.execute(
                        "UPDATE notifications SET deliveries = deliveries + 1 WHERE id = ?",
                        (n.id,),
                    )
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return new

    def add(self, item: Notification, source: str = "delivery") -> bool:
        return self.add_many([item], source)[0]

    def mark_applied(self, ids: Iterable[str], applied_at: str | None = None) -> int:
        when = applied_at or _now()
        ids = list(ids)
        con = self._con
        con.execute("BEGIN IMMEDIATE")
        try:
            n = 0
            for chunk in _chunks(ids, 500):
                marks = ",".join("?" * len(chunk))
                cur = con.execute(
                    f"UPDATE notifications SET applied_at = ? WHERE id IN ({marks}) "
                    "AND applied_at IS NULL",
                    (when, *chunk),
                )
                n += cur.rowcount
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return n

    # -- reads ---------------------------------------------------------------------------------
    def pending(self, limit: int = 5_000) -> list[InboxRow]:
        """Rows not applied yet, oldest notification first."""
        cur = self._con.execute(
            "SELECT id, event, created_at, received_at, source, deliveries, body, applied_at "
            "FROM notifications WHERE applied_at IS NULL "
            "ORDER BY created_at, received_at, id LIMIT ?",
            (limit,),
        )
        return [InboxRow(*r) for r in cur.fetchall()]

    def get(self, nid: str) -> InboxRow | None:
        row = self._con.execute(
            "SELECT id, event, created_at, received_at, source, deliveries, body, applied_at "
            "FROM notifications WHERE id = ?",
            (nid,),
        ).fetchone()
        return InboxRow(*row) if row else None

    def known(self, ids: Iterable[str]) -> set[str]:
        out: set[str] = set()
        for chunk in _chunks(list(ids), 500):
            marks = ",".join("?" * len(chunk))
            rows = self._con.execute(
                f"SELECT id FROM notifications WHERE id IN ({marks})", chunk
            ).fetchall()
            out.update(r[0] for r in rows)
        return out

    def ids(self) -> set[str]:
        return {r[0] for r in self._con.execute("SELECT id FROM notifications").fetchall()}

    def prune(self, applied_before: str) -> int:
        """Delete the notifications applied before ``applied_before`` (an ISO 8601 UTC instant,
        as ``applied_at`` is written); returns how many.

        Their payloads are in the warehouse (``webhook_notifications.payload``). A redelivery of
        one of them after this is stored and applied again, which changes nothing: every table
        merges on its key and an older notification never overwrites a newer row. Freed pages
        are reused, so the file stops growing at about the kept days' deliveries.
        """
        cur = self._con.execute(
            "DELETE FROM notifications WHERE applied_at IS NOT NULL AND applied_at < ?",
            (applied_before,),
        )
        return cur.rowcount

    def backlog(self) -> tuple[int, str | None]:
        """The notifications not applied yet, and when the oldest of them was received."""
        count, oldest = self._con.execute(
            "SELECT count(*), min(received_at) FROM notifications WHERE applied_at IS NULL"
        ).fetchone()
        return int(count), oldest

    def counts(self) -> dict[str, int]:
        total, pending, deliveries = self._con.execute(
            "SELECT count(*), count(*) FILTER (WHERE applied_at IS NULL), "
            "coalesce(sum(deliveries), 0) FROM notifications"
        ).fetchone()
        return {"stored": total, "pending": pending, "deliveries": deliveries}


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class GroupCommitter:
    """One writer thread that commits whatever deliveries are waiting in one transaction.

    :meth:`submit` returns a future that resolves (to "new or not") only once the row is
    committed; the receiver awaits it before answering. One fsync then covers every delivery
    that arrived while the previous transaction was being written.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_batch: int = 512,
        on_commit: Callable[[], None] | None = None,
    ) -> None:
        """``on_commit`` is called (from the writer thread) after each committed transaction
        that stored a new notification: the receiver's applier wakes on it."""
        self.path = Path(path)
        self.max_batch = max_batch
        self.on_commit = on_commit
        self._queue: queue.Queue[tuple[Notification, Callable[[bool | BaseException], None]] | None]
        self._queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.commits = 0

    def start(self) -> GroupCommitter:
        self._thread = threading.Thread(target=self._run, name="inbox-writer", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def submit(self, item: Notification, done: Callable[[bool | BaseException], None]) -> None:
        """Queue ``item``; ``done`` is called from the writer thread with the outcome."""
        self._queue.put((item, done))

    def _run(self) -> None:
        try:
            inbox = Inbox(self.path)
        except BaseException as exc:  # surfaced by start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        stopping = False
        try:
            while not stopping:
                first = self._queue.get()
                if first is None:
                    break
                batch = [first]
                while len(batch) < self.max_batch:
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is None:
                        stopping = True
                        break
                    batch.append(nxt)
                self._commit(inbox, batch)
        finally:
            inbox.close()

    def _commit(
        self,
        inbox: Inbox,
        batch: list[tuple[Notification, Callable[[bool | BaseException], None]]],
    ) -> None:
        # The same id twice in one batch: INSERT OR IGNORE keeps the first, the second counts
        # as a repeat delivery, exactly as if they had come in two transactions.
        try:
            results: list[bool | BaseException] = list(inbox.add_many([n for n, _ in batch]))
            self.commits += 1
        except BaseException as exc:  # disk full, locked too long: every waiter gets a 503
            results = [exc] * len(batch)
        for (_, done), result in zip(batch, results, strict=True):
            done(result)
        if self.on_commit is not None and any(r is True for r in results):
            self.on_commit()
