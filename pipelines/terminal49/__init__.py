"""dlt source for a Terminal49 account: containers, shipments, holds, fees, terminals, ports.

``terminal49_source(client)`` scans ``/containers?include=pod_terminal,pickup_facility`` and
``/shipments?include=...`` (each a full, reconciled scan, see
:mod:`.scan`) and flattens every page into Arrow tables (see :mod:`.flatten`), so dlt skips
its slow per-row normalisation. Pages are flattened as they arrive and handed to dlt in
batches of about ``settings.BATCH_RECORDS`` records: dlt's cost per item is large and fixed,
and a page's parsed JSON is dropped as soon as it is flat, so the scan holds a few pages at
a time, whatever the account's size (only the set of ids seen grows with it).

Every table merges on its primary key; the newest fetch of a record wins (by ``fetched_at``:
see :func:`_parent` and :func:`_child`), so running a load twice leaves the same rows, and a
container whose holds or fees become empty loses its old child rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dlt
import pyarrow as pa
from dlt.sources import DltResource

from pipelines._memory import release_unused
from pipelines.config import staging_dataset
from pipelines.terminal49 import settings
from pipelines.terminal49.client import Terminal49Client
from pipelines.terminal49.pages import Claims
from pipelines.terminal49.scan import ListScan, ProgressCallback

_MERGE: Any = {"disposition": "merge", "strategy": "delete-insert"}
_NEWEST_WINS: dict[str, Any] = {"fetched_at": {"dedup_sort": "desc", "data_type": "timestamp"}}


def _staged(name: str) -> str:
    """Table ``name`` in dlt's staging schema, for a source filter's subquery."""
    return f'"{staging_dataset()}"."{name}"'


def _child(name: str) -> dict[str, Any]:
    """Hints of a container's child table ``name`` (holds, fees): its rows replace all of the
    container's rows (merge key ``container_id``), from the container's newest fetch only.

    One load can fetch a container twice (reconciliation re-reads page 1, where a refreshed
    container moves). Deduplicating by (container_id, position) alone kept rows of the older
    fetch: a hold cleared between the two fetches stayed, and so did any position the newer
    fetch no longer has. The source filter keeps the staging rows whose ``fetched_at`` is their
    container's latest; it names columns unqualified, which resolve to the staging table both in
    dlt's delete (an EXISTS over staging) and in its insert. dlt applies it after its
    (container_id, position) dedup, so that dedup must keep the newest row too (``fetched_at``
    sorted descending): otherwise a position both fetches have could keep the older row, which
    the filter would then drop, and the newer one with it.
    """
    newest = (
        f'("container_id", "fetched_at") IN (SELECT "container_id", max("fetched_at") '
        f'FROM {_staged(name)} GROUP BY "container_id")'
    )
    return {
        "write_disposition": {**_MERGE, "source_filter": newest},
        "merge_key": "container_id",
        "primary_key": ("container_id", "position"),
        "columns": {**_NEWEST_WINS, "_deleted": {"hard_delete": True, "data_type": "bool"}},
    }


def _json_hints(attributes: dict[str, Any]) -> dict[str, Any]:
    return {k: {"data_type": "json"} for k, v in attributes.items() if v == settings.JSON}


def _parent(name: str, columns: dict[str, Any]) -> dict[str, Any]:
    """Hints of a table of records (one row per ``id``): each id's newest fetch wins.

    dlt's own deduplication numbers the staging rows of each id (a window over whole rows),
    whose memory grows with the load: under the writer's bounded DuckDB memory (see
    ``pipelines.load.WRITER_CONFIG``) a load of 1,000,000 containers ran out of it. The source
    filter picks the same rows by an aggregate over two narrow columns instead (DuckDB's
    ``rowid`` of the staging row with the latest ``fetched_at`` per id; exactly one per id,
    ties included), so dlt is told the rows are deduplicated. Unqualified, ``rowid`` is the
    staging row's in both dlt's delete and its insert (see :func:`_child`).
    """
    newest = f'rowid IN (SELECT arg_max(rowid, "fetched_at") FROM {_staged(name)} GROUP BY "id")'
    return {
        "write_disposition": {**_MERGE, "source_filter": newest, "deduplicated": True},
        "primary_key": "id",
        "columns": {"fetched_at": {"data_type": "timestamp"}, **columns},
    }


#: Table name -> dlt hints. The order is the order tables are written in.
TABLE_HINTS: dict[str, dict[str, Any]] = {
    "containers": _parent("containers", _json_hints(settings.CONTAINER_ATTRIBUTES)),
    "container_holds": _child("container_holds"),
    "container_fees": _child("container_fees"),
    "shipments": _parent("shipments", _json_hints(settings.SHIPMENT_ATTRIBUTES)),
    "terminals": _parent("terminals", _json_hints(settings.TERMINAL_ATTRIBUTES)),
    "ports": _parent("ports", {}),
}


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
    on_page: ProgressCallback | None = None,
    include_shipments_list: bool = True,
    batch_records: int = settings.BATCH_RECORDS,
) -> list[DltResource]:
    """The account as dlt resources. ``client`` carries the key; dlt never sees it."""
    if include_shipments_list:
        lists = [
            ("containers", settings.CONTAINERS_PATH, settings.CONTAINER_INCLUDE),
            ("shipments", settings.SHIPMENTS_PATH, settings.SHIPMENT_INCLUDE),
        ]
    else:
        lists = [("containers", settings.CONTAINERS_PATH, settings.CONTAINER_INCLUDE_WITH_SHIPMENT)]

    def batches() -> Iterator[Batch]:
        claims = Claims()  # one per run: an included resource is flattened once per load
        batch, records = Batch(), 0
        for kind, path, include in lists:
            for page in ListScan(client, kind, path, include, on_page=on_page, claims=claims):
                for name, table in page.tables.items():
                    batch.setdefault(name, []).append(table)
                records += len(page.ids)
                if records >= batch_records:
                    yield batch
                    batch, records = Batch(), 0
                    release_unused()  # what parsing the batch freed (see pipelines._memory)
        if batch:
            yield batch

    parent = dlt.resource(batches, name="pages", selected=False)
    return [table_resource(name, parent) for name in TABLE_HINTS]


__all__ = ["TABLE_HINTS", "Batch", "Terminal49Client", "table_resource", "terminal49_source"]
