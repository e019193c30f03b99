"""dlt source for document intake: documents, email submissions and document representations.

``documents_source(client)`` pages ``GET /documents`` (with the last representation and the
email submission included) and ``GET /email_submissions`` (with their documents and those
documents' representations), flattens each page into Arrow tables in the style of
:mod:`.flatten`, and merges them on ``id`` with the newest fetch winning (``fetched_at``), as
the account source does. A representation's ``payload`` is kept whole as JSON.

The flatteners here are shared with :mod:`pipelines.webhooks.apply`, which writes the same
tables from ``document.extracted`` notifications.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import dlt
import pyarrow as pa
from dlt.sources import DltResource

from pipelines.terminal49 import Batch, column_hints, flatten, settings, table_resource
from pipelines.terminal49.client import ApiError, Terminal49Client
from pipelines.terminal49.scan import ScanIncomplete

DOCUMENTS_PATH = "/documents"
EMAIL_SUBMISSIONS_PATH = "/email_submissions"
DOCUMENT_INCLUDE = "last_document_representation,email_submission"
EMAIL_SUBMISSION_INCLUDE = "documents,documents.last_document_representation"
MAX_PAGES = 10_000

DOCUMENT_ATTRIBUTES: dict[str, pa.DataType | str] = {
    "name": pa.string(),
    "document_type": pa.string(),
    "document_type_manual": pa.string(),
    "classification_notes": pa.string(),
    "source": pa.string(),
    "file_name": pa.string(),
    "file_content_type": pa.string(),
    "file_size_bytes": pa.int64(),
    "created_at": settings.TS,
    "updated_at": settings.TS,
}
DOCUMENT_RELATIONSHIPS = ("account", "user", "email_submission", "last_document_representation")

EMAIL_SUBMISSION_ATTRIBUTES: dict[str, pa.DataType | str] = {
    "subject": pa.string(),
    "body_preview": pa.string(),
    "from": settings.JSON,
    "to": settings.JSON,
    "cc": settings.JSON,
    "message_id": pa.string(),
    "sent_at": settings.TS,
    "created_at": settings.TS,
    "updated_at": settings.TS,
}
EMAIL_SUBMISSION_RELATIONSHIPS = ("account", "user")

REPRESENTATION_ATTRIBUTES: dict[str, pa.DataType | str] = {
    "schema_version": pa.string(),
    "payload": settings.JSON,
    "created_at": settings.TS,
    "updated_at": settings.TS,
}


def _hints(attributes: Mapping[str, pa.DataType | str]) -> dict[str, Any]:
    return column_hints(
        {k: {"data_type": "json"} for k, v in attributes.items() if v == settings.JSON}
    )


#: Table name -> dlt hints, like :data:`pipelines.terminal49.TABLE_HINTS`.
DOCUMENT_TABLE_HINTS: dict[str, dict[str, Any]] = {
    "documents": _hints(DOCUMENT_ATTRIBUTES),
    "email_submissions": _hints(EMAIL_SUBMISSION_ATTRIBUTES),
    "document_representations": _hints(REPRESENTATION_ATTRIBUTES),
}


def documents_table(records: Sequence[flatten.Resource], fetched_at: dt.datetime) -> pa.Table:
    """One row per document: attributes, relationship ids, ``download_path`` (links.download)."""
    cols = flatten.resource_columns(
        records, DOCUMENT_ATTRIBUTES, DOCUMENT_RELATIONSHIPS, derived=["download_path"]
    )
    cols["download_path"] = pa.array(
        [(r.get("links") or {}).get("download") for r in records], pa.string()
    )
    return flatten.resource_table(records, cols, fetched_at)


def email_submissions_table(
    records: Sequence[flatten.Resource], fetched_at: dt.datetime
) -> pa.Table:
    cols = flatten.resource_columns(
        records, EMAIL_SUBMISSION_ATTRIBUTES, EMAIL_SUBMISSION_RELATIONSHIPS
    )
    return flatten.resource_table(records, cols, fetched_at)


def representations_table(
    records: Sequence[flatten.Resource],
    fetched_at: dt.datetime,
    document_ids: Mapping[str, str] | None = None,
) -> pa.Table:
    """Representations with their document's id (from the representation's own ``document``
    relationship, else from the document whose ``last_document_representation`` it is)."""
    cols = flatten.attribute_columns(records, REPRESENTATION_ATTRIBUTES, derived=["document_id"])
    own = flatten.relationship_ids(records, ("document",))["document_id"].to_pylist()
    by_rep = document_ids or {}
    cols["document_id"] = pa.array(
        [o or by_rep.get(str(r["id"])) for o, r in zip(own, records, strict=True)], pa.string()
    )
    return flatten.resource_table(records, cols, fetched_at)


def representation_owners(documents: Sequence[flatten.Resource]) -> dict[str, str]:
    """representation id -> document id, from documents' ``last_document_representation``."""
    out: dict[str, str] = {}
    for d in documents:
        rel = ((d.get("relationships") or {}).get("last_document_representation") or {}).get("data")
        if isinstance(rel, dict) and rel.get("id") is not None:
            out[str(rel["id"])] = str(d["id"])
    return out


