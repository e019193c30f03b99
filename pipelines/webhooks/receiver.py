"""The webhook receiver: a Starlette app that verifies, validates and durably stores deliveries.

For each ``POST`` (to ``/webhooks/terminal49`` or ``/``):
1. the ``X-T49-Webhook-Signature`` header must equal the HMAC of the raw body
   (:func:`.signing.verify`, constant time), else **401** and nothing is stored;
2. the body must be a notification (:func:`.inbox.parse_notification`), else **400** and
   nothing is stored;
3. the notification is committed to the SQLite inbox (:class:`.inbox.GroupCommitter`) and only
   then answered **200** (``{"id": ..., "stored": true|false}``; false means a repeat delivery
   of an id already stored, which is acknowledged too so the sender stops retrying).
   If the inbox cannot be written the answer is **503**, and the sender retries later.

The receiver never opens the DuckDB warehouse, so it keeps accepting while a load holds it.
``GET /healthz`` reports counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pipelines.webhooks.inbox import (
    MAX_BODY_BYTES,
    GroupCommitter,
    MalformedNotification,
    parse_notification,
)
from pipelines.webhooks.signing import HEADER, verify

SECRET_ENV = "FREETIME_WEBHOOK_SECRET"
PATH = "/webhooks/terminal49"


@dataclass
class ReceiverStats:
    stored: int = 0
    duplicates: int = 0
    unauthorized: int = 0
    malformed: int = 0
    failed: int = 0


def _json(body: dict[str, Any], status: int) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def _error(status: int, title: str, detail: str) -> Response:
    return _json({"errors": [{"status": str(status), "title": title, "detail": detail}]}, status)


def create_app(secret: str, inbox_path: str | os.PathLike[str]) -> Starlette:
    """The ASGI app; the inbox writer thread starts and stops with the app's lifespan."""
    if not secret:
        raise ValueError("a webhook secret is required")
    key = secret.encode()
    committer = GroupCommitter(inbox_path)
    stats = ReceiverStats()

    async def receive(request: Request) -> Response:
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > MAX_BODY_BYTES:
            stats.malformed += 1
            return _error(413, "Payload Too Large", f"body larger than {MAX_BODY_BYTES} bytes")
        body = await request.body()
        if not verify(body, key, request.headers.get(HEADER)):
            stats.unauthorized += 1
            return _error(401, "Unauthorized", f"missing or wrong {HEADER}")
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

    async def healthz(request: Request) -> Response:
        return _json({"ok": True, **asdict(stats), "commits": committer.commits}, 200)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        committer.start()
        try:
            yield
        finally:
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
    return app
