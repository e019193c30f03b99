"""Alerts in the flows: a send step after each risk publish, and the morning digest flow.

Both call :mod:`pipelines.alerts`, as ``freetime alerts send|digest`` do, on a DuckDB or a
PostgreSQL warehouse. Neither takes the writer lock (they only read the warehouse; what they
write goes to the delivery state: the alert state file, or its tables in PostgreSQL, where
senders on several machines send each alert once), and neither fails its flow because a
channel is down or a destination is misconfigured: that is logged, one line per destination,
and the alerts wait for the next pass. The send step is bounded (:data:`SEND_BUDGET_SECONDS`)
so a slow channel never holds up the next sync.
"""

from __future__ import annotations

import datetime as dt

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from pipelines.alerts import SendSummary, send_digests, send_pending
from pipelines.config import ConfigError, resolve_warehouse
from pipelines.warehouse import WarehouseError

#: No new message is started after this many seconds; the rest goes on the next pass.
SEND_BUDGET_SECONDS = 120.0


@task(name="send-alerts", cache_policy=NO_CACHE, persist_result=False)
def send_alerts(duckdb_path: str, budget_seconds: float = SEND_BUDGET_SECONDS) -> SendSummary:
    """Deliver the outbox's pending alerts (those the risk publish just raised included)."""
    logger = get_run_logger()
    try:
        summary = send_pending(duckdb_path, budget_seconds=budget_seconds)
    except (ConfigError, WarehouseError) as exc:
        logger.warning("alerts not sent: %s", exc)
        return SendSummary()
    for r in summary.results:
        (logger.warning if r.error else logger.info)("alerts: %s", r.line())
    return summary


@flow(name="digest", persist_result=False)
def digest(duckdb_path: str | None = None, as_of: dt.datetime | None = None) -> list[str]:
    """Send the morning digest of every destination whose local digest time has come today
    (each destination once per local day); return one line per destination served."""
    logger = get_run_logger()
    try:
        # a URL parameter has its password masked: completed from FREETIME_WAREHOUSE here
        results = send_digests(resolve_warehouse(duckdb_path), now=as_of)
    except (ConfigError, WarehouseError) as exc:
        logger.warning("digest not sent: %s", exc)
        return [str(exc)]
    for r in results:
        (logger.warning if r.error else logger.info)("digest: %s", r.line())
    return [r.line() for r in results]
