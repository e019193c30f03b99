"""The sandbox HTTP application: routes, auth, paging, errors, rate limit, faults, admin.

``create_app(state)`` returns an ASGI app. Everything under ``/v2`` behaves like the live
Terminal49 API (JSON:API bodies, ``application/vnd.api+json``, ``Authorization: Token KEY``,
paging links and meta, error shapes, HTML 404 for unknown routes, 429 with ``Retry-After``).
``/admin`` moves the world and exposes ground truth and request statistics; it is never subject
to faults or the rate limit but needs the same token.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sandbox.documents import DocumentStore
from sandbox.faults import Fault, FaultInjector, FaultSpec
from sandbox.filters import (
    FilterError,
    Spec,
    Unavailable,
    container_spec,
    select_containers,
    select_shipments,
    shipment_spec,
)
from sandbox.model import Account
from sandbox.render import (
    CONTAINER_INCLUDES,
    EVENT_INCLUDES,
    SHIPMENT_INCLUDES,
    Renderer,
    iso,
)
from sandbox.webhook_events import Builder
from sandbox.webhook_hub import WebhookHub

JSONAPI = "application/vnd.api+json"
DEFAULT_PAGE_SIZE = 30
MAX_PAGE_SIZE = 100  # shipments and the other lists
CONTAINER_MAX_PAGE_SIZE = 50
FILTER_CACHE_SIZE = 8
RATE_WINDOW = 60.0

NOT_FOUND_HTML = (
    "<!DOCTYPE html>\n<html>\n<head>\n<title>The page you were looking for doesn't exist (404)"
    "</title>\n</head>\n<body>\n<h1>The page you were looking for doesn't exist.</h1>\n"
    "<p>You may have mistyped the address or the page may have moved.</p>\n</body>\n</html>\n"
)


@dataclass
class SandboxState:
    """Everything the running server shares: account, renderer, key, limits, counters."""

    account: Account
    api_key: str
    rate_limit: int = 0  # requests per rolling minute per key; 0 = off
    faults: FaultSpec = field(default_factory=FaultSpec)
    advance_every: float = 0.0  # wall seconds between automatic advances; 0 = off
    advance_step: int = 3600  # sandbox seconds per automatic advance
    webhook_backoff: float = 60.0  # seconds before the first retry (doubles, capped x64)
    webhook_max_retries: int = 12
    webhook_timeout: float = 10.0
    webhook_concurrency: int = 20
    document_delay: float = 30.0  # wall seconds until a submitted document is processed; 0=off
    email_documents: int = -1  # seeded past emails at start; -1 = 3 + containers // 100 (<= 12)
    emails_per_day: float = -1.0  # new emails per sandbox day on advance; -1 = containers / 500
    renderer: Renderer = field(init=False)
    injector: FaultInjector = field(init=False)
    hub: WebhookHub = field(init=False)
    builder: Builder = field(init=False)
    docs: DocumentStore = field(init=False)
    requests: int = 0
    fault_counter: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    fault_counts: Counter[str] = field(default_factory=Counter)
    windows: dict[str, deque[float]] = field(default_factory=dict)
    # Filtered list orders, keyed by (resource, filter items, clock, account version).
    filtered: dict[tuple[Any, ...], list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.renderer = Renderer(self.account)
        self.injector = FaultInjector(self.faults, self.account.seed)
        self.hub = WebhookHub(self.account.seed, backoff=self.webhook_backoff,
                              max_retries=self.webhook_max_retries,
                              timeout=self.webhook_timeout, concurrency=self.webhook_concurrency)
        self.builder = Builder(self.account, self.renderer)
        self.docs = DocumentStore(self.account, self.renderer)
        n = len(self.account.container_ids)
        seeded = self.email_documents if self.email_documents >= 0 else min(12, 3 + n // 100)
        if n:
            self.docs.seed_emails(seeded)
        if self.emails_per_day < 0:
            self.emails_per_day = n / 500.0

    def advance(self, seconds: int) -> tuple[int, int]:
        """Advance the account and emit what a real account would: container and shipment
        notifications for subscribed events, new emails, and processing of every pending
        document (``document.extracted`` / ``document.extraction_failed``)."""
        acct = self.account
        changed, new = acct.advance(seconds)
        if seconds <= 0:
            return changed, new
        old = acct.last_old_clock
        wanted = self.hub.wanted()
        if wanted:
            for occ in self.builder.changes(old, acct.last_changed, acct.last_new, wanted):
                self.hub.emit(occ)
        if acct.container_ids and self.emails_per_day > 0:
            self.docs.arrive(old, acct.clock, self.emails_per_day)
        self.process_documents()
        return changed, new

    def process_documents(self, ids: list[str] | None = None) -> list[str]:
        """Process pending documents (all or ``ids``), emit their events; returns their ids."""
        out = []
        for occ in self.docs.process(ids):
            self.hub.emit(occ)
            assert occ.document_id is not None
            out.append(occ.document_id)
        return out

    def reset_stats(self) -> None:
        """Zero the request statistics (not the fault sequence)."""
        self.requests = 0
        self.by_status.clear()
        self.fault_counts.clear()


def dumps(body: Any) -> bytes:
    """Serialize a response body."""
    return orjson.dumps(body)


def api_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON:API response."""
    return Response(dumps(body), status_code=status, media_type=JSONAPI, headers=headers)


