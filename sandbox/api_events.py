"""HTTP routes of the webhook and document-intake side of the sandbox.

``/v2`` (API key, JSON:API): ``/webhooks`` (GET, POST), ``/webhooks/{id}`` (GET, PATCH,
DELETE), ``/webhooks/trigger`` (POST), ``/webhook_notifications`` (GET, paged),
``/webhook_notifications/examples?event=`` (GET), ``/webhook_notifications/{id}`` (GET),
``/rails/active_storage/direct_uploads`` (POST), ``/documents`` (GET, POST),
``/documents/{id}`` (GET), ``/documents/{id}/download_url`` (GET), ``/email_submissions``
(GET), ``/email_submissions/{id}`` (GET), ``/document_schemas/{id}`` (GET).

Storage (no API key, authorised by the URL token): ``PUT /storage/upload/{key}?token=`` and
``GET /storage/download/{key}/{filename}?expires=&token=``; errors are S3-like XML.

Admin (API key): ``POST /admin/webhooks/flush``, ``POST /admin/webhooks/blast``,
``GET /admin/webhooks`` (summary), ``GET /admin/ground_truth/notifications``,
``POST /admin/documents/process``, ``GET /admin/ground_truth/documents``.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from sandbox.app import (
    PageError,
    SandboxState,
    api_response,
    error_response,
    page_links,
    parse_includes,
    parse_page,
    self_link,
)
from sandbox.documents import (
    DOCUMENT_TYPES,
    SCHEMA_VERSION,
    DuplicateDocument,
    StorageError,
    UploadError,
    schema_resource,
)
from sandbox.render import iso
from sandbox.webhook_events import EVENT_SET, Occurrence, body_of, envelope
from sandbox.webhook_hub import sign

Handler = Callable[[Request], Awaitable[Response]]
WEBHOOK_NOTIFICATION_INCLUDES = ("reference_object", "webhook")
DOCUMENT_INCLUDES = ("shipments", "cargos", "account", "user", "last_document_representation",
                     "email_submission", "current_extraction")
EMAIL_INCLUDES = ("account", "user", "documents", "documents.last_document_representation")


def unprocessable(pointer: str, detail: str, title: str = "Unprocessable Entity") -> Response:
    """A 422 JSON:API error with ``source.pointer``."""
    return api_response({"errors": [{"status": "422", "title": title, "detail": detail,
                                     "source": {"pointer": pointer}}]}, 422)


def s3_error(status: int, code: str, message: str) -> Response:
    """An S3-style XML error."""
    xml = ('<?xml version="1.0" encoding="UTF-8"?>\n'
           f"<Error><Code>{code}</Code><Message>{message}</Message></Error>")
    return Response(xml, status_code=status, media_type="application/xml")


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


def paged(request: Request, items: list[Any], render: Callable[[Any], dict[str, Any]],
          include: Callable[[list[Any]], list[dict[str, Any]]] | None = None
          ) -> Response:
    """A paged JSON:API list (meta ``total`` and ``size``, links as the other lists)."""
    number, size = parse_page(request)
    start = (number - 1) * size
    page = items[start:start + size]
    body: dict[str, Any] = {"data": [render(x) for x in page]}
    if include is not None:
        body["included"] = include(page)
    body["links"] = page_links(request, number, size, len(items))
    body["meta"] = {"total": len(items), "size": size}
    return api_response(body)


def routes(state: SandboxState, admin_async: Callable[[Handler], Handler]) -> list[BaseRoute]:
    """All routes of this module, bound to ``state``."""
    hub = state.hub
    docs = state.docs
    acct = state.account

    def v2(fn: Handler) -> Handler:
        async def endpoint(request: Request) -> Response:
            try:
                return await fn(request)
            except PageError as e:
                return error_response(400, "Bad Request", e.detail, e.parameter)
        return endpoint

    # ---- webhooks ----------------------------------------------------------------------------
    def validate_hook(attrs: Any, partial: bool) -> tuple[dict[str, Any], Response | None]:
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
            if (not isinstance(ev, list) or not ev
                    or any(not isinstance(e, str) or e not in EVENT_SET for e in ev)
                    or len(set(ev)) != len(ev)):
                return {}, unprocessable("/data/attributes/events",
                                         "events must be a non-empty list of distinct event "
                                         "names")
            out["events"] = ev
        if "active" in attrs:
            if not isinstance(attrs["active"], bool):
                return {}, unprocessable("/data/attributes/active", "active must be a boolean")
            out["active"] = attrs["active"]
        if "headers" in attrs and attrs["headers"] is not None:
            hs = attrs["headers"]
            if not isinstance(hs, list) or any(
                    not isinstance(h, dict) or not isinstance(h.get("name"), str)
                    or not isinstance(h.get("value"), str) for h in hs):
                return {}, unprocessable("/data/attributes/headers",
                                         "headers must be a list of {name, value}")
            out["headers"] = hs
        return out, None

    async def list_webhooks(request: Request) -> Response:
        hooks = list(hub.webhooks.values())
        return paged(request, hooks, lambda h: h.resource())

    async def create_webhook(request: Request) -> Response:
        body = await read_json(request)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, dict):
            return unprocessable("/data", "data is required")
        if data.get("type", "webhook") != "webhook":
            return unprocessable("/data/type", "type must be 'webhook'")
        vals, err = validate_hook(data.get("attributes"), partial=False)
        if err is not None:
            return err
        hook = hub.register(vals["url"], vals.get("events"), vals.get("active", True),
                            iso(acct.clock), vals.get("headers"))
        return api_response({"data": hook.resource()}, 201)

    async def get_webhook(request: Request) -> Response:
        hook = hub.webhooks.get(request.path_params["id"])
        if hook is None:
            return error_response(404, "Not Found")
        return api_response({"data": hook.resource()})

    async def patch_webhook(request: Request) -> Response:
        hook = hub.webhooks.get(request.path_params["id"])
        if hook is None:
            return error_response(404, "Not Found")
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

    async def delete_webhook(request: Request) -> Response:
        if hub.webhooks.pop(request.path_params["id"], None) is None:
            return error_response(404, "Not Found")
        return Response(b"", status_code=200, media_type="application/vnd.api+json")

    def example(event: str, webhook_id: str | None) -> dict[str, Any]:
        rng = random.Random(f"{acct.seed}:example:{event}:{acct.clock}")
        occ: Occurrence = (docs.sample(event) if event.startswith("document.")
                           else state.builder.sample(event, rng))
        nid = hub._next_id()
        ref = ({"id": occ.reference["id"], "type": occ.reference["type"]}
               if occ.reference is not None else None)
        return body_of(envelope(nid, event, occ.created_at, webhook_id, ref, occ.document_id),
                       occ.included)

    async def notification_examples(request: Request) -> Response:
        event = request.query_params.get("event")
        if not event:
            return error_response(400, "Bad Request", "event is required", "event")
        if event not in EVENT_SET:
            return error_response(400, "Bad Request", f"{event!r} is not a webhook event",
                                  "event")
        hook_id = next(iter(hub.webhooks), None)
        body = example(event, hook_id)
        out = {"data": body["data"], "links": {"self": str(request.url)},
               "included": body["included"]}
        return api_response(out)

    async def trigger(request: Request) -> Response:
        body = await read_json(request)
        if isinstance(body, dict) and isinstance(body.get("data"), dict):
            body = body["data"].get("attributes", body["data"])
        if not isinstance(body, dict):
            body = {}

        def bad(detail: str) -> Response:
            return api_response({"errors": [{"status": "422", "title": "Unprocessable Entity",
                                             "detail": detail}]}, 422)

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
        raw = orjson.dumps(example(event, None))
        signature = sign(secret, raw) if secret else None
        res = await hub.post(url, raw, signature)
        headers = {"Content-Type": "application/json", "User-Agent": "Terminal49 Webhook Bot"}
        if signature is not None:
            headers["X-T49-Webhook-Signature"] = signature
        return Response(orjson.dumps({
            "url": url, "succeeded": res.ok, "error": res.error, "status_code": res.status_code,
            "request_headers": headers, "request_body": raw.decode(),
            "response_headers": res.response_headers, "response_body": res.response_body}),
            media_type="application/json")

    # ---- notifications -----------------------------------------------------------------------
    async def list_notifications(request: Request) -> Response:
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

    async def get_notification(request: Request) -> Response:
        n = hub.notifications.get(request.path_params["id"])
        if n is None:
            return error_response(404, "Not Found")
        included = orjson.loads(n.body).get("included", [])
        return api_response({"data": n.resource(), "included": included,
                             "links": {"self": self_link(request)}})

    # ---- direct upload and storage -------------------------------------------------------------
    async def direct_upload(request: Request) -> Response:
        body = await read_json(request)
        try:
            blob = docs.create_blob(body, origin(request))
        except UploadError as e:
            return unprocessable(e.pointer, e.detail)
        return Response(orjson.dumps(blob), media_type="application/json")

    async def storage_put(request: Request) -> Response:
        data = await request.body()
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) != len(data):
            return s3_error(400, "IncompleteBody",
                            "You did not provide the number of bytes specified by the "
                            "Content-Length HTTP header")
        try:
            docs.put(request.path_params["key"], request.query_params.get("token", ""), data,
                     request.headers.get("content-md5"))
        except StorageError as e:
            return s3_error(e.status, e.code, e.message)
        etag = hashlib.md5(data).hexdigest()  # noqa: S324 - an ETag, as S3's
        return Response(b"", status_code=200, headers={"ETag": f'"{etag}"'})

    async def storage_get(request: Request) -> Response:
        try:
            b = docs.get(request.path_params["key"], request.query_params.get("expires", ""),
                         request.query_params.get("token", ""))
        except StorageError as e:
            return s3_error(e.status, e.code, e.message)
        assert b.data is not None
        return Response(b.data, media_type=b.content_type, headers={
            "Content-Disposition": f'inline; filename="{b.filename}"'})

    # ---- documents -----------------------------------------------------------------------------
    async def create_document(request: Request) -> Response:
        body = await read_json(request)
        try:
            doc = docs.create_document(body)
        except UploadError as e:
            return unprocessable(e.pointer, e.detail)
        except DuplicateDocument as e:
            return api_response({"errors": [{
                "status": "409", "code": "duplicate_document", "title": "Duplicate document",
                "detail": "A document with the same file content already exists",
                "meta": {"existing_document_id": e.existing_id,
                         "existing_document_name": e.existing_name}}]}, 409)
        if state.document_delay > 0:
            asyncio.get_running_loop().call_later(
                state.document_delay, lambda: state.process_documents([doc.id]))
        return api_response({"data": docs.document(doc),
                             "links": {"self": f"{origin(request)}/v2/documents/{doc.id}"}}, 201)

    def doc_list(request: Request) -> list[Any]:
        items = list(docs.documents.values())
        types = request.query_params.get("filter[document_types]")
        if types:
            wanted = {t.strip() for t in types.split(",")}
            items = [d for d in items if d.document_type in wanted]
        name = request.query_params.get("filter[filename]")
        if name:
            items = [d for d in items if name.lower() in d.blob.filename.lower()]
        order = list(enumerate(items))
        order.sort(key=lambda p: (p[1].created_at, p[0]), reverse=True)
        return [d for _, d in order]

    async def list_documents(request: Request) -> Response:
        includes = parse_includes(request, DOCUMENT_INCLUDES)

        def inc(page: list[Any]) -> list[dict[str, Any]]:
            seen: dict[tuple[str, str], dict[str, Any]] = {}
            for d in page:
                for r in docs.included(d, includes):
                    seen.setdefault((r["type"], r["id"]), r)
            return list(seen.values())

        return paged(request, doc_list(request), docs.document, inc if includes else None)

    async def get_document(request: Request) -> Response:
        includes = parse_includes(request, DOCUMENT_INCLUDES)
        d = docs.documents.get(request.path_params["id"])
        if d is None:
            return error_response(404, "Not Found", "Couldn't find Document")
        body: dict[str, Any] = {"data": docs.document(d)}
        if includes:
            body["included"] = docs.included(d, includes)
        body["links"] = {"self": self_link(request)}
        return api_response(body)

    async def document_download(request: Request) -> Response:
        d = docs.documents.get(request.path_params["id"])
        if d is None:
            return error_response(404, "Not Found", "Couldn't find Document")
        return Response(orjson.dumps({"download_url": docs.download_url(d, origin(request))}),
                        media_type="application/json")

    def email_includes(request: Request) -> list[str]:
        if request.query_params.get("include") is None:
            return ["documents", "documents.last_document_representation"]
        return parse_includes(request, EMAIL_INCLUDES)

    def email_included(emails: list[Any], includes: list[str]) -> list[dict[str, Any]]:
        seen: dict[tuple[str, str], dict[str, Any]] = {}
        for e in emails:
            for did in e.documents:
                d = docs.documents[did]
                if "documents" in includes:
                    seen.setdefault(("document", d.id), docs.email_document(d))
                if "documents.last_document_representation" in includes and d.representation:
                    seen.setdefault(("document_representation", d.representation.id),
                                    docs.representation(d.representation))
        return list(seen.values())

    async def list_emails(request: Request) -> Response:
        includes = email_includes(request)
        emails = sorted(docs.emails.values(), key=lambda e: e.created_at, reverse=True)
        return paged(request, emails, docs.email,
                     lambda page: email_included(page, includes))

    async def get_email(request: Request) -> Response:
        includes = email_includes(request)
        e = docs.emails.get(request.path_params["id"])
        if e is None:
            return error_response(404, "Not Found", "Couldn't find EmailSubmission")
        return api_response({"data": docs.email(e), "included": email_included([e], includes),
                             "links": {"self": self_link(request)}})

    async def get_schema(request: Request) -> Response:
        sid = request.path_params["id"]
        doc_type, _, version = sid.partition("@")
        if doc_type not in DOCUMENT_TYPES or version != SCHEMA_VERSION:
            return error_response(404, "Not Found",
                                  f"Couldn't find DocumentSchema with 'id'={sid}")
        res = schema_resource(doc_type)
        return api_response({"data": res, "links": {"self": self_link(request)}})

    # ---- admin ---------------------------------------------------------------------------------
    def qfloat(request: Request, name: str, default: float) -> float:
        raw = request.query_params.get(name)
        try:
            return float(raw) if raw not in (None, "") else default
        except ValueError:
            raise ValueError(f"{name} must be a number, got {raw!r}") from None

    async def admin_flush(request: Request) -> Response:
        timeout = qfloat(request, "timeout", 30.0)
        due_only = request.query_params.get("due_only", "false").lower() in ("1", "true", "yes")
        settled = await hub.flush(timeout, due_only)
        return Response(orjson.dumps({"settled": settled, **hub.summary()}),
                        media_type="application/json")

    async def admin_blast(request: Request) -> Response:
        count = int(qfloat(request, "count", 100))
        rates = {k: qfloat(request, k, 0.0) for k in ("duplicates", "bad_signature", "malformed")}
        if count < 0 or any(not 0 <= v <= 10 for v in rates.values()):
            raise ValueError("count must be >= 0 and rates in [0, 10]")
        seed = int(qfloat(request, "seed", 0))
        concurrency = int(qfloat(request, "concurrency", 20))
        wid = request.query_params.get("webhook_id")
        if wid:
            hook = hub.webhooks.get(wid)
            if hook is None:
                raise ValueError(f"no webhook {wid}")
        else:
            active = [h for h in hub.webhooks.values() if h.active]
            if len(active) != 1:
                raise ValueError(f"{len(active)} active webhooks; pass webhook_id")
            hook = active[0]
        if not acct.container_ids:
            raise ValueError("the account has no containers")
        report = await hub.blast(state.builder, hook, count, rates["duplicates"],
                                 rates["bad_signature"], rates["malformed"], seed, concurrency)
        return Response(orjson.dumps(report), media_type="application/json")

    async def admin_webhooks(request: Request) -> Response:
        return Response(orjson.dumps({**hub.summary(), "webhooks": [
            h.resource() for h in hub.webhooks.values()]}), media_type="application/json")

    async def admin_notifications(request: Request) -> Response:
        event = request.query_params.get("event")
        notes = [n.truth() for n in hub.notifications.values()
                 if event is None or n.event == event]
        return Response(orjson.dumps({"clock": iso(acct.clock), "notifications": notes}),
                        media_type="application/json")

    async def admin_process(request: Request) -> Response:
        ids = request.query_params.getlist("id") or None
        done = state.process_documents(ids)
        return Response(orjson.dumps({"processed": done, "pending": len(docs.pending())}),
                        media_type="application/json")

    async def admin_documents(request: Request) -> Response:
        return Response(orjson.dumps(docs.truth()), media_type="application/json")

    return [
        Route("/v2/webhooks/trigger", v2(trigger), methods=["POST"]),
        Route("/v2/webhooks", v2(list_webhooks), methods=["GET"]),
        Route("/v2/webhooks", v2(create_webhook), methods=["POST"]),
        Route("/v2/webhooks/{id}", v2(get_webhook), methods=["GET"]),
        Route("/v2/webhooks/{id}", v2(patch_webhook), methods=["PATCH"]),
        Route("/v2/webhooks/{id}", v2(delete_webhook), methods=["DELETE"]),
        Route("/v2/webhook_notifications/examples", v2(notification_examples), methods=["GET"]),
        Route("/v2/webhook_notifications", v2(list_notifications), methods=["GET"]),
        Route("/v2/webhook_notifications/{id}", v2(get_notification), methods=["GET"]),
        Route("/v2/rails/active_storage/direct_uploads", v2(direct_upload), methods=["POST"]),
        Route("/storage/upload/{key}", storage_put, methods=["PUT"]),
        Route("/storage/download/{key}/{filename}", storage_get, methods=["GET"]),
        Route("/v2/documents", v2(list_documents), methods=["GET"]),
        Route("/v2/documents", v2(create_document), methods=["POST"]),
        Route("/v2/documents/{id}", v2(get_document), methods=["GET"]),
        Route("/v2/documents/{id}/download_url", v2(document_download), methods=["GET"]),
        Route("/v2/email_submissions", v2(list_emails), methods=["GET"]),
        Route("/v2/email_submissions/{id}", v2(get_email), methods=["GET"]),
        Route("/v2/document_schemas/{id}", v2(get_schema), methods=["GET"]),
        Route("/admin/webhooks/flush", admin_async(admin_flush), methods=["POST"]),
        Route("/admin/webhooks/blast", admin_async(admin_blast), methods=["POST"]),
        Route("/admin/webhooks", admin_async(admin_webhooks), methods=["GET"]),
        Route("/admin/ground_truth/notifications", admin_async(admin_notifications),
              methods=["GET"]),
        Route("/admin/documents/process", admin_async(admin_process), methods=["POST"]),
        Route("/admin/ground_truth/documents", admin_async(admin_documents), methods=["GET"]),
    ]
