"""Webhooks and their notifications under ``/v2``.

``GET /webhooks`` (paged), ``POST /webhooks``, ``GET|PATCH|DELETE /webhooks/{id}``,
``POST /webhooks/trigger`` (one signed example POST to any URL, answered with what happened),
``GET /webhook_notifications`` (paged, newest first), ``GET /webhook_notifications/{id}``,
``GET /webhook_notifications/examples?event=``. Bad bodies are answered 422 with
``source.pointer``.
"""

from __future__ import annotations

import random
from typing import Any
from urllib.parse import urlsplit

import orjson
from starlette.requests import Request
from starlette.responses import Response

from sandbox.api.jsonapi import (
    api,
    api_response,
    error_response,
    not_found,
    paged,
    parse_includes,
    read_json,
    self_link,
    state_of,
    unprocessable,
)
from sandbox.render import iso
from sandbox.state import SandboxState
from sandbox.webhook_events import EVENT_SET, Occurrence, body_of, envelope
from sandbox.webhook_hub import sign

WEBHOOK_NOTIFICATION_INCLUDES = ("reference_object", "webhook")


def validate_hook(attrs: Any, partial: bool) -> tuple[dict[str, Any], Response | None]:
    """The webhook attributes to set, or a 422 (``partial``: only those given, as PATCH)."""
    if not isinstance(attrs, dict):
        return {}, unprocessable("/data/attributes", "attributes are required")
    out: dict[str, Any] = {}
    if "url" in attrs or not partial:
        url = attrs.get("url")
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            return {}, unprocessable("/data/attributes/url", "url must be an http(s) URL")
        out["url"] = url
    if "events" in attrs:
        ev = attrs.get("events")
        if (
            not isinstance(ev, list)
            or not ev
            or any(not isinstance(e, str) or e not in EVENT_SET for e in ev)
            or len(set(ev)) != len(ev)
        ):
            return {}, unprocessable(
                "/data/attributes/events", "events must be a non-empty list of distinct event names"
            )
        out["events"] = ev
    if "active" in attrs:
        if not isinstance(attrs["active"], bool):
            return {}, unprocessable("/data/attributes/active", "active must be a boolean")
        out["active"] = attrs["active"]
    if "headers" in attrs and attrs["headers"] is not None:
        hs = attrs["headers"]
        if not isinstance(hs, list) or any(
            not isinstance(h, dict)
            or not isinstance(h.get("name"), str)
            or not isinstance(h.get("value"), str)
            for h in hs
        ):
            return {}, unprocessable(
                "/data/attributes/headers", "headers must be a list of {name, value}"
            )
        out["headers"] = hs
    return out, None


# ---- webhooks ----------------------------------------------------------------------------------
@api
async def list_webhooks(request: Request) -> Response:
    """``GET /v2/webhooks``."""
    hooks = list(state_of(request).hub.webhooks.values())
    return paged(request, hooks, lambda h: h.resource())


@api
async def create_webhook(request: Request) -> Response:
    """``POST /v2/webhooks``: 201 with the new webhook (and its ``secret``)."""
    state = state_of(request)
    body = await read_json(request)
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, dict):
        return unprocessable("/data", "data is required")
    if data.get("type", "webhook") != "webhook":
        return unprocessable("/data/type", "type must be 'webhook'")
    vals, err = validate_hook(data.get("attributes"), partial=False)
    if err is not None:
        return err
    hook = state.hub.register(
        vals["url"],
        vals.get("events"),
        vals.get("active", True),
        iso(state.account.clock),
        vals.get("headers"),
    )
    return api_response({"data": hook.resource()}, 201)


@api
async def get_webhook(request: Request) -> Response:
    """``GET /v2/webhooks/{id}``."""
    hook = state_of(request).hub.webhooks.get(request.path_params["id"])
    if hook is None:
        return not_found()
    return api_response({"data": hook.resource()})


@api
async def patch_webhook(request: Request) -> Response:
    """``PATCH /v2/webhooks/{id}``: set the attributes given."""
    hook = state_of(request).hub.webhooks.get(request.path_params["id"])
    if hook is None:
        return not_found()
    body = await read_json(request)
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, dict):
        return unprocessable("/data", "data is required")
    vals, err = validate_hook(data.get("attributes"), partial=True)
    if err is not None:
        return err
    for k, v in vals.items():
        setattr(hook, k, v)
    return api_response({"data": hook.resource()})


