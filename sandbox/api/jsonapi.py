"""JSON:API plumbing shared by every sandbox endpoint: responses, errors, paging, includes,
auth, and the two endpoint wrappers (:func:`api` for ``/v2``, :func:`admin` for ``/admin``).

Endpoints are plain ``async def endpoint(request) -> Response`` functions; they read the
server's :class:`~sandbox.state.SandboxState` with :func:`state_of`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import orjson
from starlette.requests import Request
from starlette.responses import Response

from sandbox.filters import FilterError
from sandbox.state import SandboxState

Endpoint = Callable[[Request], Awaitable[Response]]

JSONAPI = "application/vnd.api+json"
DEFAULT_PAGE_SIZE = 30
MAX_PAGE_SIZE = 100  # shipments and the other lists
CONTAINER_MAX_PAGE_SIZE = 50


def state_of(request: Request) -> SandboxState:
    """The server's shared state (set once by ``create_app``)."""
    state: SandboxState = request.app.state.sandbox
    return state


def api(fn: Endpoint) -> Endpoint:
    """A ``/v2`` endpoint: a bad paging, include or filter parameter is answered 400.

    Auth, rate limit and faults are applied before, by :class:`~sandbox.api.guard.V2Guard`.
    """

    @functools.wraps(fn)
    async def endpoint(request: Request) -> Response:
        try:
            return await fn(request)
        except (PageError, FilterError) as e:
            return error_response(400, "Bad Request", e.detail, e.parameter)

    return endpoint


def admin(fn: Endpoint) -> Endpoint:
    """An ``/admin`` endpoint: needs the API key (401 otherwise); a ValueError is a 400."""

    @functools.wraps(fn)
    async def endpoint(request: Request) -> Response:
        detail = check_auth(request.headers.get("authorization"), state_of(request).api_key)
        if detail is not None:
            return error_response(401, "Unauthorized", detail)
        try:
            return await fn(request)
        except ValueError as e:
            return error_response(400, "Bad Request", str(e))

    return endpoint


def dumps(body: Any) -> bytes:
    """Serialize a response body."""
    return orjson.dumps(body)


def api_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON:API response."""
    return Response(dumps(body), status_code=status, media_type=JSONAPI, headers=headers)


def error_response(
    status: int,
    title: str,
    detail: str | None = None,
    parameter: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """A JSON:API error response (``status`` rendered as a string)."""
    err: dict[str, Any] = {"status": str(status), "title": title}
    if detail is not None:
        err["detail"] = detail
    if parameter is not None:
        err["source"] = {"parameter": parameter}
    return api_response({"errors": [err]}, status, headers)


def not_found(detail: str | None = None) -> Response:
    """A JSON:API 404."""
    return error_response(404, "Not Found", detail)


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
            raise PageError(
                "include", f"{name!r} is not a valid include; allowed: {', '.join(allowed)}"
            )
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
    kept = [
        (quote(k, safe="[]"), quote(v, safe=""))
        for k, v in request.query_params.multi_items()
        if k.startswith("filter[") or k == "sort"
    ]

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


def unprocessable(pointer: str, detail: str, title: str = "Unprocessable Entity") -> Response:
    """A 422 JSON:API error with ``source.pointer``."""
    return api_response(
        {
            "errors": [
                {"status": "422", "title": title, "detail": detail, "source": {"pointer": pointer}}
            ]
        },
        422,
    )


async def read_json(request: Request) -> Any:
    """The request body as JSON, or None when it is not JSON."""
    raw = await request.body()
    try:
        return orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        return None


def origin(request: Request) -> str:
    """``scheme://host:port`` of the request."""
    return f"{request.url.scheme}://{request.url.netloc}"


def paged(
    request: Request,
    items: list[Any],
    render: Callable[[Any], dict[str, Any]],
    include: Callable[[list[Any]], list[dict[str, Any]]] | None = None,
) -> Response:
    """A paged JSON:API list (meta ``total`` and ``size``, links as the other lists)."""
    number, size = parse_page(request)
    start = (number - 1) * size
    page = items[start : start + size]
    body: dict[str, Any] = {"data": [render(x) for x in page]}
    if include is not None:
        body["included"] = include(page)
    body["links"] = page_links(request, number, size, len(items))
    body["meta"] = {"total": len(items), "size": size}
    return api_response(body)
