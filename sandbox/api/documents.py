"""Document intake: direct upload, storage, documents, email submissions and schemas.

``/v2`` (API key, JSON:API): ``POST /rails/active_storage/direct_uploads``,
``GET|POST /documents``, ``GET /documents/{id}``, ``GET /documents/{id}/download_url``,
``GET /email_submissions``, ``GET /email_submissions/{id}``, ``GET /document_schemas/{id}``.

Storage (no API key, authorised by the URL token): ``PUT /storage/upload/{key}?token=`` and
``GET /storage/download/{key}/{filename}?expires=&token=``; errors are S3-like XML.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from sandbox.api.jsonapi import (
    api,
    api_response,
    not_found,
    origin,
    paged,
    parse_includes,
    read_json,
    self_link,
    state_of,
    unprocessable,
)
from sandbox.document_store import (
    DOCUMENT_TYPES,
    SCHEMA_VERSION,
    DocumentStore,
    DuplicateDocument,
    StorageError,
    UploadError,
    schema_resource,
)

DOCUMENT_INCLUDES = (
    "shipments",
    "cargos",
    "account",
    "user",
    "last_document_representation",
    "email_submission",
    "current_extraction",
)
EMAIL_INCLUDES = ("account", "user", "documents", "documents.last_document_representation")


def s3_error(status: int, code: str, message: str) -> Response:
    """An S3-style XML error."""
    xml = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    )
    return Response(xml, status_code=status, media_type="application/xml")


# ---- direct upload and storage -----------------------------------------------------------------
@api
async def direct_upload(request: Request) -> Response:
    """``POST /v2/rails/active_storage/direct_uploads``: a blob and where to PUT its bytes."""
    body = await read_json(request)
    try:
        blob = state_of(request).docs.create_blob(body, origin(request))
    except UploadError as e:
        return unprocessable(e.pointer, e.detail)
    return Response(orjson.dumps(blob), media_type="application/json")


async def storage_put(request: Request) -> Response:
    """``PUT /storage/upload/{key}?token=``: the blob's bytes (checked against its checksum)."""
    data = await request.body()
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) != len(data):
        return s3_error(
            400,
            "IncompleteBody",
            "You did not provide the number of bytes specified by the Content-Length HTTP header",
        )
    try:
        state_of(request).docs.put(
            request.path_params["key"],
            request.query_params.get("token", ""),
            data,
            request.headers.get("content-md5"),
        )
    except StorageError as e:
        return s3_error(e.status, e.code, e.message)
    etag = hashlib.md5(data).hexdigest()  # noqa: S324 - an ETag, as S3's
    return Response(b"", status_code=200, headers={"ETag": f'"{etag}"'})


async def storage_get(request: Request) -> Response:
    """``GET /storage/download/{key}/{filename}?expires=&token=``: the stored bytes."""
    try:
        b = state_of(request).docs.get(
            request.path_params["key"],
            request.query_params.get("expires", ""),
            request.query_params.get("token", ""),
        )
    except StorageError as e:
        return s3_error(e.status, e.code, e.message)
    assert b.data is not None
    return Response(
        b.data,
        media_type=b.content_type,
        headers={"Content-Disposition": f'inline; filename="{b.filename}"'},
    )


# ---- documents ---------------------------------------------------------------------------------
@api
async def create_document(request: Request) -> Response:
    """``POST /v2/documents``: 201; processed ``document_delay`` seconds later (409 on a
    duplicate file)."""
    state = state_of(request)
    docs = state.docs
    body = await read_json(request)
    try:
        doc = docs.create_document(body)
    except UploadError as e:
        return unprocessable(e.pointer, e.detail)
    except DuplicateDocument as e:
        return api_response(
            {
                "errors": [
                    {
                        "status": "409",
                        "code": "duplicate_document",
                        "title": "Duplicate document",
                        "detail": "A document with the same file content already exists",
                        "meta": {
                            "existing_document_id": e.existing_id,
                            "existing_document_name": e.existing_name,
                        },
                    }
                ]
            },
            409,
        )
    if state.document_delay > 0:
        asyncio.get_running_loop().call_later(
            state.document_delay, lambda: state.process_documents([doc.id])
        )
    return api_response(
        {"data": docs.document(doc), "links": {"self": f"{origin(request)}/v2/documents/{doc.id}"}},
        201,
    )


