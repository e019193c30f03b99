"""The ``/v2`` gate of the sandbox: request counting, fault injection, auth and rate limit.

:class:`V2Guard` wraps the Starlette app. For every ``/v2`` request it counts the request and
its status, sets the ``Date`` header to the account's clock (list filters compare with it),
injects the configured faults (dropped connection, 5xx, 429, slow answer, truncated body),
then answers 401 without ``Authorization: Token KEY`` and 429 with ``Retry-After`` over the
rolling-minute rate limit. ``/admin`` and ``/storage`` pass untouched.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import time
from collections import deque

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sandbox.api.jsonapi import check_auth, error_response
from sandbox.faults import RATE_WINDOW, Fault
from sandbox.state import SandboxState


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
                titles = {
                    500: "Internal Server Error",
                    502: "Bad Gateway",
                    503: "Service Unavailable",
                }
                resp = error_response(fault.status, titles[fault.status])
                await resp(scope, receive, counting_send)
                return
            if fault.kind == "429":
                resp = error_response(
                    429, "Too Many Requests", "Rate limit exceeded.", headers={"Retry-After": "1"}
                )
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
            window = st.rate_window
            while win and win[0] <= now - window:
                win.popleft()
            if len(win) >= st.rate_limit:
                retry = max(1, math.ceil(win[0] + window - now))
                resp = error_response(
                    429,
                    "Too Many Requests",
                    f"Rate limit of {st.rate_limit} requests per "
                    + ("minute" if window == RATE_WINDOW else f"{window:g} s")
                    + " exceeded.",
                    headers={"Retry-After": str(retry)},
                )
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
        await send({"type": "http.response.start", "status": start["status"], "headers": headers})
        await send(
            {
                "type": "http.response.body",
                "body": body[: max(1, int(len(body) * cut))],
                "more_body": True,
            }
        )
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
