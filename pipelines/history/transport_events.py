"""Transport events from the API for the containers that need them, within the rate limit.

Contract of :func:`fetch_transport_events`:
- **which containers**: those whose milestones (:data:`MILESTONES`) changed in a load or
  webhook published since the previous fetch and that freetime knew before that change (a
  first sighting is no change: the first full load of an account asks for nothing), plus the
  containers the published risk run marks at risk (``AT_RISK_LEVELS``), those whose events
  were fetched longest ago (or never) first, so that successive runs go round them all;
- at most ``max_containers`` requests a run (:data:`REQUEST_BUDGET` by default, the budget
  docs/scheduling.md states): the events step of a run never waits on the API for more than
  that, whatever the account; what is left waits for the next runs (``deferred``);
- one ``GET /containers/{id}/transport_events`` per container through the rate-limited
  client; a container the API no longer knows (404) is skipped;
- the events are merged into ``terminal49.transport_events`` (the table the
  ``container.transport.*`` webhooks fill) by id, the newest fetch winning: an event the API
  has since invalidated keeps its row, with ``invalidated_at`` set; ``previous_version_id``
  links a corrected event to the one it replaces;
- fetched without the writer lock, written by :func:`pipelines.write.write` (on PostgreSQL
  :func:`pipelines.pg.write.write`) as writer ``events`` (the lock held only to publish):
  one transaction, recorded in
  ``terminal49.freetime_loads`` with the instant its containers were selected, which is where
  the next run starts.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dlt
import pyarrow as pa
from dlt.sources import DltResource

from pipelines.analytics.risk import AT_RISK_LEVELS
from pipelines.config import DATASET, Warehouse, incoming_dataset, resolve_warehouse
from pipelines.history import HISTORY_TABLE
from pipelines.terminal49 import flatten, settings
from pipelines.terminal49.client import ApiError, Terminal49Client
from pipelines.terminal49.settings import (
    TRANSPORT_EVENT_ATTRIBUTES,
    TRANSPORT_EVENT_RELATIONSHIPS,
)
from pipelines.warehouse import column_types, reading
from pipelines.warehouse import quote as q
from pipelines.webhooks.apply import WEBHOOK_TABLE_HINTS
from pipelines.write import LOADS_TABLE, write

WRITER = "events"
#: Requests the events step makes at most per run (one per container): at the API's 100
#: requests a minute, 24 s of the window at most (docs/scheduling.md).
REQUEST_BUDGET = 40
MILESTONES = (
    "current_status",
    "pod_arrived_at",
    "pod_discharged_at",
    "pod_full_out_at",
    "final_destination_full_out_at",
    "empty_terminated_at",
)


@dataclass
class EventsSummary:
    """What one fetch did: containers asked for, requests, events merged, containers the API no
    longer knows, and containers that needed events but wait for a later run (the budget)."""

    containers: int = 0
    requests: int = 0
    events: int = 0
    missing: int = 0
    deferred: int = 0

    def line(self) -> str:
        return (
            f"{self.requests} requests for {self.containers} containers, {self.events} events"
            + (f", {self.missing} unknown to the API" if self.missing else "")
            + (f"; {self.deferred} left for the next runs" if self.deferred else "")
        )


def containers_needing_events(
    warehouse: Path | Warehouse, max_containers: int | None = None
) -> list[str]:
    """The ids to ask events for (see the module docstring), most recently changed first, then
    the containers at risk, least recently fetched first; all of them when ``max_containers``
    is None. ``warehouse``: a DuckDB file or a PostgreSQL warehouse (one read-only
    snapshot); the same SQL runs on both."""
    wh = resolve_warehouse(warehouse)
    if wh.is_postgres:
        from pipelines.pg.read import reading as pg_reading
        from pipelines.pg.views import columns_of

        with pg_reading(wh) as cur:
            out = _select(
                _Reader(lambda sql: _rows(cur, sql), lambda s, t: set(columns_of(cur, s, t)))
            )
    else:
        assert wh.path is not None
        if not wh.path.exists():
            return []
        with reading(wh.path) as con:
            out = _select(
                _Reader(
                    lambda sql: con.execute(sql).fetchall(),
                    lambda s, t: set(column_types(con, s, t)),
                )
            )
    return out if max_containers is None else out[:max_containers]


@dataclass(frozen=True)
class _Reader:
    """What the selection needs of a warehouse: run a query, list a table's columns."""

    rows: Callable[[str], list[tuple[Any, ...]]]
    columns: Callable[[str, str], set[str]]


def _rows(cur: Any, sql: str) -> list[tuple[Any, ...]]:
    cur.execute(sql)
    return [tuple(r) for r in cur.fetchall()]


