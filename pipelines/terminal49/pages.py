"""One fetched page, parsed and flattened into every table it feeds, in the fetching thread.

:func:`parse_page` runs in the client's worker threads (see :class:`.scan.ListScan`), so the
main thread only batches tables for dlt. A body that is not a JSON:API document (cut short,
HTML) raises :class:`UnreadableBody`, which the client retries.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa

from pipelines.terminal49 import flatten, settings
from pipelines.terminal49.client import UnreadableBody


@dataclass
class ParsedPage:
    """What the scan needs of a page, and the page's rows by table."""

    kind: str
    fetched_at: dt.datetime
    ids: list[str]
    total: int | None
    has_next: bool
    tables: dict[str, pa.Table] = field(default_factory=dict)


def parse_page(raw: bytes, kind: str, fetched_at: dt.datetime | None = None) -> ParsedPage:
    """Parse and flatten one list page of ``kind`` ("containers" or "shipments")."""
    fetched_at = fetched_at or dt.datetime.now(dt.UTC)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UnreadableBody(f"unparseable body ({len(raw)} bytes)") from exc
    if not isinstance(doc, dict) or "data" not in doc:
        raise UnreadableBody("body is not a JSON:API document")
    return python_page(doc, kind, fetched_at)


# -- the per-record Python path ---------------------------------------------------------------
def python_page(doc: dict[str, Any], kind: str, fetched_at: dt.datetime) -> ParsedPage:
    """Flatten a parsed document with :mod:`.flatten`."""
    data = doc.get("data") or []
    data = data if isinstance(data, list) else [data]
    data = [r for r in data if isinstance(r, dict) and r.get("id") is not None]
    included = [r for r in doc.get("included") or [] if isinstance(r, dict)]
    tables: dict[str, pa.Table] = {}
    if kind == "containers" and data:
        tables["containers"] = flatten.containers_table(data, fetched_at)
        tables["container_holds"] = flatten.holds_table(data)
        tables["container_fees"] = flatten.fees_table(data)
    shipments = flatten.of_types(data if kind == "shipments" else included, ("shipment",))
    if shipments:
        tables["shipments"] = flatten.shipments_table(shipments, fetched_at)
    terminals = flatten.of_types(included, settings.TERMINAL_TYPES)
    if terminals:
        tables["terminals"] = flatten.terminals_table(terminals, fetched_at)
    ports = flatten.of_types(included, settings.PORT_TYPES)
    if ports:
        tables["ports"] = flatten.ports_table(ports, fetched_at)
    total = (doc.get("meta") or {}).get("total")
    return ParsedPage(
        kind=kind,
        fetched_at=fetched_at,
        ids=[str(r["id"]) for r in data],
        total=total if isinstance(total, int) else None,
        has_next=bool((doc.get("links") or {}).get("next")),
        tables=tables,
    )
