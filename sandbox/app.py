"""The sandbox HTTP application: the route table, the ``/v2`` guard, 404s and the lifespan.

``create_app(state)`` returns an ASGI app. Everything under ``/v2`` behaves like the live
Terminal49 API (JSON:API bodies, ``application/vnd.api+json``, ``Authorization: Token KEY``,
paging links and meta, error shapes, HTML 404 for unknown routes, 429 with ``Retry-After``).
``/admin`` moves the world and exposes ground truth and request statistics; it is never subject
to faults or the rate limit but needs the same token. The endpoints live in :mod:`sandbox.api`
(one module per resource) and read ``state`` from ``request.app.state.sandbox``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from sandbox.api import admin, documents, lists, webhooks
from sandbox.api.guard import V2Guard
from sandbox.state import SandboxState

NOT_FOUND_HTML = (
    "<!DOCTYPE html>\n<html>\n<head>\n<title>The page you were looking for doesn't exist (404)"
    "</title>\n</head>\n<body>\n<h1>The page you were looking for doesn't exist.</h1>\n"
    "<p>You may have mistyped the address or the page may have moved.</p>\n</body>\n</html>\n"
)

# Order matters where paths overlap: a fixed path before its ``{id}`` sibling.
ROUTES: list[BaseRoute] = [
    Route("/v2/containers", lists.list_containers, methods=["GET"]),
    Route("/v2/containers/{id}", lists.get_container, methods=["GET"]),
    Route("/v2/containers/{id}/transport_events", lists.container_events, methods=["GET"]),
    Route("/v2/shipments", lists.list_shipments, methods=["GET"]),
    Route("/v2/shipments/{id}", lists.get_shipment, methods=["GET"]),
    Route("/admin/clock", admin.clock, methods=["GET"]),
    Route("/admin/advance", admin.advance, methods=["POST"]),
    Route("/admin/refresh", admin.refresh, methods=["POST"]),
    Route("/admin/ground_truth", admin.ground_truth, methods=["GET"]),
    Route("/admin/ground_truth/timestamps", admin.timestamps, methods=["GET"]),
    Route("/admin/delete", admin.delete, methods=["POST"]),
    Route("/admin/stats", admin.stats, methods=["GET"]),
    Route("/admin/stats/reset", admin.stats_reset, methods=["POST"]),
    Route("/v2/webhooks/trigger", webhooks.trigger, methods=["POST"]),
    Route("/v2/webhooks", webhooks.list_webhooks, methods=["GET"]),
    Route("/v2/webhooks", webhooks.create_webhook, methods=["POST"]),
    Route("/v2/webhooks/{id}", webhooks.get_webhook, methods=["GET"]),
    Route("/v2/webhooks/{id}", webhooks.patch_webhook, methods=["PATCH"]),
    Route("/v2/webhooks/{id}", webhooks.delete_webhook, methods=["DELETE"]),
    Route("/v2/webhook_notifications/examples", webhooks.notification_examples, methods=["GET"]),
    Route("/v2/webhook_notifications", webhooks.list_notifications, methods=["GET"]),
    Route("/v2/webhook_notifications/{id}", webhooks.get_notification, methods=["GET"]),
    Route("/v2/rails/active_storage/direct_uploads", documents.direct_upload, methods=["POST"]),
    Route("/storage/upload/{key}", documents.storage_put, methods=["PUT"]),
    Route("/storage/download/{key}/{filename}", documents.storage_get, methods=["GET"]),
    Route("/v2/documents", documents.list_documents, methods=["GET"]),
    Route("/v2/documents", documents.create_document, methods=["POST"]),
    Route("/v2/documents/{id}", documents.get_document, methods=["GET"]),
    Route("/v2/documents/{id}/download_url", documents.document_download, methods=["GET"]),
    Route("/v2/email_submissions", documents.list_emails, methods=["GET"]),
    Route("/v2/email_submissions/{id}", documents.get_email, methods=["GET"]),
    Route("/v2/document_schemas/{id}", documents.get_schema, methods=["GET"]),
    Route("/admin/webhooks/flush", admin.webhooks_flush, methods=["POST"]),
    Route("/admin/webhooks/blast", admin.webhooks_blast, methods=["POST"]),
    Route("/admin/webhooks", admin.webhooks_summary, methods=["GET"]),
    Route("/admin/ground_truth/notifications", admin.notifications, methods=["GET"]),
    Route("/admin/documents/process", admin.documents_process, methods=["POST"]),
    Route("/admin/ground_truth/documents", admin.documents, methods=["GET"]),
]


async def html_404(request: Request, exc: Exception) -> Response:
    """Unknown routes get the live API's HTML 404; other HTTP errors their detail as text."""
    status = exc.status_code if isinstance(exc, HTTPException) else 404
    if status != 404:
        return Response(str(getattr(exc, "detail", "")), status_code=status)
    return HTMLResponse(NOT_FOUND_HTML, status_code=404)


def create_app(state: SandboxState) -> ASGIApp:
    """Build the ASGI application around ``state``.

    The lifespan starts the webhook hub and, with ``state.advance_every``, a ticker that
    advances the account by ``state.advance_step`` every that many wall seconds.
    """

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = None
        if state.advance_every > 0:

            async def ticker() -> None:
                while True:
                    await asyncio.sleep(state.advance_every)
                    state.advance(state.advance_step)

            task = asyncio.create_task(ticker())
        await state.hub.start()
        yield
        if task is not None:
            task.cancel()
        await state.hub.stop()

    inner = Starlette(
        routes=ROUTES, exception_handlers={HTTPException: html_404}, lifespan=lifespan
    )
    inner.state.sandbox = state
    return V2Guard(inner, state)