def _select(db: _Reader) -> list[str]:
    """:func:`containers_needing_events` in SQL that DuckDB and PostgreSQL both run."""
    if not db.columns(DATASET, HISTORY_TABLE) or not db.columns(DATASET, LOADS_TABLE):
        return []
    d = q(DATASET)
    fields = ", ".join(f"'{f}'" for f in MILESTONES)
    changed = db.rows(
        f"""
        WITH loads AS (SELECT load_id, published_at FROM {d}.{LOADS_TABLE}),
        since AS (SELECT coalesce(max(coalesce(scan_started_at, published_at)),
                                  TIMESTAMPTZ '1970-01-01')
                  FROM {d}.{LOADS_TABLE} WHERE writer = '{WRITER}')
        SELECT h.entity_id, max(l.published_at) AS changed_at
        FROM {d}.{HISTORY_TABLE} h JOIN loads l USING (load_id)
        WHERE h.entity = 'container' AND h.field IN ({fields})
          AND l.published_at > (SELECT * FROM since)
          AND h.old_value IS NOT NULL
        GROUP BY h.entity_id ORDER BY changed_at DESC, h.entity_id
        """
    )
    ids = [r[0] for r in changed]
    risky: list[str] = []
    if {"container_id", "risk_level"} <= db.columns("analytics", "demurrage_risk"):
        levels = ", ".join(f"'{x}'" for x in AT_RISK_LEVELS)
        fetched = "NULL"
        if {"container_id", "fetched_at"} <= db.columns(DATASET, "transport_events"):
            fetched = (
                f"(SELECT max(e.fetched_at) FROM {d}.transport_events e "
                "WHERE e.container_id = r.container_id)"
            )
        risky = [
            r[0]
            for r in db.rows(
                f"SELECT container_id, {fetched} AS last_fetch "
                "FROM analytics.demurrage_risk r "
                f"WHERE risk_level IN ({levels}) "
                "ORDER BY last_fetch NULLS FIRST, container_id"
            )
        ]
    return list(dict.fromkeys([*ids, *risky]))


def events_table(resources: list[dict[str, Any]], fetched_at: dt.datetime) -> pa.Table:
    """Transport event resources as rows of ``terminal49.transport_events``."""
    cols = flatten.resource_columns(
        resources,
        TRANSPORT_EVENT_ATTRIBUTES,
        TRANSPORT_EVENT_RELATIONSHIPS,
        derived=["notification_id"],
    )
    cols["notification_id"] = pa.array([None] * len(resources), pa.string())
    return flatten.resource_table(resources, cols, fetched_at)


@dlt.source(name="terminal49_transport_events", max_table_nesting=0)
def _events_source(table: pa.Table) -> list[DltResource]:
    def one() -> Iterator[pa.Table]:
        yield table

    return [dlt.resource(one(), name="transport_events", **WEBHOOK_TABLE_HINTS["transport_events"])]


def fetch_transport_events(
    path: Path | Warehouse,
    client: Terminal49Client,
    *,
    max_containers: int = REQUEST_BUDGET,
    on_request: Callable[[int, int], None] | None = None,
) -> EventsSummary:
    """Ask the API for the transport events of the containers that need them (at most
    ``max_containers``) and merge them into the warehouse; ``on_request(done, total)`` after
    each request. ``path``: a DuckDB file or a PostgreSQL warehouse (published there by
    :func:`pipelines.pg.write.write`, under the writers' advisory lock). Raises
    Terminal49Error, LoadFailed, WarehouseLocked, WarehouseUnusable, WriterBusy."""
    warehouse = resolve_warehouse(path)
    if warehouse.is_postgres:  # the role may write what this writer stages, before any request
        from pipelines.pg.connection import check_writable

        check_writable(warehouse, (DATASET, incoming_dataset(WRITER)))
    summary = EventsSummary()
    # the selection's instant: a milestone change published while this step fetches (it holds
    # no lock until it publishes) is after it, so the next run still asks for that container
    selected_at = dt.datetime.now(dt.UTC)
    needing = containers_needing_events(warehouse)
    ids = needing[:max_containers]
    summary.containers = len(ids)
    summary.deferred = len(needing) - len(ids)
    resources: list[dict[str, Any]] = []
    fetched_at = dt.datetime.now(dt.UTC)
    for cid in ids:
        summary.requests += 1
        try:
            doc = client.get_json(f"{settings.CONTAINERS_PATH}/{cid}/transport_events")
        except ApiError as exc:
            if exc.status == 404:
                summary.missing += 1
                continue
            raise
        finally:
            if on_request is not None:
                on_request(summary.requests, len(ids))
        resources += [r for r in doc.get("data") or [] if isinstance(r, dict)]
    if not ids:
        return summary
    summary.events = len(resources)
    # an empty batch is still written: it records the fetch, where the next one starts;
    # the writer lock is taken for the publish only, by write()
    source = _events_source(events_table(resources, fetched_at))
    what = "transport events fetch"
    if warehouse.is_postgres:
        from pipelines.pg.write import write as write_postgres

        write_postgres(
            WRITER,
            source,
            warehouse,
            finish=lambda cur: _record_selection(cur, selected_at, "%s"),
            what=what,
        )
    else:
        assert warehouse.path is not None
        write(
            WRITER,
            source,
            warehouse.path,
            finish=lambda con: _record_selection(con, selected_at, "?"),
            what=what,
        )
    return summary


def _record_selection(cur: Any, selected_at: dt.datetime, mark: str) -> None:
    """Record in the events loads being published when their containers were selected: the
    next run asks for the changes published since then (:func:`containers_needing_events`).
    ``cur``: the publishing transaction's DuckDB connection or psycopg2 cursor (``mark``: its
    placeholder)."""
    cur.execute(
        f"UPDATE {q(DATASET)}.{LOADS_TABLE} SET scan_started_at = {mark} "
        f"WHERE writer = {mark} AND scan_started_at IS NULL",
        [selected_at, WRITER],
    )
