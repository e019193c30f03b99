"""Containers and shipments under ``/v2``: the paged, filterable lists, single resources and a
container's transport events.

``GET /containers`` (page size capped at 50, as live), ``GET /containers/{id}``,
``GET /containers/{id}/transport_events``, ``GET /shipments`` (capped at 100),
``GET /shipments/{id}``. Lists carry ``links`` and ``meta.total``; ``include`` adds related
resources; ``filter[...]`` parameters select as :mod:`sandbox.filters` describes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sandbox.api.jsonapi import (
    CONTAINER_MAX_PAGE_SIZE,
    api,
    api_response,
    error_response,
    not_found,
    page_links,
    parse_includes,
    parse_page,
    self_link,
    state_of,
)
from sandbox.filters import (
    Spec,
    Unavailable,
    container_spec,
    select_containers,
    select_shipments,
    shipment_spec,
)
from sandbox.model import Account
from sandbox.render import CONTAINER_INCLUDES, EVENT_INCLUDES, SHIPMENT_INCLUDES
from sandbox.state import SandboxState

FILTER_CACHE_SIZE = 8


def filtered(
    state: SandboxState,
    kind: str,
    spec: Spec,
    select: Callable[[Account, Spec], list[int]],
    request: Request,
) -> list[int]:
    """Row order of the ``kind`` list under the request's filters.

    Cached per (filters, clock, account version), so paging a filtered list selects once.
    """
    acct = state.account
    params = tuple(kv for kv in request.query_params.multi_items() if kv[0].startswith("filter["))
    key = (kind, params, acct.clock, acct.version)
    hit = state.filtered.get(key)
    if hit is None:
        hit = select(acct, spec)
        if len(state.filtered) >= FILTER_CACHE_SIZE:
            state.filtered.pop(next(iter(state.filtered)))
        state.filtered[key] = hit
    return hit


def _page(
    request: Request,
    state: SandboxState,
    kind: str,
    order: list[int],
    number: int,
    size: int,
    includes: list[str],
) -> dict[str, Any]:
    """``data``, ``included`` and ``links`` of one page of a ``kind`` list in ``order``."""
    r = state.renderer
    render = r.container if kind == "container" else r.shipment
    start = (number - 1) * size
    idx = order[start : start + size]
    body: dict[str, Any] = {"data": [render(i) for i in idx]}
    if includes:
        body["included"] = r.included([(kind, i) for i in idx], includes)
    body["links"] = page_links(request, number, size, len(order))
    return body


@api
async def list_containers(request: Request) -> Response:
    """``GET /v2/containers``."""
    state = state_of(request)
    acct = state.account
    includes = parse_includes(request, CONTAINER_INCLUDES)
    number, size = parse_page(request, CONTAINER_MAX_PAGE_SIZE)
    try:
        spec = container_spec(request.query_params.multi_items(), acct.clock)
    except Unavailable as e:
        return error_response(
            500,
            "Internal Server Error",
            f"{e.parameter} is not available on containers",
            e.parameter,
        )
    order = filtered(state, "containers", spec, select_containers, request) if spec else acct.order
    body = _page(request, state, "container", order, number, size, includes)
    body["meta"] = {"total": len(order)}
    return api_response(body)


@api
async def list_shipments(request: Request) -> Response:
    """``GET /v2/shipments``."""
    state = state_of(request)
    acct = state.account
    includes = parse_includes(request, SHIPMENT_INCLUDES)
    number, size = parse_page(request)
    spec = shipment_spec(request.query_params.multi_items())
    order = (
        filtered(state, "shipments", spec, select_shipments, request) if spec else acct.ship_order
    )
    body = _page(request, state, "shipment", order, number, size, includes)
    body["meta"] = {"total": len(order), "size": size}
    return api_response(body)


def _one(request: Request, kind: str, allowed: tuple[str, ...]) -> Response:
    """One container or shipment by ``{id}`` (404 when unknown), with ``included``."""
    state = state_of(request)
    r = state.renderer
    includes = parse_includes(request, allowed)
    acct = state.account
    index = acct.container_index if kind == "container" else acct.shipment_index
    render = r.container if kind == "container" else r.shipment
    i = index.get(request.path_params["id"])
    if i is None:
        return not_found()
    body: dict[str, Any] = {"data": render(i), "links": {"self": self_link(request)}}
    if includes:
        body["included"] = r.included([(kind, i)], includes)
    return api_response(body)


@api
async def get_container(request: Request) -> Response:
    """``GET /v2/containers/{id}``."""
    return _one(request, "container", CONTAINER_INCLUDES)


@api
async def get_shipment(request: Request) -> Response:
    """``GET /v2/shipments/{id}``."""
    return _one(request, "shipment", SHIPMENT_INCLUDES)


@api
async def container_events(request: Request) -> Response:
    """``GET /v2/containers/{id}/transport_events`` (one page holds them all)."""
    state = state_of(request)
    r = state.renderer
    includes = parse_includes(request, EVENT_INCLUDES)
    i = state.account.container_index.get(request.path_params["id"])
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
