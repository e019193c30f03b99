"""One fetched page, parsed and flattened into every table it feeds, in the fetching thread.

:func:`parse_page` runs in the client's worker threads (see :class:`.scan.ListScan`), so the
main thread only batches tables for dlt; those threads flatten one page at a time
(:data:`_FLATTENING`). A body that is not a JSON:API document (cut short, HTML) raises
:class:`UnreadableBody`, which the client retries.
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa

from pipelines.terminal49 import flatten, settings
from pipelines.terminal49.client import UnreadableBody

#: Held while a page is parsed and flattened. Flattening is Python and pyarrow work under the
#: GIL, and pyarrow releases and retakes the GIL many times a page: four threads flattening at
#: once hand it over at every release. The 283 pages of 20,000 containers took 3.76 s of CPU so,
#: 1.86 s with this lock and 1.43 s in one thread. A thread waiting here uses no CPU, and the
#: other threads' downloads go on meanwhile.
_FLATTENING = threading.Lock()


@dataclass
class ParsedPage:
    """What the scan needs of a page, and the page's rows by table."""

    kind: str
    fetched_at: dt.datetime
    ids: list[str]
    total: int | None
    has_next: bool
    tables: dict[str, pa.Table] = field(default_factory=dict)


class Claims:
    """Included resources already taken during one load, shared by the fetching threads.

    The same terminal or shipment is included on many pages; flattening it once per load
    instead of once per page halves the client's work on a container page.
    """

    def __init__(self) -> None:
        self._taken: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def claim(self, resources: list[Any]) -> list[Any]:
        """The resources not taken before (first occurrence wins); they are now taken."""
        out = []
        with self._lock:
            for r in resources:
                key = (r.get("type"), str(r.get("id")))
                if key not in self._taken:
                    self._taken.add(key)
                    out.append(r)
        return out


def parse_page(
    raw: bytes,
    kind: str,
    fetched_at: dt.datetime | None = None,
    claims: Claims | None = None,
) -> ParsedPage:
    """Parse and flatten one list page of ``kind`` ("containers" or "shipments").

    With ``claims``, included resources another page already provided are skipped; a list's
    own records (``data``) are always kept.
    """
    fetched_at = fetched_at or dt.datetime.now(dt.UTC)
    with _FLATTENING:
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise UnreadableBody(f"unparseable body ({len(raw)} bytes)") from exc
        if not isinstance(doc, dict) or "data" not in doc:
            raise UnreadableBody("body is not a JSON:API document")
        return python_page(doc, kind, fetched_at, claims)


def python_page(
    doc: dict[str, Any], kind: str, fetched_at: dt.datetime, claims: Claims | None = None
) -> ParsedPage:
    """Flatten a parsed document with :mod:`.flatten`."""
    data = doc.get("data") or []
    data = data if isinstance(data, list) else [data]
    data = [r for r in data if isinstance(r, dict) and r.get("id") is not None]
    included = [r for r in doc.get("included") or [] if isinstance(r, dict) and "id" in r]
    if claims is not None:
        included = claims.claim(included)
    tables: dict[str, pa.Table] = {}
    if kind == "containers" and data:
        tables["containers"] = flatten.containers_table(data, fetched_at)
        tables["container_holds"] = flatten.holds_table(data, fetched_at)
        tables["container_fees"] = flatten.fees_table(data, fetched_at)
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
