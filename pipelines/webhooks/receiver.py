"""The webhook receiver: a Starlette app that verifies, validates and durably stores deliveries.

For each ``POST`` (to ``/webhooks/terminal49`` or ``/``):
1. without a well-formed ``X-T49-Webhook-Signature`` header (64 hex digits) the answer is
   **401** at once, before any of the body is read; a declared ``Content-Length`` over
   :data:`~.inbox.MAX_BODY_BYTES` is **413** at once too;
2. the body is read as it arrives, each chunk fed to the HMAC: past ``max_body_bytes`` (declared
   or not, e.g. chunked) the answer is **413** as soon as the cap is passed; a body not complete
   within ``body_timeout_s`` of its request head, or silent for ``read_timeout_s``, is **408**.
   These three answers close the connection, so the rest of the body is never read;
3. the header must equal the HMAC of the raw body (constant time), else **401**; nothing stored;
4. the body must be a notification (:func:`.inbox.parse_notification`), else **400**;
5. the notification is committed to the SQLite inbox (:class:`.inbox.GroupCommitter`) and only
   then answered **200** (``{"id": ..., "stored": true|false}``; false means a repeat delivery
   of an id already stored, which is acknowledged too so the sender stops retrying).
   If the inbox cannot be written the answer is **503**, and the sender retries later.

Under uvicorn with :func:`uvicorn_config`, a connection must also deliver a complete request
head within ``head_timeout_s`` (else it is closed), and at most ``max_connections`` are served
at once (requests beyond are answered 503, which the sender retries).

Storing never waits for the DuckDB warehouse, so the receiver keeps accepting while a load
holds it. Given an :class:`~.applier.Applier`, the receiver also applies what it stores within
seconds, in a thread of its own. ``GET /healthz`` reports counters, the inbox's backlog (and
the age of its oldest unapplied notification) and the applier's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import h11
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive
from uvicorn.protocols.http.h11_impl import H11Protocol

from pipelines.webhooks.inbox import (
    MAX_BODY_BYTES,
    GroupCommitter,
    Inbox,
    MalformedNotification,
    parse_notification,
)
from pipelines.webhooks.signing import HEADER, check_secret, matches, new_mac, well_formed

if TYPE_CHECKING:  # the applier imports dlt: a store-only receiver starts without it
    from pipelines.webhooks.applier import Applier

SECRET_ENV = "FREETIME_WEBHOOK_SECRET"
PATH = "/webhooks/terminal49"
DEFAULT_PORT = 8050


def default_max_connections() -> int:
    """4096, or fewer when the process may not open that many files (leaving room for the
    listening socket, the inbox and the interpreter's own files)."""
    try:
        import resource
    except ImportError:  # not on Unix: no per-process limit to read
        return 4096
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(16, min(4096, soft - 64))


@dataclass(frozen=True)
class ReceiverLimits:
    """How much of the receiver one sender can hold, signed or not.

    ``max_body_bytes``: the largest body accepted (declared or streamed). ``body_timeout_s``: the
    whole body must arrive within this many seconds of the request head. ``read_timeout_s``: the
    longest silence between two pieces of a body. ``head_timeout_s``: a connection must send a
    complete request head within this long of opening (or of its previous answer).
    ``max_connections``: connections served at once; a request beyond is answered 503.
    ``keep_alive_s``: an idle kept-alive connection is closed after this long.
    ``max_head_bytes``: the largest request head (request line and headers).
    """

    max_body_bytes: int = MAX_BODY_BYTES
    body_timeout_s: float = 10.0
    read_timeout_s: float = 5.0
    head_timeout_s: float = 10.0
    max_connections: int = field(default_factory=default_max_connections)
    keep_alive_s: int = 5
    max_head_bytes: int = 16 * 1024

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_connections", "keep_alive_s", "max_head_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        for name in ("body_timeout_s", "read_timeout_s", "head_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be more than 0 seconds")


@dataclass
class ReceiverStats:
    stored: int = 0
    duplicates: int = 0
    unauthorized: int = 0
    malformed: int = 0
    failed: int = 0
    too_large: int = 0
    timed_out: int = 0


def _json(body: dict[str, Any], status: int, close: bool = False) -> Response:
    headers = {"Connection": "close"} if close else None
    return Response(
        orjson.dumps(body), status_code=status, media_type="application/json", headers=headers
    )


def _error(status: int, title: str, detail: str, close: bool = False) -> Response:
    errors = {"errors": [{"status": str(status), "title": title, "detail": detail}]}
    return _json(errors, status, close)


class _Refused(Exception):
    """The body will not be read to its end: answer ``response`` and close the connection."""

    def __init__(self, response: Response) -> None:
        self.response = response


class _Gone(Exception):
    """The sender closed the connection before its body was complete."""


async def _read_body(
    receive: Receive, feed: Callable[[bytes], Any], limits: ReceiverLimits, stats: ReceiverStats
) -> bytes:
    """The body, each chunk fed to ``feed`` as it arrives; :class:`_Refused` past the cap or the
    deadlines, :class:`_Gone` when the sender disconnects."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.body_timeout_s
    chunks: list[bytes] = []
    size = 0
    try:
        # One timer, moved before each read (a wait_for per read would start a task per
        # chunk, which a thousand trickling senders turn into thousands a second).
        async with asyncio.timeout_at(deadline) as timer:
            while True:
                timer.reschedule(min(deadline, loop.time() + limits.read_timeout_s))
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise _Gone
                chunk: bytes = message.get("body", b"")
                size += len(chunk)
                if size > limits.max_body_bytes:
                    stats.too_large += 1
                    raise _Refused(_too_large(limits))
                if chunk:
                    feed(chunk)
                    chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
    except TimeoutError:
        stats.timed_out += 1
        raise _Refused(
            _error(
                408,
                "Request Timeout",
                f"the body must arrive within {limits.body_timeout_s:g} s, with no pause "
                f"over {limits.read_timeout_s:g} s",
                close=True,
            )
        ) from None


def _too_large(limits: ReceiverLimits) -> Response:
    detail = f"body larger than {limits.max_body_bytes} bytes"
    return _error(413, "Payload Too Large", detail, close=True)


def create_app(
    secret: str | bytes,
    inbox_path: str | os.PathLike[str],
    limits: ReceiverLimits | None = None,
    applier: Applier | None = None,
) -> Starlette:
    """The ASGI app; the inbox writer thread (and the ``applier``'s, when given: see
    :mod:`.applier`) starts and stops with the app's lifespan.

    ValueError when ``secret`` is empty or only whitespace.
    """
    key = check_secret(secret)
    limits = limits or ReceiverLimits()
    committer = GroupCommitter(inbox_path, on_commit=applier.wake if applier else None)
    stats = ReceiverStats()

    async def receive(request: Request) -> Response:
        signature = request.headers.get(HEADER)
        if not well_formed(signature):
            stats.unauthorized += 1
            return _error(401, "Unauthorized", f"missing or malformed {HEADER}", close=True)
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > limits.max_body_bytes:
            stats.too_large += 1
            return _too_large(limits)
        mac = new_mac(key)
        try:
            body = await _read_body(request.receive, mac.update, limits, stats)
        except _Refused as refused:
            return refused.response
        except _Gone:  # nobody to answer; uvicorn drops whatever is sent
            return Response(status_code=400)
        if not matches(mac, signature):
            stats.unauthorized += 1
            return _error(401, "Unauthorized", f"wrong {HEADER}")
        try:
            notification = parse_notification(body)
        except MalformedNotification as exc:
            stats.malformed += 1
            return _error(400, "Bad Request", str(exc))
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()

        def settle(result: bool | BaseException) -> None:
            if fut.done():
                return
            if isinstance(result, BaseException):
                fut.set_exception(result)
            else:
                fut.set_result(result)

        def done(result: bool | BaseException) -> None:
            loop.call_soon_threadsafe(settle, result)

        committer.submit(notification, done)
        try:
            new = await fut
        except Exception as exc:
            stats.failed += 1
            return _error(503, "Service Unavailable", f"inbox not writable: {type(exc).__name__}")
        if new:
            stats.stored += 1
        else:
            stats.duplicates += 1
        return _json({"id": notification.id, "stored": new}, 200)

    def backlog() -> dict[str, Any]:
        with Inbox(inbox_path) as inbox:
            count, oldest = inbox.backlog()
        age = None
        if oldest is not None:
            received = dt.datetime.fromisoformat(oldest)
            age = round((dt.datetime.now(dt.UTC) - received).total_seconds(), 3)
        return {"backlog": count, "oldest_unapplied_age_s": age}

    async def healthz(request: Request) -> Response:
        body: dict[str, Any] = {"ok": True, **asdict(stats), "commits": committer.commits}
        body.update(await asyncio.to_thread(backlog))  # a read of the inbox, off the loop
        body["applier"] = applier.state() if applier else None
        return _json(body, 200)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        committer.start()
        if applier is not None:
            applier.start()
        try:
            yield
        finally:
            if applier is not None:
                applier.stop()
            committer.stop()

    app = Starlette(
        routes=[
            Route(PATH, receive, methods=["POST"]),
            Route("/", receive, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.stats = stats
    app.state.committer = committer
    app.state.limits = limits
    return app


def _protocol_with_head_deadline(head_timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, plus a deadline for the request head.

    uvicorn times out only idle kept-alive connections, and any byte restarts that clock: a
    sender trickling its headers a byte at a time would hold its connection (and a file) for
    ever. This deadline is not restarted by data; it closes a connection whose head is still
    incomplete ``head_timeout_s`` after it opened or after its previous answer. The body is the
    app's to time (:class:`ReceiverLimits`).
    """

    class HeadDeadlineH11Protocol(H11Protocol):
        _head_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_head_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_head_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None
            super().connection_lost(exc)

        def _arm_head_deadline(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
            self._head_deadline = self.loop.call_later(head_timeout_s, self._head_overdue)

        def _head_overdue(self) -> None:
            self._head_deadline = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeadDeadlineH11Protocol


def uvicorn_config(app: Starlette, **options: Any) -> uvicorn.Config:
    """The uvicorn configuration that enforces ``app``'s :class:`ReceiverLimits` on connections
    (head deadline, connection cap, keep-alive, head size); ``options`` go to uvicorn as they are.
    """
    limits: ReceiverLimits = app.state.limits
    return uvicorn.Config(
        app,
        http=_protocol_with_head_deadline(limits.head_timeout_s),
        limit_concurrency=limits.max_connections,
        timeout_keep_alive=limits.keep_alive_s,
        h11_max_incomplete_event_size=limits.max_head_bytes,
        **options,
    )
