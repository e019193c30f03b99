"""dlt source for a Terminal49 account: containers, shipments, holds, fees, terminals, ports.

``terminal49_source(client)`` scans ``/containers`` and ``/shipments`` (each a reconciled list
scan, see :mod:`.scan`) and flattens every page into Arrow tables (see :mod:`.flatten`), so dlt
skips its slow per-row normalisation. Pages are handed to dlt in batches of about
``settings.BATCH_RECORDS`` records, so the scan holds a few pages at a time whatever the
account's size. A last item, table ``freetime_scan``, says what was scanned (see
:class:`pipelines.write.ScanInfo`).

Every table is appended to the writer's incoming dataset; how each is merged into the warehouse
(the newest fetch of a record wins, a container's holds and fees are replaced with it) is
declared once, in :data:`pipelines.write.MERGES`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dlt
import pyarrow as pa
from dlt.sources import DltResource

from pipelines.terminal49 import settings
from pipelines.terminal49.client import Terminal49Client
from pipelines.terminal49.pages import Claims
from pipelines.terminal49.scan import Filters, ListScan, ProgressCallback


def _json_hints(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {k: {"data_type": "json"} for k, v in attributes.items() if v == settings.JSON}


def column_hints(columns: dict[str, Any] | None = None) -> dict[str, Any]:
    """dlt hints of a table appended to an incoming dataset: its JSON columns and instants."""
    return {
        "write_disposition": "append",
        "columns": {"fetched_at": {"data_type": "timestamp"}, **(columns or {})},
    }


#: Table name -> dlt hints of the tables a load writes.
TABLE_HINTS: dict[str, dict[str, Any]] = {
    "containers": column_hints(_json_hints(settings.CONTAINER_ATTRIBUTES)),
    "container_holds": column_hints(),
    "container_fees": column_hints(),
    "shipments": column_hints(_json_hints(settings.SHIPMENT_ATTRIBUTES)),
    "terminals": column_hints(_json_hints(settings.TERMINAL_ATTRIBUTES)),
    "ports": column_hints(),
    "freetime_scan": {"write_disposition": "append"},
}


@dataclass(frozen=True)
class ListSpec:
    """One list to scan: ``kind`` ("containers"/"shipments"), its path, include and filters."""

    kind: str
    path: str
    include: str | None
    filters: Filters | None = None


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


def table_resource(
    name: str, parent: DltResource, hints: dict[str, dict[str, Any]] | None = None
) -> DltResource:
    """A transformer that writes table ``name`` of each :class:`Batch` ``parent`` yields,
    with that table's hints (default :data:`TABLE_HINTS`)."""

    def pick(batch: Batch) -> Iterator[pa.Table]:
        yield from _concat(batch.get(name, []))

    return dlt.transformer(pick, name=name, data_from=parent, **(hints or TABLE_HINTS)[name])


@dlt.source(name="terminal49", max_table_nesting=0)
def terminal49_source(
    client: Terminal49Client,
    lists: Sequence[ListSpec],
    on_page: ProgressCallback | None = None,
    scan_info: Callable[[], pa.Table] | None = None,
    batch_records: int = settings.BATCH_RECORDS,
) -> list[DltResource]:
    """The account as dlt resources: each of ``lists`` scanned in turn, then ``scan_info()``
    (called once every list is scanned) as table ``freetime_scan``. ``client`` carries the key;
    dlt never sees it."""

    def batches() -> Iterator[Batch]:
        claims = Claims()  # one per run: an included resource is flattened once per load
        batch, records = Batch(), 0
        for spec in lists:
            scan = ListScan(
                client,
                spec.kind,
                spec.path,
                spec.include,
                filters=spec.filters,
                on_page=on_page,
                claims=claims,
            )
            for page in scan:
                for name, table in page.tables.items():
                    batch.setdefault(name, []).append(table)
                records += len(page.ids)
                if records >= batch_records:
                    yield batch
                    batch, records = Batch(), 0
        if scan_info is not None:
            batch["freetime_scan"] = [scan_info()]
        if batch:
            yield batch

    parent = dlt.resource(batches, name="pages", selected=False)
    return [table_resource(name, parent) for name in TABLE_HINTS]


__all__ = [
    "TABLE_HINTS",
    "Batch",
    "ListSpec",
    "Terminal49Client",
    "table_resource",
    "terminal49_source",
]