def document_tables(
    resources: Sequence[flatten.Resource], fetched_at: dt.datetime
) -> dict[str, pa.Table]:
    """Every document, email submission and representation among ``resources``, as tables."""
    docs = flatten.of_types(resources, ("document",))
    emails = flatten.of_types(resources, ("email_submission",))
    reps = flatten.of_types(resources, ("document_representation",))
    tables: dict[str, pa.Table] = {}
    if docs:
        tables["documents"] = documents_table(docs, fetched_at)
    if emails:
        tables["email_submissions"] = email_submissions_table(emails, fetched_at)
    if reps:
        tables["document_representations"] = representations_table(
            reps, fetched_at, representation_owners(docs)
        )
    return tables


class _ListPages:
    """Every page of a document list, reconciled like :class:`.scan.ListScan`.

    The list's order is not documented; if it moves a record forward while we page (as the
    container list does), an offset scan skips one. So after the first pass, while fewer
    distinct ids than ``meta.total`` were seen, the list is re-read from page 1 (at most
    ``passes`` times), then :class:`.scan.ScanIncomplete` is raised. An include the server
    rejects (400) is dropped rather than failing the sync.
    """

    def __init__(
        self,
        client: Terminal49Client,
        path: str,
        include: str | None,
        page_size: int,
        passes: int = 3,
    ) -> None:
        self.client, self.path, self.include = client, path, include
        self.page_size, self.passes = page_size, passes
        self.seen: set[str] = set()
        self.total: int | None = None

    @property
    def complete(self) -> bool:
        return self.total is None or len(self.seen) >= self.total

    def _fetch(self, number: int) -> dict[str, Any]:
        while True:
            params: dict[str, Any] = {"page[number]": number, "page[size]": self.page_size}
            if self.include:
                params["include"] = self.include
            try:
                doc = self.client.get_json(self.path, params)
            except ApiError as exc:
                if exc.status == 400 and self.include:
                    self.include = None
                    continue
                raise
            data = doc.get("data") or []
            for r in data if isinstance(data, list) else [data]:
                if isinstance(r, dict) and r.get("id") is not None:
                    self.seen.add(str(r["id"]))
            total = (doc.get("meta") or {}).get("total")
            if isinstance(total, int):
                self.total = total
            return doc

    def _pass(self, until_complete: bool) -> Iterator[dict[str, Any]]:
        for number in range(1, MAX_PAGES + 1):
            if until_complete and self.complete:
                return
            doc = self._fetch(number)
            yield doc
            if not (doc.get("links") or {}).get("next") or not doc.get("data"):
                return

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self._pass(until_complete=False)
        for _ in range(self.passes):
            if self.complete:
                return
            yield from self._pass(until_complete=True)
        if not self.complete:
            raise ScanIncomplete(
                f"{self.path}: saw {len(self.seen)} distinct records of the {self.total} the "
                f"API reports, after {self.passes} reconciliation passes"
            )


@dlt.source(name="terminal49_documents", max_table_nesting=0)
def documents_source(
    client: Terminal49Client,
    page_size: int = settings.PAGE_SIZE,
    include_email_submissions: bool = True,
) -> list[DltResource]:
    """Documents, email submissions and representations as dlt resources (key stays in client)."""
    lists = [(DOCUMENTS_PATH, DOCUMENT_INCLUDE)]
    if include_email_submissions:
        lists.append((EMAIL_SUBMISSIONS_PATH, EMAIL_SUBMISSION_INCLUDE))

    def batches() -> Iterator[Batch]:
        for path, include in lists:
            for doc in _ListPages(client, path, include, page_size):
                data = doc.get("data") or []
                data = data if isinstance(data, list) else [data]
                included = doc.get("included") or []
                resources = [r for r in [*data, *included] if isinstance(r, dict)]
                tables = document_tables(resources, dt.datetime.now(dt.UTC))
                if tables:
                    yield Batch({name: [table] for name, table in tables.items()})

    parent = dlt.resource(batches, name="document_pages", selected=False)
    return [table_resource(name, parent, DOCUMENT_TABLE_HINTS) for name in DOCUMENT_TABLE_HINTS]


__all__ = ["DOCUMENT_TABLE_HINTS", "document_tables", "documents_source"]