@api
async def delete_webhook(request: Request) -> Response:
    """``DELETE /v2/webhooks/{id}``: 200 with an empty body."""
    if state_of(request).hub.webhooks.pop(request.path_params["id"], None) is None:
        return not_found()
    return Response(b"", status_code=200, media_type="application/vnd.api+json")


def example(state: SandboxState, event: str, webhook_id: str | None) -> dict[str, Any]:
    """A notification body for ``event`` from the account now (seeded by seed, event, clock)."""
    acct = state.account
    rng = random.Random(f"{acct.seed}:example:{event}:{acct.clock}")
    occ: Occurrence = (
        state.docs.sample(event)
        if event.startswith("document.")
        else state.builder.sample(event, rng)
    )
    nid = state.hub._next_id()
    ref = (
        {"id": occ.reference["id"], "type": occ.reference["type"]}
        if occ.reference is not None
        else None
    )
    return body_of(
        envelope(nid, event, occ.created_at, webhook_id, ref, occ.document_id), occ.included
    )


@api
async def trigger(request: Request) -> Response:
    """``POST /v2/webhooks/trigger``: POST one example of ``event`` to ``url`` now."""
    body = await read_json(request)
    if isinstance(body, dict) and isinstance(body.get("data"), dict):
        body = body["data"].get("attributes", body["data"])
    if not isinstance(body, dict):
        body = {}

    def bad(detail: str) -> Response:
        return api_response(
            {"errors": [{"status": "422", "title": "Unprocessable Entity", "detail": detail}]}, 422
        )

    url = body.get("url")
    if not isinstance(url, str) or not url:
        return bad("url is required")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return bad("url must be an http(s) URL")
    event = body.get("event")
    if not isinstance(event, str) or not event:
        return bad("event is required")
    if event not in EVENT_SET:
        return bad(f"event {event!r} is not a webhook event")
    secret = body.get("secret")
    if secret is not None and not isinstance(secret, str):
        return bad("secret must be a string")
    state = state_of(request)
    raw = orjson.dumps(example(state, event, None))
    signature = sign(secret, raw) if secret else None
    res = await state.hub.post(url, raw, signature)
    headers = {"Content-Type": "application/json", "User-Agent": "Terminal49 Webhook Bot"}
    if signature is not None:
        headers["X-T49-Webhook-Signature"] = signature
    return Response(
        orjson.dumps(
            {
                "url": url,
                "succeeded": res.ok,
                "error": res.error,
                "status_code": res.status_code,
                "request_headers": headers,
                "request_body": raw.decode(),
                "response_headers": res.response_headers,
                "response_body": res.response_body,
            }
        ),
        media_type="application/json",
    )


# ---- notifications -----------------------------------------------------------------------------
@api
async def notification_examples(request: Request) -> Response:
    """``GET /v2/webhook_notifications/examples?event=``."""
    event = request.query_params.get("event")
    if not event:
        return error_response(400, "Bad Request", "event is required", "event")
    if event not in EVENT_SET:
        return error_response(400, "Bad Request", f"{event!r} is not a webhook event", "event")
    state = state_of(request)
    hook_id = next(iter(state.hub.webhooks), None)
    body = example(state, event, hook_id)
    out = {"data": body["data"], "links": {"self": str(request.url)}, "included": body["included"]}
    return api_response(out)


@api
async def list_notifications(request: Request) -> Response:
    """``GET /v2/webhook_notifications`` (newest first)."""
    hub = state_of(request).hub
    includes = parse_includes(request, WEBHOOK_NOTIFICATION_INCLUDES)
    notes = list(reversed(hub.notifications.values()))

    def inc(page: list[Any]) -> list[dict[str, Any]]:
        seen: dict[tuple[str, str], dict[str, Any]] = {}
        for n in page:
            if "reference_object" in includes and n.reference is not None:
                seen.setdefault((n.reference["type"], n.reference["id"]), n.reference)
            hook = hub.webhooks.get(n.webhook_id)
            if "webhook" in includes and hook is not None:
                seen.setdefault(("webhook", hook.id), hook.resource())
        return list(seen.values())

    return paged(request, notes, lambda n: n.resource(), inc if includes else None)


@api
async def get_notification(request: Request) -> Response:
    """``GET /v2/webhook_notifications/{id}`` (with the body's ``included``)."""
    n = state_of(request).hub.notifications.get(request.path_params["id"])
    if n is None:
        return not_found()
    included = orjson.loads(n.body).get("included", [])
    return api_response(
        {"data": n.resource(), "included": included, "links": {"self": self_link(request)}}
    )
