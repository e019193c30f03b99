"""One fetched page, parsed and flattened into every table it feeds, in the fetching thread.

:func:`parse_page` runs in the client's worker threads (see :class:`.scan.ListScan`), so the
main thread only batches tables for dlt. A body cut short raises :class:`UnreadableBody`,
which the client retries; a complete body that is not a JSON:API document raises
:class:`MalformedBody`, which it does not.
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pyarrow as pa

from pipelines.terminal49 import flatten, settings
from pipelines.terminal49.client import MalformedBody, parse_json


@dataclass
class ParsedPage:
    """What the scan needs of a page, and the page's rows by table.

    ``ids`` are the page's distinct records; ``served`` counts the records the page carried
    (copies included), ``duplicates`` the copies dropped (the last copy of an id wins whole).
    ``size`` is the page size the API says is in effect (``meta.size``, else ``page[size]`` of
    ``links.current``/``links.last``), ``last_page`` the page number of ``links.last``.
    """

    kind: str
    fetched_at: dt.datetime
    ids: list[str]
    total: int | None
    has_next: bool
    tables: dict[str, pa.Table] = field(default_factory=dict)
    served: int = 0
    duplicates: int = 0
    size: int | None = None
    last_page: int | None = None


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
    doc = parse_json(raw)
    if not isinstance(doc, dict) or "data" not in doc:
        raise MalformedBody("the API sent JSON that is not a JSON:API document (no data)")
    return python_page(doc, kind, fetched_at, claims)


def _count(value: Any) -> int | None:
    """A count the API sent: an int, or a string of digits (``"250"``); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _link_param(links: dict[str, Any], name: str, key: str) -> int | None:
    """The integer query parameter ``key`` of link ``name`` (absolute or relative URL)."""
    url = links.get(name)
    if not isinstance(url, str):
        return None
    values = parse_qs(urlsplit(url).query).get(key)
    return _count(values[0]) or None if values else None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _by_id(records: list[dict[str, Any]], key: Any) -> list[dict[str, Any]]:
    """One record per key, the last copy, at the place of the first."""
    return list({key(r): r for r in records}.values())


def python_page(
    doc: dict[str, Any], kind: str, fetched_at: dt.datetime, claims: Claims | None = None
) -> ParsedPage:
    """Flatten a parsed document with :mod:`.flatten`."""
    data = doc.get("data") or []
    data = data if isinstance(data, list) else [data]
    data = [r for r in data if isinstance(r, dict) and r.get("id") is not None]
    served = len(data)
    # a page carrying one id twice must not feed one copy's row and the other's holds
    data = _by_id(data, lambda r: str(r["id"]))
    included = [r for r in doc.get("included") or [] if isinstance(r, dict) and "id" in r]
    included = _by_id(included, lambda r: (r.get("type"), str(r["id"])))
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
    meta = _object(doc.get("meta"))
    links = _object(doc.get("links"))
    size = _count(meta.get("size")) or _link_param(links, "current", "page[size]")
    return ParsedPage(
        kind=kind,
        fetched_at=fetched_at,
        ids=[str(r["id"]) for r in data],
        total=_count(meta.get("total")),
        has_next=bool(links.get("next")),
        tables=tables,
        served=served,
        duplicates=served - len(data),
        size=size or _link_param(links, "last", "page[size]"),
        last_page=_link_param(links, "last", "page[number]"),
    )