def error_response(status: int, title: str, detail: str | None = None,
                   parameter: str | None = None,
                   headers: dict[str, str] | None = None) -> Response:
    """A JSON:API error response (``status`` rendered as a string)."""
    err: dict[str, Any] = {"status": str(status), "title": title}
    if detail is not None:
        err["detail"] = detail
    if parameter is not None:
        err["source"] = {"parameter": parameter}
    return api_response({"errors": [err]}, status, headers)


def check_auth(authorization: str | None, api_key: str) -> str | None:
    """None when the header carries ``Token <api_key>``; otherwise the 401 detail text."""
    if not authorization:
        return "No API key given; send the header 'Authorization: Token <API_KEY>'."
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() == "bearer":
        return "Bearer tokens are not accepted here; use 'Authorization: Token <API_KEY>'."
    if scheme != "Token" or value.strip() != api_key:
        return "The API key is invalid."
    return None


class PageError(Exception):
    """A bad paging or include parameter (answered 400)."""

    def __init__(self, parameter: str, detail: str) -> None:
        super().__init__(detail)
        self.parameter = parameter
        self.detail = detail


def parse_includes(request: Request, allowed: tuple[str, ...]) -> list[str]:
    """``include`` as a de-duplicated list; raises PageError on an unknown relation."""
    raw = request.query_params.get("include")
    if raw is None or raw.strip() == "":
        return []
    out: list[str] = []
    for part in raw.split(","):
        name = part.strip()
        if name not in allowed:
            raise PageError("include", f"{name!r} is not a valid include; allowed: "
                                       f"{', '.join(allowed)}")
        if name not in out:
            out.append(name)
    return out


def parse_page(request: Request, cap: int = MAX_PAGE_SIZE) -> tuple[int, int]:
    """(page number, page size) with defaults 1 and 30; size capped silently at ``cap``."""
    vals = []
    for key, default in (("page[number]", 1), ("page[size]", DEFAULT_PAGE_SIZE)):
        raw = request.query_params.get(key)
        if raw is None or raw == "":
            vals.append(default)
            continue
        try:
            v = int(raw)
        except ValueError:
            raise PageError(key, f"{key} must be a positive integer, got {raw!r}") from None
        if v < 1:
            raise PageError(key, f"{key} must be a positive integer, got {raw!r}")
        vals.append(v)
    return vals[0], min(vals[1], cap)


def page_links(request: Request, number: int, size: int, total: int) -> dict[str, str]:
    """``self``, ``current``, ``next`` (absent on the last page) and ``last``.

    A result that fits on one page gets only ``self`` and ``current``. Links carry ``include``,
    every ``filter[...]`` and ``sort`` parameter as sent (values percent-encoded) and the page
    size in effect, parameters sorted.
    """
    base = f"{request.url.scheme}://{request.url.netloc}{request.url.path}"
    include = request.query_params.get("include")
    kept = [(quote(k, safe="[]"), quote(v, safe=""))
            for k, v in request.query_params.multi_items()
            if k.startswith("filter[") or k == "sort"]

    def url(n: int) -> str:
        params = list(kept)
        if include:
            params.append(("include", include))
        params += [("page[number]", str(n)), ("page[size]", str(size))]
        return base + "?" + "&".join(f"{k}={v}" for k, v in sorted(params))

    links = {"self": str(request.url), "current": url(number)}
    last = max(1, math.ceil(total / size))
    if last <= 1:
        return links
    if number < last:
        links["next"] = url(number + 1)
    links["last"] = url(last)
    return links