def _doc_list(docs: DocumentStore, request: Request) -> list[Any]:
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


@api
async def list_documents(request: Request) -> Response:
    """``GET /v2/documents`` (newest first; ``filter[document_types]``, ``filter[filename]``)."""
    docs = state_of(request).docs
    includes = parse_includes(request, DOCUMENT_INCLUDES)

    def inc(page: list[Any]) -> list[dict[str, Any]]:
        seen: dict[tuple[str, str], dict[str, Any]] = {}
        for d in page:
            for r in docs.included(d, includes):
                seen.setdefault((r["type"], r["id"]), r)
        return list(seen.values())

    return paged(request, _doc_list(docs, request), docs.document, inc if includes else None)


@api
async def get_document(request: Request) -> Response:
    """``GET /v2/documents/{id}``."""
    docs = state_of(request).docs
    includes = parse_includes(request, DOCUMENT_INCLUDES)
    d = docs.documents.get(request.path_params["id"])
    if d is None:
        return not_found("Couldn't find Document")
    body: dict[str, Any] = {"data": docs.document(d)}
    if includes:
        body["included"] = docs.included(d, includes)
    body["links"] = {"self": self_link(request)}
    return api_response(body)


@api
async def document_download(request: Request) -> Response:
    """``GET /v2/documents/{id}/download_url``: a signed, expiring storage URL."""
    docs = state_of(request).docs
    d = docs.documents.get(request.path_params["id"])
    if d is None:
        return not_found("Couldn't find Document")
    return Response(
        orjson.dumps({"download_url": docs.download_url(d, origin(request))}),
        media_type="application/json",
    )


# ---- email submissions and schemas -------------------------------------------------------------
def _email_includes(request: Request) -> list[str]:
    if request.query_params.get("include") is None:
        return ["documents", "documents.last_document_representation"]
    return parse_includes(request, EMAIL_INCLUDES)


def _email_included(
    docs: DocumentStore, emails: list[Any], includes: list[str]
) -> list[dict[str, Any]]:
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for e in emails:
        for did in e.documents:
            d = docs.documents[did]
            if "documents" in includes:
                seen.setdefault(("document", d.id), docs.email_document(d))
            if "documents.last_document_representation" in includes and d.representation:
                seen.setdefault(
                    ("document_representation", d.representation.id),
                    docs.representation(d.representation),
                )
    return list(seen.values())


@api
async def list_emails(request: Request) -> Response:
    """``GET /v2/email_submissions`` (newest first, documents included by default)."""
    docs = state_of(request).docs
    includes = _email_includes(request)
    emails = sorted(docs.emails.values(), key=lambda e: e.created_at, reverse=True)
    return paged(request, emails, docs.email, lambda page: _email_included(docs, page, includes))


@api
async def get_email(request: Request) -> Response:
    """``GET /v2/email_submissions/{id}``."""
    docs = state_of(request).docs
    includes = _email_includes(request)
    e = docs.emails.get(request.path_params["id"])
    if e is None:
        return not_found("Couldn't find EmailSubmission")
    return api_response(
        {
            "data": docs.email(e),
            "included": _email_included(docs, [e], includes),
            "links": {"self": self_link(request)},
        }
    )


@api
async def get_schema(request: Request) -> Response:
    """``GET /v2/document_schemas/{type}@{version}``."""
    sid = request.path_params["id"]
    doc_type, _, version = sid.partition("@")
    if doc_type not in DOCUMENT_TYPES or version != SCHEMA_VERSION:
        return not_found(f"Couldn't find DocumentSchema with 'id'={sid}")
    res = schema_resource(doc_type)
    return api_response({"data": res, "links": {"self": self_link(request)}})
