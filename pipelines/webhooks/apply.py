"""Inbox to warehouse: apply stored webhook notifications to the DuckDB dataset ``terminal49``.

Contract of :func:`apply_inbox`:
- reads the inbox rows not applied yet (oldest notification first, in batches), writes them,
  and only then marks them applied: a second run applies nothing new, and a run that fails
  before marking is simply repeated (every table merges on its key);
- ``webhook_notifications``: one row per notification (event, delivery attributes, reference
  object, receive/apply times, the whole payload as JSON);
- included containers, shipments, terminals and ports are flattened with
  :mod:`pipelines.terminal49.flatten` and merged with the full load's own hints
  (:data:`pipelines.terminal49.TABLE_HINTS`), so rows have the same columns and types and a
  container's holds and fees are replaced the same way;
- ``container.updated``: the changeset's current values are laid over the included container
  and each change is kept in ``container_changes``;
- a container event whose payload has no container attributes is completed by
  ``GET /containers/{id}?include=shipment,pod_terminal,pickup_facility`` (when a client is
  given; without one, or when the container cannot be identified, it is counted unresolved);
- ``transport_events`` (with ``invalidated_at`` and ``previous_version_id``),
  ``estimated_events``, and ``documents`` / ``email_submissions`` /
  ``document_representations`` from ``document.*`` events;
- **freshness**: a record from a notification is stamped ``fetched_at`` = the notification's
  ``created_at`` (when the API produced the payload), never later than the moment it was
  received; a refreshed container is stamped with the time of its GET, like the full load.
  The write (:func:`pipelines.write.write`) keeps the row with the later ``fetched_at`` inside
  its transaction, so a late or replayed notification never overwrites a newer row, even when a
  load runs at the same time; such records are counted as skipped.

The warehouse is written through :mod:`pipelines.write` (writer ``webhooks``), which holds the
writer lock only to publish each batch. One applier works on an inbox at a time
(:meth:`Inbox.applying`), and the inbox is never locked for long: the receiver keeps
accepting while this runs.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import dlt
import orjson
import pyarrow as pa
from dlt.sources import DltResource

from pipelines import history
from pipelines.config import DATASET, Warehouse, resolve_warehouse
from pipelines.terminal49 import TABLE_HINTS, column_hints, flatten, settings
from pipelines.terminal49.client import ApiError, Terminal49Client, Terminal49Error
from pipelines.terminal49.documents import (
    DOCUMENT_TABLE_HINTS,
    document_tables,
    representation_owners,
    representations_table,
)
from pipelines.terminal49.settings import (
    ESTIMATED_EVENT_ATTRIBUTES,
    ESTIMATED_EVENT_RELATIONSHIPS,
    TRANSPORT_EVENT_ATTRIBUTES,
    TRANSPORT_EVENT_RELATIONSHIPS,
)
from pipelines.webhooks.inbox import (
    Inbox,
    InboxRow,
    MalformedNotification,
    Notification,
    default_inbox_path,
    notification_from_doc,
)
from pipelines.write import MERGES, WriteSummary, write

log = logging.getLogger("freetime.webhooks")

NOTIFICATIONS_PATH = "/webhook_notifications"
BATCH_NOTIFICATIONS = 5_000

TS = settings.TS

#: Tables written only by webhooks, with their dlt hints (merge rules: pipelines.write.MERGES).
WEBHOOK_TABLE_HINTS: dict[str, dict[str, Any]] = {
    "webhook_notifications": column_hints({"payload": {"data_type": "json"}}),
    "transport_events": column_hints(),
    "estimated_events": column_hints(),
    "container_changes": column_hints(
        {"previous": {"data_type": "json"}, "current": {"data_type": "json"}}
    ),
}
ALL_HINTS: dict[str, dict[str, Any]] = {
    **TABLE_HINTS,
    **DOCUMENT_TABLE_HINTS,
    **WEBHOOK_TABLE_HINTS,
}

#: JSON:API type -> the table its records land in.
_TABLE_OF_TYPE = {
    "container": "containers",
    "shipment": "shipments",
    "terminal": "terminals",
    "rail_terminal": "terminals",
    "port": "ports",
    "metro_area": "ports",
    "document": "documents",
    "email_submission": "email_submissions",
    "document_representation": "document_representations",
    "transport_event": "transport_events",
    "estimated_event": "estimated_events",
}

Stamp = Literal["created_at", "received_at"]


@dataclass
class ApplySummary:
    """What one :func:`apply_inbox` did."""

    duckdb_path: Path
    inbox_path: Path
    #: the warehouse written, as it may be shown (a PostgreSQL URL with its password masked)
    warehouse: str = ""
    notifications: int = 0
    events: dict[str, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    refreshed: int = 0
    unresolved: list[str] = field(default_factory=list)
    skipped_older: int = 0
    reconciled: int = 0
    malformed: int = 0
    pending: int = 0
    #: notifications deleted from the inbox (applied more than ``keep_days`` ago)
    pruned: int = 0
    seconds: float = 0.0
    #: containers whose row, holds or fees were written (or offered: an older one is skipped)
    container_ids: set[str] = field(default_factory=set)
    #: shipments written (or offered): their containers' risk follows them too
    shipment_ids: set[str] = field(default_factory=set)

    def line(self) -> str:
        rows = ", ".join(f"{t} {n}" for t, n in sorted(self.rows.items()) if n)
        pruned = f", {self.pruned} old ones removed from the inbox" if self.pruned else ""
        return (
            f"applied {self.notifications} notifications ({rows or 'no rows'}); "
            f"{self.refreshed} containers refreshed, {len(self.unresolved)} unresolved, "
            f"{self.skipped_older} older records skipped, {self.reconciled} reconciled, "
            f"{self.pending} still pending{pruned}, {self.seconds:.1f}s"
        )


def _ts(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _rel_id(resource: Mapping[str, Any], name: str) -> str | None:
    data = ((resource.get("relationships") or {}).get(name) or {}).get("data")
    if isinstance(data, dict) and data.get("id") is not None:
        return str(data["id"])
    return None


def _rel(resource: Mapping[str, Any], name: str) -> tuple[str, str] | None:
    data = ((resource.get("relationships") or {}).get(name) or {}).get("data")
    if isinstance(data, dict) and data.get("id") is not None and data.get("type"):
        return str(data["type"]), str(data["id"])
    return None


class _Batch:
    """The records of a batch of notifications, newest per (type, id), before flattening."""

    def __init__(self, stamp: Stamp) -> None:
        self.stamp = stamp
        self.records: dict[tuple[str, str], tuple[dt.datetime, dict[str, Any], str | None]] = {}
        self.notifications: list[dict[str, Any]] = []
        self.changes: list[dict[str, Any]] = []
        self.to_refresh: dict[str, str] = {}  # container id -> notification id
        self.unidentified: list[str] = []  # container events naming no container
        self.has_container: set[str] = set()
        self.malformed: list[str] = []
        self.created: dict[str, dt.datetime | None] = {}  # notification id -> its created_at

    def offer(self, resource: dict[str, Any], at: dt.datetime, notification_id: str | None) -> None:
        kind, rid = resource.get("type"), resource.get("id")
        if kind not in _TABLE_OF_TYPE or rid is None:
            return
        key = (str(kind), str(rid))
        if kind == "container" and not resource.get("attributes"):
            return  # an identifier only: not enough to write a row
        old = self.records.get(key)
        if old is None or at >= old[0]:  # ties: the later notification wins
            self.records[key] = (at, resource, notification_id)
        if kind == "container":
            self.has_container.add(str(rid))

    def add(self, row: InboxRow, doc: dict[str, Any], applied_at: dt.datetime) -> None:
        data = doc["data"]
        attrs = data.get("attributes") or {}
        received = _ts(row.received_at) or applied_at
        created = _ts(attrs.get("created_at"))
        at = received if self.stamp == "received_at" or created is None else min(created, received)
        included = [r for r in doc.get("included") or [] if isinstance(r, dict)]
        by_key = {(r.get("type"), str(r.get("id"))): r for r in included}
        ref = _rel(data, "reference_object")
        ref_obj = by_key.get(ref) if ref else None
        event = str(attrs.get("event"))
        self.created[row.id] = created

        # container.updated: lay the changeset over the included container, keep each change
        if ref_obj is not None and ref_obj.get("type") == "container_updated_event":
            changeset = (ref_obj.get("attributes") or {}).get("changeset") or {}
            cid = _rel_id(ref_obj, "container")
            if isinstance(changeset, dict) and cid:
                container = by_key.get(("container", cid))
                if container is not None and container.get("attributes"):
                    container = dict(container)
                    cattrs = dict(container["attributes"])
                    for name, change in changeset.items():
                        if isinstance(change, list) and len(change) == 2 and "." not in name:
                            cattrs[name] = change[1]
                    container["attributes"] = cattrs
                    by_key[("container", cid)] = container
                    included = [
                        container if (r.get("type"), str(r.get("id"))) == ("container", cid) else r
                        for r in included
                    ]
                ref_attrs = ref_obj.get("attributes") or {}
                for name, change in changeset.items():
                    prev, cur = (
                        change
                        if isinstance(change, list) and len(change) == 2
                        else (
                            None,
                            change,
                        )
                    )
                    self.changes.append(
                        {
                            "notification_id": row.id,
                            "container_id": cid,
                            "field": str(name),
                            "previous": orjson.dumps(prev).decode(),
                            "current": orjson.dumps(cur).decode(),
                            "timestamp": _ts(ref_attrs.get("timestamp")),
                            "data_source": ref_attrs.get("data_source"),
                            "created_at": created,
                        }
                    )

        for r in included:
            self.offer(r, at, row.id)

        # which containers does this notification speak of?
        containers: set[str] = set()
        for obj in [data, *([ref_obj] if ref_obj else [])]:
            cid = _rel_id(obj, "container")
            if cid:
                containers.add(cid)
        if ref and ref[0] == "container":
            containers.add(ref[1])
        shipment_id = (_rel_id(ref_obj, "shipment") if ref_obj else None) or _rel_id(
            data, "shipment"
        )
        document_id = _rel_id(data, "document")
        for cid in containers:
            if cid not in self.has_container:
                self.to_refresh.setdefault(cid, row.id)
        if (
            event.startswith("container.")
            and not containers
            and not any(r.get("type") == "container" for r in included)
        ):
            self.unidentified.append(row.id)

        self.notifications.append(
            {
                "id": row.id,
                "event": event,
                "delivery_status": attrs.get("delivery_status"),
                "version": attrs.get("version"),
                "created_at": created,
                "webhook_id": _rel_id(data, "webhook"),
                "reference_object_type": ref[0] if ref else None,
                "reference_object_id": ref[1] if ref else None,
                "container_id": sorted(containers)[0] if containers else None,
                "shipment_id": shipment_id,
                "document_id": document_id,
                "received_at": _ts(row.received_at),
                "deliveries": row.deliveries,
                "source": row.source,
                "applied_at": applied_at,
                "payload": row.body.decode("utf-8", errors="replace"),
            }
        )

    # -- flattening ----------------------------------------------------------------------------
    def _for_history(
        self, table: pa.Table, recs: Sequence[tuple[dt.datetime, dict[str, Any], str | None]]
    ) -> pa.Table:
        """``table`` with the columns history reads (never published): the notification each
        row came from, and when the API produced it."""
        nids = [n for _, _, n in recs]
        created = [self.created.get(n) if n else None for n in nids]
        return table.append_column(
            history.NOTIFICATION_COLUMN, pa.array(nids, pa.string())
        ).append_column(history.OBSERVED_COLUMN, pa.array(created, TS))

    def tables(self) -> dict[str, pa.Table]:
        by_table: dict[str, list[tuple[dt.datetime, dict[str, Any], str | None]]] = {}
        for (kind, _), rec in self.records.items():
            by_table.setdefault(_TABLE_OF_TYPE[kind], []).append(rec)
        out: dict[str, pa.Table] = {}
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        for table, recs in by_table.items():
            resources = [r for _, r, _ in recs]
            stamps = pa.array([at for at, _, _ in recs], TS)
            if table == "containers":
                flat = self._for_history(flatten.containers_table(resources, epoch), recs)
                # each container's holds and fees carry that container's instant
                rec_of = {str(r["id"]): rec for rec, r in zip(recs, resources, strict=True)}
                for child, rows in (
                    ("container_holds", flatten.holds_table(resources, stamps)),
                    ("container_fees", flatten.fees_table(resources, stamps)),
                ):
                    of_row = [rec_of[c] for c in rows.column("container_id").to_pylist()]
                    out[child] = self._for_history(rows, of_row)
            elif table == "shipments":
                flat = self._for_history(flatten.shipments_table(resources, epoch), recs)
            elif table == "terminals":
                flat = flatten.terminals_table(resources, epoch)
            elif table == "ports":
                flat = flatten.ports_table(resources, epoch)
            elif table in ("transport_events", "estimated_events"):
                known = (
                    TRANSPORT_EVENT_ATTRIBUTES
                    if table == "transport_events"
                    else ESTIMATED_EVENT_ATTRIBUTES
                )
                rels = (
                    TRANSPORT_EVENT_RELATIONSHIPS
                    if table == "transport_events"
                    else ESTIMATED_EVENT_RELATIONSHIPS
                )
                cols = flatten.resource_columns(resources, known, rels, derived=["notification_id"])
                cols["notification_id"] = pa.array([n for _, _, n in recs], pa.string())
                flat = flatten.resource_table(resources, cols, epoch)
            elif table == "document_representations":
                owners = representation_owners(
                    [r for (kind, _), (_, r, _) in self.records.items() if kind == "document"]
                )
                flat = representations_table(resources, epoch, owners)
            else:
                flat = document_tables(resources, epoch)[table]
            idx = flat.schema.get_field_index("fetched_at")
            out[table] = flat.set_column(idx, "fetched_at", stamps)
        if self.notifications:
            out["webhook_notifications"] = _notifications_table(self.notifications)
        if self.changes:
            out["container_changes"] = pa.Table.from_pylist(
                self.changes,
                schema=pa.schema(
                    [
                        pa.field("notification_id", pa.string(), nullable=False),
                        pa.field("container_id", pa.string()),
                        pa.field("field", pa.string(), nullable=False),
                        pa.field("previous", pa.string()),
                        pa.field("current", pa.string()),
                        pa.field("timestamp", TS),
                        pa.field("data_source", pa.string()),
                        pa.field("created_at", TS),
                    ]
                ),
            )
        return out


def _notifications_table(rows: list[dict[str, Any]]) -> pa.Table:
    schema = pa.schema(
        [
            pa.field("id", pa.string(), nullable=False),
            pa.field("event", pa.string()),
            pa.field("delivery_status", pa.string()),
            pa.field("version", pa.string()),
            pa.field("created_at", TS),
            pa.field("webhook_id", pa.string()),
            pa.field("reference_object_type", pa.string()),
            pa.field("reference_object_id", pa.string()),
            pa.field("container_id", pa.string()),
            pa.field("shipment_id", pa.string()),
            pa.field("document_id", pa.string()),
            pa.field("received_at", TS),
            pa.field("deliveries", pa.int64()),
            pa.field("source", pa.string()),
            pa.field("applied_at", TS),
            pa.field("payload", pa.string()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


@dlt.source(name="terminal49_webhooks", max_table_nesting=0)
def _tables_source(tables: dict[str, pa.Table]) -> list[DltResource]:
    def one(table: pa.Table) -> Iterator[pa.Table]:
        yield table

    return [
        dlt.resource(one(tables[name]), name=name, **ALL_HINTS[name])
        for name in ALL_HINTS
        if name in tables
    ]


def write_tables(
    duckdb_path: Path | Warehouse, tables: dict[str, pa.Table], lock_retry_seconds: float = 30.0
) -> WriteSummary:
    """Merge ``tables`` into the warehouse (see :func:`pipelines.write.write`; on PostgreSQL
    :func:`pipelines.pg.write.write`, one transaction under the writers' advisory lock)."""
    if not tables:
        return WriteSummary()
    # --- WAREHOUSE DISPATCH (issue 30): webhook apply on PostgreSQL writes through pipelines/pg
    if isinstance(duckdb_path, Warehouse):
        if duckdb_path.path is None:
            from pipelines.config import incoming_dataset
            from pipelines.pg.connection import check_writable
            from pipelines.pg.lock import writer_lock
            from pipelines.pg.write import write as write_postgres

            check_writable(duckdb_path, (DATASET, incoming_dataset("webhooks")))
            with writer_lock(duckdb_path, "webhook apply"):
                return write_postgres("webhooks", _tables_source(tables), duckdb_path)
        duckdb_path = duckdb_path.path
    # --- end of the warehouse dispatch ---
    return write(
        "webhooks",
        _tables_source(tables),
        duckdb_path,
        lock_retry_seconds=lock_retry_seconds,
        what="webhook apply",
    )


def _refresh(
    client: Terminal49Client, container_ids: Sequence[str]
) -> tuple[list[tuple[dt.datetime, dict[str, Any]]], list[str]]:
    """GET each container with its includes; (fetch time, resource) pairs, and ids not found."""
    out: list[tuple[dt.datetime, dict[str, Any]]] = []
    missing: list[str] = []
    for cid in container_ids:
        try:
            doc = client.get_json(
                f"{settings.CONTAINERS_PATH}/{cid}",
                {"include": settings.CONTAINER_INCLUDE_WITH_SHIPMENT},
            )
        except ApiError as exc:
            if exc.status == 404:
                missing.append(cid)
                continue
            raise
        at = dt.datetime.now(dt.UTC)
        data = doc.get("data")
        for r in [data, *(doc.get("included") or [])]:
            if isinstance(r, dict):
                out.append((at, r))
    return out, missing


def _fetch_notification(client: Terminal49Client, nid: str) -> dict[str, Any] | None:
    """The notification as the API lists it, with its reference object, or None."""
    for include in ("reference_object", None):
        try:
            params = {"include": include} if include else None
            doc = client.get_json(f"{NOTIFICATIONS_PATH}/{nid}", params)
        except ApiError:
            continue
        if isinstance(doc.get("data"), dict):
            return doc
    return None


#: Days an applied notification stays in the inbox (a redelivery within them is recognised as
#: one; its body can be looked at) before :func:`apply_inbox` deletes it. The warehouse keeps
#: every payload.
KEEP_APPLIED_DAYS = 7.0


def apply_inbox(
    duckdb_path: str | os.PathLike[str] | Warehouse | None = None,
    inbox_path: str | os.PathLike[str] | None = None,
    client: Terminal49Client | None = None,
    *,
    reconcile: bool = False,
    reconcile_max_pages: int | None = None,
    batch_size: int = BATCH_NOTIFICATIONS,
    stamp: Stamp = "created_at",
    lock_retry_seconds: float = 30.0,
    keep_days: float = KEEP_APPLIED_DAYS,
    max_batches: int | None = None,
) -> ApplySummary:
    """Apply every pending inbox notification to the warehouse (at most ``max_batches``
    batches of ``batch_size``: the receiver's applier takes one small batch at a time); see
    the module docstring.

    ``client`` (optional) refreshes containers the payloads do not carry and, with
    ``reconcile=True``, first pulls notifications the receiver never got from
    ``GET /webhook_notifications``. Afterwards the notifications applied more than ``keep_days``
    ago leave the inbox (:meth:`Inbox.prune`: their payloads are in the warehouse).
    ``duckdb_path``: a DuckDB path, a ``postgresql://`` URL or a
    :class:`~pipelines.config.Warehouse` (default: ``FREETIME_WAREHOUSE``, see
    :func:`~pipelines.config.resolve_warehouse`); on PostgreSQL each batch is published in one
    transaction under the writers' advisory lock. Raises LoadFailed, WarehouseLocked,
    WriterBusy, WarehouseUnusable, Terminal49Error.
    """
    started = time.monotonic()
    warehouse = resolve_warehouse(duckdb_path)
    path = warehouse.path or warehouse.working_folder()
    ipath = Path(inbox_path) if inbox_path else default_inbox_path(warehouse)
    summary = ApplySummary(duckdb_path=path, inbox_path=ipath, warehouse=warehouse.display)
    with Inbox(ipath) as inbox, inbox.applying():
        if reconcile:
            if client is None:
                raise ValueError("reconcile needs an API client")
            summary.reconciled = reconcile_inbox(inbox, client, max_pages=reconcile_max_pages)
        done: set[str] = set()
        batches = 0
        while max_batches is None or batches < max_batches:
            rows = [r for r in inbox.pending(batch_size) if r.id not in done]
            if not rows:
                break
            batches += 1
            _apply_rows(rows, inbox, warehouse, client, stamp, lock_retry_seconds, summary)
            done.update(r.id for r in rows)
        summary.pending = inbox.counts()["pending"]
        cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(days=keep_days)
        summary.pruned = inbox.prune(cutoff.isoformat(timespec="microseconds"))
    summary.seconds = time.monotonic() - started
    return summary


def _apply_rows(
    rows: list[InboxRow],
    inbox: Inbox,
    warehouse: Warehouse,
    client: Terminal49Client | None,
    stamp: Stamp,
    lock_retry_seconds: float,
    summary: ApplySummary,
) -> None:
    applied_at = dt.datetime.now(dt.UTC)
    batch = _Batch(stamp)
    for row in rows:
        try:
            doc = orjson.loads(row.body)
            notification_from_doc(doc, row.body)
        except (orjson.JSONDecodeError, MalformedNotification):
            batch.malformed.append(row.id)  # cannot happen through the receiver; never retried
            continue
        if client is not None and row.id in _unidentified_probe(doc):
            fetched = _fetch_notification(client, row.id)
            if fetched is not None:
                doc = {
                    "data": doc["data"],
                    "included": [*(doc.get("included") or []), *(fetched.get("included") or [])],
                }
        batch.add(row, doc, applied_at)
        event = str(doc["data"]["attributes"]["event"])
        summary.events[event] = summary.events.get(event, 0) + 1
    if client is not None and batch.to_refresh:
        refreshed, missing = _refresh(client, sorted(batch.to_refresh))
        for at, r in refreshed:
            # a container refreshed for a notification is recorded as seen through it
            nid = batch.to_refresh.get(str(r.get("id"))) if r.get("type") == "container" else None
            batch.offer(r, at, nid)
        summary.refreshed += len(batch.to_refresh) - len(missing)
        summary.unresolved += [batch.to_refresh[c] for c in missing]
    elif batch.to_refresh:
        summary.unresolved += sorted(set(batch.to_refresh.values()))
    summary.unresolved += batch.unidentified
    tables = batch.tables()
    for name, key in (
        ("containers", "id"),
        ("container_holds", "container_id"),
        ("container_fees", "container_id"),
    ):
        if name in tables:
            summary.container_ids.update(str(v) for v in tables[name].column(key).to_pylist())
    if "shipments" in tables:
        summary.shipment_ids.update(str(v) for v in tables["shipments"].column("id").to_pylist())
    published = write_tables(warehouse, tables, lock_retry_seconds)
    for name, n in published.written.items():
        summary.rows[name] = summary.rows.get(name, 0) + n
    summary.skipped_older += sum(
        n for name, n in published.skipped.items() if MERGES[name].parent is None
    )
    inbox.mark_applied([r.id for r in rows], applied_at.isoformat())
    summary.notifications += len(rows) - len(batch.malformed)
    summary.malformed += len(batch.malformed)


def _unidentified_probe(doc: dict[str, Any]) -> set[str]:
    """{id} when a container event names no container at all (no reference object included)."""
    data = doc["data"]
    event = str((data.get("attributes") or {}).get("event"))
    if not event.startswith("container."):
        return set()
    included = [r for r in doc.get("included") or [] if isinstance(r, dict)]
    if any(r.get("type") == "container" for r in included):
        return set()
    ref = _rel(data, "reference_object")
    if ref and ref[0] == "container":
        return set()
    for r in included:
        if ref and (r.get("type"), str(r.get("id"))) == ref and _rel_id(r, "container"):
            return set()
    return {str(data["id"])}


# -- reconciliation ----------------------------------------------------------------------------
def _reachable(
    start: Mapping[str, Any], index: Mapping[tuple[str, str], dict[str, Any]]
) -> list[dict[str, Any]]:
    """Included resources reachable from ``start`` through relationships (transitively)."""
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    stack: list[Mapping[str, Any]] = [start]
    while stack:
        r = stack.pop()
        for rel in (r.get("relationships") or {}).values():
            data = (rel or {}).get("data") if isinstance(rel, dict) else None
            for ident in data if isinstance(data, list) else [data]:
                if not isinstance(ident, dict):
                    continue
                key = (str(ident.get("type")), str(ident.get("id")))
                if key in seen or key not in index:
                    continue
                seen.add(key)
                out.append(index[key])
                stack.append(index[key])
    return out


def reconcile_inbox(
    inbox: Inbox,
    client: Terminal49Client,
    *,
    max_pages: int | None = None,
    page_size: int = settings.PAGE_SIZE,
) -> int:
    """Page ``GET /webhook_notifications`` and store the notifications the inbox lacks.

    Each listed notification is stored with the included resources reachable from it (its
    reference object and what that links to), as if it had been delivered; ``source`` is
    ``reconcile``. Returns how many were new.
    """
    added = 0
    number = 1
    while max_pages is None or number <= max_pages:
        params: dict[str, Any] = {"page[number]": number, "page[size]": page_size}
        try:
            doc = client.get_json(NOTIFICATIONS_PATH, {**params, "include": "reference_object"})
        except ApiError as exc:
            if exc.status != 400:
                raise
            doc = client.get_json(NOTIFICATIONS_PATH, params)
        data = [d for d in doc.get("data") or [] if isinstance(d, dict)]
        index = {
            (str(r.get("type")), str(r.get("id"))): r
            for r in doc.get("included") or []
            if isinstance(r, dict)
        }
        items: list[Notification] = []
        for d in data:
            body = orjson.dumps({"data": d, "included": _reachable(d, index)})
            try:
                items.append(notification_from_doc(orjson.loads(body), body))
            except MalformedNotification:
                log.warning("reconcile: skipped a listed notification without id or event")
        known = inbox.known(n.id for n in items)
        new = [n for n in items if n.id not in known]
        if new:
            added += sum(inbox.add_many(new, source="reconcile"))
        if not data or not (doc.get("links") or {}).get("next"):
            break
        number += 1
    return added


__all__ = [
    "ApplySummary",
    "Terminal49Error",
    "apply_inbox",
    "reconcile_inbox",
    "write_tables",
]