def self_link(request: Request) -> str:
    """Request URL with ``include`` only (as the live API's single-resource ``links.self``)."""
    base = f"{request.url.scheme}://{request.url.netloc}{request.url.path}"
    include = request.query_params.get("include")
    return f"{base}?include={include}" if include else base


def create_app(state: SandboxState) -> ASGIApp:
    """Build the ASGI application around ``state``."""
    acct = state.account
    r = state.renderer

    def guarded(fn: Callable[[Request], Response]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return fn(request)
            except (PageError, FilterError) as e:
                return error_response(400, "Bad Request", e.detail, e.parameter)
        return endpoint

    def filtered(kind: str, spec: Spec, select: Callable[[Account, Spec], list[int]],
                 request: Request) -> list[int]:
        params = tuple(kv for kv in request.query_params.multi_items()
                       if kv[0].startswith("filter["))
        key = (kind, params, acct.clock, acct.version)
        hit = state.filtered.get(key)
        if hit is None:
            hit = select(acct, spec)
            if len(state.filtered) >= FILTER_CACHE_SIZE:
                state.filtered.pop(next(iter(state.filtered)))
            state.filtered[key] = hit
        return hit

    def list_containers(request: Request) -> Response:
        includes = parse_includes(request, CONTAINER_INCLUDES)
        number, size = parse_page(request, CONTAINER_MAX_PAGE_SIZE)
        try:
            spec = container_spec(request.query_params.multi_items(), acct.clock)
        except Unavailable as e:
            return error_response(500, "Internal Server Error",
                                  f"{e.parameter} is not available on containers", e.parameter)
        order = filtered("containers", spec, select_containers, request) if spec else acct.order
        start = (number - 1) * size
        idx = order[start:start + size]
        body: dict[str, Any] = {"data": [r.container(i) for i in idx]}
        if includes:
            body["included"] = r.included([("container", i) for i in idx], includes)
        body["links"] = page_links(request, number, size, len(order))
        body["meta"] = {"total": len(order)}
        return api_response(body)

    def list_shipments(request: Request) -> Response:
        includes = parse_includes(request, SHIPMENT_INCLUDES)
        number, size = parse_page(request)
        spec = shipment_spec(request.query_params.multi_items())
        order = (filtered("shipments", spec, select_shipments, request) if spec
                 else acct.ship_order)
        start = (number - 1) * size
        idx = order[start:start + size]
        body: dict[str, Any] = {"data": [r.shipment(s) for s in idx]}
        if includes:
            body["included"] = r.included([("shipment", s) for s in idx], includes)
        body["links"] = page_links(request, number, size, len(order))
        body["meta"] = {"total": len(order), "size": size}
        return api_response(body)

    def not_found() -> Response:
        return error_response(404, "Not Found")

    def get_container(request: Request) -> Response:
        includes = parse_includes(request, CONTAINER_INCLUDES)
        i = acct.container_index.get(request.path_params["id"])
        if i is None:
            return not_found()
        body: dict[str, Any] = {"data": r.container(i), "links": {"self": self_link(request)}}
        if includes:
            body["included"] = r.included([("container", i)], includes)
        return api_response(body)

    def get_shipment(request: Request) -> Response:
        includes = parse_includes(request, SHIPMENT_INCLUDES)
        s = acct.shipment_index.get(request.path_params["id"])
        if s is None:
            return not_found()
        body: dict[str, Any] = {"data": r.shipment(s), "links": {"self": self_link(request)}}
        if includes:
            body["included"] = r.included([("shipment", s)], includes)
        return api_response(body)

    def container_events(request: Request) -> Response:
        includes = parse_includes(request, EVENT_INCLUDES)
        i = acct.container_index.get(request.path_params["id"])
        if i is None:
            return not_found()
        evs = r.transport_events(i)
        body: dict[str, Any] = {"data": evs}
        if includes:
            body["included"] = r.event_included(i, evs, includes)
        base = f"{request.url.scheme}://{request.url.netloc}{request.url.path}"
        inc = request.query_params.get("include")
        current = f"{base}?include={inc}&page[number]=1" if inc else f"{base}?page[number]=1"
        body["links"] = {"self": str(request.url), "current": current}
        return api_response(body)

    # ---- admin ---------------------------------------------------------------------------
    def admin(fn: Callable[[Request], Response]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            detail = check_auth(request.headers.get("authorization"), state.api_key)
            if detail is not None:
                return error_response(401, "Unauthorized", detail)
            try:
                return fn(request)
            except ValueError as e:
                return error_response(400, "Bad Request", str(e))
        return endpoint

    def admin_async(fn: Callable[[Request], Awaitable[Response]]
                    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            detail = check_auth(request.headers.get("authorization"), state.api_key)
            if detail is not None:
                return error_response(401, "Unauthorized", detail)
            try:
                return await fn(request)
            except ValueError as e:
                return error_response(400, "Bad Request", str(e))
        return endpoint

    def clock_body() -> dict[str, Any]:
        return {"clock": iso(acct.clock)}

    def admin_clock(request: Request) -> Response:
        return api_response(clock_body())

    def admin_advance(request: Request) -> Response:
        hours = float(request.query_params.get("hours", "0") or 0)
        minutes = float(request.query_params.get("minutes", "0") or 0)
        seconds = round(hours * 3600 + minutes * 60)
        if seconds < 0:
            raise ValueError("hours/minutes must not be negative")
        changed, new = state.advance(seconds)
        return api_response({**clock_body(), "changed_containers": changed,
                             "new_containers": new})

    def admin_refresh(request: Request) -> Response:
        count = int(request.query_params.get("count", "1"))
        if count < 0:
            raise ValueError("count must not be negative")
        refreshed = acct.refresh(count)
        return api_response({**clock_body(), "refreshed": len(refreshed)})

    def admin_delete(request: Request) -> Response:
        cid = request.query_params.get("container", "")
        i = acct.container_index.get(cid)
        if i is None:
            return not_found()
        acct.delete(i)
        return api_response({**clock_body(), "deleted": cid})

    def admin_timestamps(request: Request) -> Response:
        c, sh = acct.containers, acct.shipments
        body = {
            **clock_body(),
            "containers": {acct.container_ids[i]: {"updated_at": iso(c.get(i, "refreshed"))}
                           for i in range(len(acct.container_ids)) if i not in acct.deleted},
            "shipments": {sid: {"updated_at": iso(sh.get(s, "updated")),
                                "pod_eta_changed_at": iso(acct.eta_changed_at(s))}
                          for s, sid in enumerate(acct.shipment_ids)},
        }
        return Response(dumps(body), media_type="application/json")

    def admin_ground_truth(request: Request) -> Response:
        body = {
            **clock_body(),
            "containers": [r.container(i) for i in range(len(acct.container_ids))
                           if not (acct.deleted and i in acct.deleted)],
            "shipments": [r.shipment(s) for s in range(len(acct.shipment_ids))],
            "terminals": r.terminals(),
            "ports": r.ports(),
        }
        return Response(dumps(body), media_type="application/json")

    def admin_stats(request: Request) -> Response:
        return Response(dumps({"requests": state.requests, "by_status": dict(state.by_status),
                               "faults": dict(state.fault_counts)}),
                        media_type="application/json")

    def admin_stats_reset(request: Request) -> Response:
        state.reset_stats()
        return admin_stats(request)

    async def html_404(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 404
        if status != 404:
            return Response(str(getattr(exc, "detail", "")), status_code=status)
        return HTMLResponse(NOT_FOUND_HTML, status_code=404)

    @asynccontextmanager
    async def lifespan(app: Starlette):  # type: ignore[no-untyped-def]
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

    routes: list[BaseRoute] = [
        Route("/v2/containers", guarded(list_containers), methods=["GET"]),
        Route("/v2/containers/{id}", guarded(get_container), methods=["GET"]),
        Route("/v2/containers/{id}/transport_events", guarded(container_events),
              methods=["GET"]),
        Route("/v2/shipments", guarded(list_shipments), methods=["GET"]),
        Route("/v2/shipments/{id}", guarded(get_shipment), methods=["GET"]),
        Route("/admin/clock", admin(admin_clock), methods=["GET"]),
        Route("/admin/advance", admin(admin_advance), methods=["POST"]),
        Route("/admin/refresh", admin(admin_refresh), methods=["POST"]),
        Route("/admin/ground_truth", admin(admin_ground_truth), methods=["GET"]),
        Route("/admin/ground_truth/timestamps", admin(admin_timestamps), methods=["GET"]),
        Route("/admin/delete", admin(admin_delete), methods=["POST"]),
        Route("/admin/stats", admin(admin_stats), methods=["GET"]),
        Route("/admin/stats/reset", admin(admin_stats_reset), methods=["POST"]),
    ]
    routes += event_routes(state, admin_async)
    inner = Starlette(routes=routes, exception_handlers={HTTPException: html_404},
                      lifespan=lifespan)
    return V2Guard(inner, state)


def event_routes(state: SandboxState, admin_async: Any) -> list[BaseRoute]:
    """Routes of webhooks, notifications, direct upload, storage, documents (lazy import)."""
    from sandbox.api_events import routes

    return routes(state, admin_async)


class V2Guard:
    """ASGI middleware for ``/v2``: counts requests, injects faults, checks auth and rate."""

    def __init__(self, app: ASGIApp, state: SandboxState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == "/v2" or path.startswith("/v2/")):
            await self.app(scope, receive, send)
            return
        st = self.state
        st.requests += 1

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                st.by_status[str(message["status"])] += 1
                # the API's clock is the account's: list filters compare with it
                date = email.utils.formatdate(st.account.clock, usegmt=True).encode()
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"date"]
                message = {**message, "headers": [*headers, (b"date", date)]}
            await send(message)

        fault: Fault | None = None
        if scope["method"] == "GET" and st.faults.enabled:
            st.fault_counter += 1
            fault = st.injector.decide(st.fault_counter)
        if fault is not None:
            st.fault_counts[fault.kind] += 1
            if fault.kind == "drop":
                await _close_connection(receive)
                return
            if fault.kind == "5xx":
                titles = {500: "Internal Server Error", 502: "Bad Gateway",
                          503: "Service Unavailable"}
                resp = error_response(fault.status, titles[fault.status])
                await resp(scope, receive, counting_send)
                return
            if fault.kind == "429":
                resp = error_response(429, "Too Many Requests", "Rate limit exceeded.",
                                      headers={"Retry-After": "1"})
                await resp(scope, receive, counting_send)
                return
            if fault.kind == "slow":
                await asyncio.sleep(fault.delay)

        headers = dict(scope.get("headers") or [])
        auth = headers.get(b"authorization")
        detail = check_auth(auth.decode("latin-1") if auth else None, st.api_key)
        if detail is not None:
            await error_response(401, "Unauthorized", detail)(scope, receive, counting_send)
            return
        if st.rate_limit > 0:
            now = time.monotonic()
            win = st.windows.setdefault(st.api_key, deque())
            while win and win[0] <= now - RATE_WINDOW:
                win.popleft()
            if len(win) >= st.rate_limit:
                retry = max(1, math.ceil(win[0] + RATE_WINDOW - now))
                resp = error_response(
                    429, "Too Many Requests",
                    f"Rate limit of {st.rate_limit} requests per minute exceeded.",
                    headers={"Retry-After": str(retry)})
                await resp(scope, receive, counting_send)
                return
            win.append(now)

        if fault is not None and fault.kind == "truncate":
            await self._truncated(scope, receive, counting_send, fault.cut)
            return
        await self.app(scope, receive, counting_send)

    async def _truncated(self, scope: Scope, receive: Receive, send: Send, cut: float) -> None:
        """Run the app, then send its headers (full Content-Length) and part of its body."""
        messages: list[Message] = []

        async def capture(message: Message) -> None:
            messages.append(message)

        await self.app(scope, receive, capture)
        start = next(m for m in messages if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": start["status"],
                    "headers": headers})
        await send({"type": "http.response.body", "body": body[:max(1, int(len(body) * cut))],
                    "more_body": True})
        await _close_connection(receive)


async def _close_connection(receive: Receive) -> None:
    """Close the client connection under uvicorn (best effort), flushing what was written.

    Uvicorn hands the app the bound ``receive`` of its request cycle, which holds the transport.
    """
    cycle = getattr(receive, "__self__", None)
    transport = getattr(cycle, "transport", None)
    if transport is not None:
        transport.close()
        # Let connection_lost run so uvicorn sees a disconnect instead of sending a 500.
        for _ in range(3):
            await asyncio.sleep(0)
    else:  # not under uvicorn: the best we can do is fail the request
        raise ConnectionAbortedError("sandbox fault: connection dropped")
