"""dlt source for a Terminal49 account: containers, shipments, holds, fees, terminals, ports.

``terminal49_source(client)`` scans ``/containers?include=shipment,pod_terminal,
pickup_facility`` and ``/shipments?include=...`` (each a full, reconciled scan, see
:mod:`.scan`) and flattens every page into Arrow tables (see :mod:`.flatten`), so dlt skips
its slow per-row normalisation. Every table merges on its primary key; the newest fetch of a
record wins (``fetched_at`` is the dedup sort key), so running a load twice leaves the same
rows, and a container whose holds or fees become empty loses its old child rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dlt
import pyarrow as pa
from dlt.sources import DltResource

from pipelines.terminal49 import flatten, settings
from pipelines.terminal49.client import Terminal49Client
from pipelines.terminal49.scan import ListScan, Page, ProgressCallback

_MERGE: Any = {"disposition": "merge", "strategy": "delete-insert"}
_NEWEST_WINS: dict[str, Any] = {"fetched_at": {"dedup_sort": "desc", "data_type": "timestamp"}}


def _json_hints(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: {"data_type": "json"} for k, v in attributes.items() if v == settings.JSON}


@dlt.source(name="terminal49", max_table_nesting=0)
def terminal49_source(
    client: Terminal49Client,
    on_page: ProgressCallback | None = None,
    include_shipments_list: bool = True,
) -> list[DltResource]:
    """The account as dlt resources. ``client`` carries the key; dlt never sees it."""

    def pages() -> Iterator[Page]:
        yield from ListScan(
            client,
            "containers",
            settings.CONTAINERS_PATH,
            settings.CONTAINER_INCLUDE,
            on_page=on_page,
        )
        if include_shipments_list:
            yield from ListScan(
                client,
                "shipments",
                settings.SHIPMENTS_PATH,
                settings.SHIPMENT_INCLUDE,
                on_page=on_page,
            )

    pages_resource = dlt.resource(pages, name="pages", selected=False)

    @dlt.transformer(
        name="containers",
        write_disposition=_MERGE,
        primary_key="id",
        columns={**_NEWEST_WINS, **_json_hints(settings.CONTAINER_ATTRIBUTES)},
    )
    def containers(page: Page) -> Iterator[pa.Table]:
        if page.kind == "containers" and page.data:
            yield flatten.containers_table(page.data, page.fetched_at)

    child_hints: dict[str, Any] = {
        "write_disposition": _MERGE,
        "merge_key": "container_id",
        "columns": {"_deleted": {"hard_delete": True, "data_type": "bool"}},
    }

    @dlt.transformer(
        name="container_holds", primary_key=("container_id", "position"), **child_hints
    )
    def container_holds(page: Page) -> Iterator[pa.Table]:
        if page.kind == "containers" and page.data:
            yield flatten.holds_table(page.data)

    @dlt.transformer(name="container_fees", primary_key=("container_id", "position"), **child_hints)
    def container_fees(page: Page) -> Iterator[pa.Table]:
        if page.kind == "containers" and page.data:
            yield flatten.fees_table(page.data)

    @dlt.transformer(
        name="shipments",
        write_disposition=_MERGE,
        primary_key="id",
        columns={**_NEWEST_WINS, **_json_hints(settings.SHIPMENT_ATTRIBUTES)},
    )
    def shipments(page: Page) -> Iterator[pa.Table]:
        records = page.data if page.kind == "shipments" else page.included
        found = flatten.of_types(records, ("shipment",))
        if found:
            yield flatten.shipments_table(found, page.fetched_at)

    @dlt.transformer(
        name="terminals",
        write_disposition=_MERGE,
        primary_key="id",
        columns={**_NEWEST_WINS, **_json_hints(settings.TERMINAL_ATTRIBUTES)},
    )
    def terminals(page: Page) -> Iterator[pa.Table]:
        found = flatten.of_types(page.included, settings.TERMINAL_TYPES)
        if found:
            yield flatten.terminals_table(found, page.fetched_at)

    @dlt.transformer(name="ports", write_disposition=_MERGE, primary_key="id", columns=_NEWEST_WINS)
    def ports(page: Page) -> Iterator[pa.Table]:
        found = flatten.of_types(page.included, settings.PORT_TYPES)
        if found:
            yield flatten.ports_table(found, page.fetched_at)

    return [
        pages_resource | containers,
        pages_resource | container_holds,
        pages_resource | container_fees,
        pages_resource | shipments,
        pages_resource | terminals,
        pages_resource | ports,
    ]


__all__ = ["Terminal49Client", "terminal49_source"]
