"""Document intake, client side: the direct-upload flow and the document sync.

Upload (:func:`upload_file`), as the interface describes it:
1. read the file (a missing or unreadable file fails here, before any request);
2. ``POST /rails/active_storage/direct_uploads`` with ``filename``, ``content_type``, the exact
   ``byte_size`` and ``checksum`` = Base64 of the binary MD5 digest;
3. ``PUT`` the raw bytes to ``direct_upload.url`` (a storage address outside the API) with every
   header of ``direct_upload.headers`` plus ``Content-Length``. This request never carries the
   API key: it goes through a separate HTTP client with no default headers;
4. ``POST /documents`` with ``{"data": {"type": "document", "attributes": {"name": ...,
   "attached_document": signed_id}}}``. A 409 ``duplicate_document`` raises
   :class:`DuplicateDocument` carrying the existing document's id.

Extraction runs asynchronously; its result arrives as a ``document.extracted`` webhook (see
:mod:`pipelines.webhooks.apply`) or through :func:`sync_documents`.
"""

from __future__ import annotations

import base64
import hashlib
import mimetypes
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from pipelines.config import (
    DATASET,
    ApiSettings,
    ConfigError,
    Warehouse,
    incoming_dataset,
    resolve_warehouse,
)

# The API client (pipelines.terminal49, which imports dlt) is imported where it is used: reading
# the files and checking the key come first and stay light.

DIRECT_UPLOADS_PATH = "/rails/active_storage/direct_uploads"
DOCUMENTS_PATH = "/documents"
_ATTEMPTS = 4
WRITER = "documents"


class UploadFailed(Exception):
    """An upload did not complete; the message is meant for the user as is (no key)."""


class DuplicateDocument(UploadFailed):
    """The same file content is already a document of the account."""

    def __init__(self, path: Path, existing_id: str, existing_name: str | None) -> None:
        named = f" ({existing_name!r})" if existing_name else ""
        super().__init__(f"{path}: duplicate of existing document {existing_id}{named}")
        self.existing_id = existing_id
        self.existing_name = existing_name


@dataclass
class UploadResult:
    path: Path
    name: str
    document_id: str
    byte_size: int
    checksum: str
    document: dict[str, Any] = field(repr=False, default_factory=dict)


def checksum_of(data: bytes) -> str:
    """Base64 of the binary MD5 digest of ``data`` (the blob ``checksum``)."""
    return base64.b64encode(hashlib.md5(data).digest()).decode()  # noqa: S324 - integrity only


