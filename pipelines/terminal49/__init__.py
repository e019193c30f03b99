"""dlt source for a Terminal49 account: containers, shipments, holds, fees, terminals, ports.

``terminal49_source(client)`` scans ``/containers?include=shipment,pod_terminal,
pickup_facility`` and ``/shipments?include=...`` (each a full, reconciled scan, see
:mod:`.scan`) and flattens every page into Arrow tables (see :mod:`.flatten`), so dlt skips
its slow per-row normalisation. Pages are flattened as they arrive and handed to dlt in
batches of about ``settings.BATCH_RECORDS`` records: dlt's cost per item is large and fixed,
and a page's parsed JSON is dropped as soon as it is flat, so memory stays flat.

Every table merges on its primary key; the newest fetch of a record wins (``fetched_at`` is the
dedup sort key), so running a load twice leaves the same rows, and a container whose holds or
fees become empty loses its old child rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import dlt
import pyarrow as pa
from dlt.sources import DltResource

from pipelines.terminal49 import flatten, settings
from pipelines.terminal49.client import Terminal49Client
from pipelines.terminal49.scan import ListScan, Page, ProgressCallback

_MERGE: Any = {"disposition": "merge", "strategy": "delete-insert"}
_NEWEST_WINS: dict[str, Any] = {"fetched_at": {"dedup_sort": "desc", "data_type": "timestamp"}}
_CHILD: dict[str, Any] = {
    "write_disposition": _MERGE,
    "merge_key": "container_id",
    "primary_key": ("container_id", "position"),
    "columns": {"_deleted": {"hard_delete": True, "data_type": "bool"}},
}


def _json_hints(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: {"data_type": "json"} for k, v in attributes.items() if v == settings.JSON}


def _parent(columns: dict[str, Any]) -> dict[str, Any]:
    return {
        "write_disposition": _MERGE,
        "primary_key": "id",
        "columns": {**_NEWEST_WINS, **columns},
    }


#: Table name -> dlt hints. The order is the order tables are written in.
TABLE_HINTS: dict[str, dict[str, Any]] = {
    "containers": _parent(_json_hints(settings.CONTAINER_ATTRIBUTES)),
    "container_holds": _CHILD,
    "container_fees": _CHILD,
    "shipments": _parent(_json_hints(settings.SHIPMENT_ATTRIBUTES)),
    "terminals": _parent(_json_hints(settings.TERMINAL_ATTRIBUTES)),
    "ports": _parent({}),
}


def page_tables(page: Page, seen: set[tuple[str, str]] | None = None) -> dict[str, pa.Table]:
    """Every table's rows from one page (a table with no rows is left out).

    ``seen`` (shared across the pages of one load) skips included resources already taken from
    an earlier page: the same terminal or shipment is included on many pages, and re-flattening
    it would cost more than the page's own records. A list's own records are never skipped.
    """
    out: dict[str, pa.Table] = {}
    if page.kind == "containers" and page.data:
        out["containers"] = flatten.containers_table(page.data, page.fetched_at)
        out["container_holds"] = flatten.holds_table(page.data)
        out["container_fees"] = flatten.fees_table(page.data)
    if page.kind == "shipments":
        shipments = flatten.of_types(page.data, ("shipment",))
    else:
        shipments = flatten.of_types(page.included, ("shipment",), seen)
    if shipments:
        out["shipments"] = flatten.shipments_table(shipments, page.fetched_at)
    terminals = flatten.of_types(page.included, settings.TERMINAL_TYPES, seen)
    if terminals:
        out["terminals"] = flatten.terminals_table(terminals, page.fetched_at)
    ports = flatten.of_types(page.included, settings.PORT_TYPES, seen)
    if ports:
        out["ports"] = flatten.ports_table(ports, page.fetched_at)
    return out


class Batch(dict[str, list[pa.Table]]):
    """Flattened pages, by table name, waiting to be handed to dlt together."""


def _concat(tables: list[pa.Table]) -> list[pa.Table]:
    """One table if the pages' schemas can be unified, else the pages as they are."""
    if len(tables) == 1:
        return tables
    try:
        return [pa.concat_tables(tables, promote_options="permissive")]
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return tables  # e.g. a new attribute typed differently on two pages: dlt unifies


def _table_resource(name: str, parent: DltResource) -> DltResource:
    def pick(batch: Batch) -> Iterator[pa.Table]:
        yield from _concat(batch.get(name, []))

    return dlt.transformer(pick, name=name, data_from=parent, **TABLE_HINTS[name])


@dlt.source(name="terminal49", max_table_nesting=0)
def terminal49_source(
    client: Terminal49Client,
    on_page: ProgressCallback | None = None,
    include_shipments_list: bool = True,
    batch_records: int = settings.BATCH_RECORDS,
) -> list[DltResource]:
    """The account as dlt resources. ``client`` carries the key; dlt never sees it."""
    scans: list[Callable[[], ListScan]] = [
        lambda: ListScan(
            client,
            "containers",
            settings.CONTAINERS_PATH,
            settings.CONTAINER_INCLUDE,
            on_page=on_page,
        )
    ]
    if include_shipments_list:
        scans.append(
            lambda: ListScan(
                client,
                "shipments",
                settings.SHIPMENTS_PATH,
                settings.SHIPMENT_INCLUDE,
                on_page=on_page,
            )
        )

    def batches() -> Iterator[Batch]:
        batch, records = Batch(), 0
        seen: set[tuple[str, str]] = set()
        for scan in scans:
            for page in scan():
                for name, table in page_tables(page, seen).items():
                    batch.setdefault(name, []).append(table)
                records += len(page.data)
                if records >= batch_records:
                    yield batch
                    batch, records = Batch(), 0
        if batch:
            yield batch

    parent = dlt.resource(batches, name="pages", selected=False)
    return [_table_resource(name, parent) for name in TABLE_HINTS]


__all__ = ["TABLE_HINTS", "Terminal49Client", "page_tables", "terminal49_source"]