def read_file(path: str | os.PathLike[str]) -> bytes:
    """The file's bytes, or UploadFailed with a clear reason (missing, a folder, unreadable)."""
    p = Path(path)
    if not p.exists():
        raise UploadFailed(f"{p}: no such file")
    if p.is_dir():
        raise UploadFailed(f"{p}: is a folder, not a file")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise UploadFailed(f"{p}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if not data:
        raise UploadFailed(f"{p}: is empty")
    return data


def content_type_of(path: Path) -> str:
    guessed, _ = mimetypes.guess_type(path.name)
    return guessed or "application/octet-stream"


def _errors(response: httpx.Response) -> list[dict[str, Any]]:
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return []
    errors = body.get("errors") if isinstance(body, dict) else None
    return [e for e in errors or [] if isinstance(e, dict)]


def _detail(response: httpx.Response) -> str:
    parts = [
        str(e.get("detail") or e.get("title") or e.get("code") or "") for e in _errors(response)
    ]
    text = "; ".join(p for p in parts if p)
    if not text:  # storage answers S3-like XML or text
        text = response.text.strip().replace("\n", " ")[:300] or response.reason_phrase
    return f"{response.status_code} {text}"


class DocumentsClient:
    """POSTs to the API (with the key) and PUTs to storage (without it)."""

    def __init__(
        self,
        api: ApiSettings,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] | None = None,  # None: the API client's abortable wait
    ) -> None:
        if not api.api_key:
            raise ConfigError(
                "no API key: set TERMINAL49_API_KEY (or sources.terminal49.api_key in "
                ".dlt/secrets.toml)"
            )
        from pipelines.terminal49.client import Terminal49Client, tls_context

        self.base_url = api.base_url.rstrip("/")
        # The API side goes through the project's one HTTP seam (pacing, Retry-After, retries);
        # POSTs are retried a few times only: a second /documents is answered 409 anyway.
        self._api = Terminal49Client.for_api(
            api,
            transport=transport,
            max_attempts=_ATTEMPTS,
            sleep=sleep,
        )
        timeout = httpx.Timeout(120.0, connect=10.0)
        # storage: absolute URLs, no default headers at all (never the key)
        self._storage = httpx.Client(
            timeout=timeout, transport=transport, verify=tls_context(), follow_redirects=False
        )

    def __repr__(self) -> str:
        return f"DocumentsClient(base_url={self.base_url!r})"

    def close(self) -> None:
        self._api.close()
        self._storage.close()

    def __enter__(self) -> DocumentsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _post(self, path: str, body: dict[str, Any], content_type: str) -> httpx.Response:
        """POST through the API client; giving up after its retries is an UploadFailed."""
        from pipelines.terminal49.client import Terminal49Error

        try:
            return self._api.post(path, orjson.dumps(body), content_type)
        except Terminal49Error as exc:
            raise UploadFailed(str(exc)) from None

    def upload_bytes(
        self,
        data: bytes,
        filename: str,
        name: str,
        *,
        path: Path | None = None,
        content_type: str | None = None,
        checksum: str | None = None,
    ) -> UploadResult:
        """The three steps for ``data``. ``checksum`` overrides the computed one (tests)."""
        where = path or Path(filename)
        ck = checksum or checksum_of(data)
        blob_req = {
            "blob": {
                "filename": filename,
                "content_type": content_type or content_type_of(Path(filename)),
                "byte_size": len(data),
                "checksum": ck,
            }
        }
        resp = self._post(DIRECT_UPLOADS_PATH, blob_req, "application/json")
        if resp.status_code in (401, 403):
            raise UploadFailed(
                f"the API refused the key ({_detail(resp)}); check TERMINAL49_API_KEY"
            )
        if resp.status_code not in (200, 201):
            raise UploadFailed(f"{where}: direct upload refused: {_detail(resp)}")
        blob = orjson.loads(resp.content)
        direct = blob.get("direct_upload") or {}
        url, headers = direct.get("url"), dict(direct.get("headers") or {})
        signed_id = blob.get("signed_id")
        if not isinstance(url, str) or not isinstance(signed_id, str):
            raise UploadFailed(f"{where}: the direct-upload answer has no url or signed_id")
        if not url.startswith(("http://", "https://")):
            raise UploadFailed(f"{where}: the storage address is not an absolute URL")
        headers = {str(k): str(v) for k, v in headers.items()}
        headers["Content-Length"] = str(len(data))
        try:
            put = self._storage.put(url, content=data, headers=headers)
        except httpx.TransportError as exc:
            raise UploadFailed(f"{where}: storage upload failed: {type(exc).__name__}") from None
        if put.status_code not in (200, 201, 204):
            reason = _detail(put)
            if "digest" in reason.lower() or "md5" in reason.lower():
                reason = f"checksum mismatch: {reason}"
            raise UploadFailed(f"{where}: storage refused the upload ({reason})")
        doc_req = {
            "data": {
                "type": "document",
                "attributes": {"name": name, "attached_document": signed_id},
            }
        }
        resp = self._post(DOCUMENTS_PATH, doc_req, "application/vnd.api+json")
        if resp.status_code == 409:
            for e in _errors(resp):
                meta = e.get("meta") or {}
                if e.get("code") == "duplicate_document" or meta.get("existing_document_id"):
                    raise DuplicateDocument(
                        where,
                        str(meta.get("existing_document_id")),
                        meta.get("existing_document_name"),
                    )
        if resp.status_code != 201 and resp.status_code != 200:
            raise UploadFailed(f"{where}: document not created: {_detail(resp)}")
        document = orjson.loads(resp.content).get("data") or {}
        return UploadResult(where, name, str(document.get("id")), len(data), ck, document)


def upload_file(
    client: DocumentsClient, path: str | os.PathLike[str], name: str | None = None
) -> UploadResult:
    """Read and upload one file; ``name`` defaults to the file name."""
    p = Path(path)
    data = read_file(p)
    return client.upload_bytes(data, p.name, name or p.name, path=p)


def sync_documents(
    duckdb_path: str | os.PathLike[str] | Warehouse | None = None,
    api: ApiSettings | None = None,
    *,
    transport: httpx.BaseTransport | None = None,
    lock_retry_seconds: float = 30.0,
) -> dict[str, int]:
    """Load documents, email submissions and representations; rows written per table.

    ``duckdb_path``: the warehouse (a DuckDB path, a ``postgresql://`` URL or a
    :class:`Warehouse`; default :func:`pipelines.config.resolve_warehouse`'s). The API is read
    without the writer lock, in the key's budget shared with the warehouse's other writers;
    the lock is held only to publish (:func:`pipelines.write.write`; on PostgreSQL
    :func:`pipelines.pg.write.write`: dlt stages the documents, one transaction under the
    writers' advisory lock publishes them by the same merge rules)."""
    api = api or ApiSettings.resolve()
    if not api.api_key:
        raise ConfigError("no API key: set TERMINAL49_API_KEY (or sources.terminal49.api_key)")
    from pipelines.load import key_budget
    from pipelines.terminal49.client import Terminal49Client
    from pipelines.terminal49.documents import DOCUMENT_TABLE_HINTS, documents_source
    from pipelines.write import write

    warehouse = resolve_warehouse(duckdb_path)
    if warehouse.is_postgres:  # the server answers and the role may write, before any request
        from pipelines.pg.connection import check_writable

        check_writable(warehouse, (DATASET, incoming_dataset(WRITER)))
    client = Terminal49Client.for_api(api, transport=transport, budget=key_budget(warehouse))
    try:
        if warehouse.is_postgres:
            from pipelines.pg.write import write as write_postgres

            published = write_postgres(
                WRITER, documents_source(client), warehouse, what="documents sync"
            )
        else:
            assert warehouse.path is not None
            published = write(
                WRITER,
                documents_source(client),
                warehouse.path,
                lock_retry_seconds=lock_retry_seconds,
                what="documents sync",
            )
    finally:
        client.close()
    return {t: published.written.get(t, 0) for t in DOCUMENT_TABLE_HINTS}
