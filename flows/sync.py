"""The three flows: ``sync`` (load, risk, publish), ``risk`` (risk only), ``reconcile``.

Every flow:
- takes the warehouse path and the API settings (base URL, rate limit) as parameters, each
  defaulting (``None``) to the project's configuration as resolved on the machine that runs it
  (env ``FREETIME_DUCKDB`` / ``TERMINAL49_BASE_URL`` / ``TERMINAL49_RATE_LIMIT``, dlt config,
  built-in defaults). The API key is never a parameter: the load resolves it itself;
- holds the warehouse's single Prefect concurrency slot (:data:`flows.tasks.WAREHOUSE_LIMIT`)
  for its whole body, so loads and risk publishes never overlap, whatever started them;
- fails (the flow run ends Failed, a direct call raises) with the pipeline's user-safe message
  when the API or the warehouse cannot be reached;
- returns a :class:`RunReport` (in process; results are not persisted).
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

from prefect import flow, get_run_logger

from flows.artifacts import Reconciliation
from flows.tasks import (
    LoadOutcome,
    apply_webhooks,
    check_warehouse,
    compute_risk,
    elapsed,
    load_account,
    publish_artifacts,
    warehouse_slot,
    write_html_report,
)
from pipelines.analytics import RiskSummary
from pipelines.config import resolve_duckdb_path


@dataclass
class RunReport:
    """What a flow did, for the command line: results, at-risk rows, timing split (seconds)."""

    flow: str
    duckdb_path: str
    risk: RiskSummary
    at_risk: list[dict[str, Any]]
    changes: dict[str, int] | None
    load: LoadOutcome | None = None
    reconciliation: list[Reconciliation] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    body_started: float = 0.0  # time.perf_counter() when the flow body began (same process)


def _load_then_risk(
    name: str,
    duckdb_path: str | None,
    base_url: str | None,
    rate_limit_per_minute: float | None,
    as_of: dt.datetime | None,
    tariffs_path: str | None,
    concurrency: int,
    reconcile: bool,
) -> RunReport:
    body_started = time.perf_counter()
    timings: dict[str, float] = {}
    with warehouse_slot(duckdb_path):
        timings["slot"] = elapsed(body_started)
        t = time.perf_counter()
        path = check_warehouse(duckdb_path)
        load = load_account(
            path, base_url, rate_limit_per_minute, concurrency, full=True if reconcile else None
        )
        # Webhook notifications received since (and during) the scan land on top of it.
        apply_webhooks(path, base_url, rate_limit_per_minute, reconcile)
        timings["load"] = elapsed(t)
        t = time.perf_counter()
        risk = compute_risk(path, as_of, tariffs_path)
        timings["risk"] = elapsed(t)
        t = time.perf_counter()
        write_html_report(path)
        published = publish_artifacts(name, path, risk, load, reconcile)
        timings["publish"] = elapsed(t)
    get_run_logger().info(
        "%s done: %d at risk; load %.1fs, risk %.1fs, publish %.1fs",
        name, len(published.at_risk), timings["load"], timings["risk"], timings["publish"],
    )
    return RunReport(
        flow=name,
        duckdb_path=path,
        risk=risk,
        at_risk=published.at_risk,
        changes=published.changes,
        load=load,
        reconciliation=published.reconciliation,
        timings=timings,
        body_started=body_started,
    )


@flow(name="sync", persist_result=False)
def sync(
    duckdb_path: str | None = None,
    base_url: str | None = None,
    rate_limit_per_minute: float | None = None,
    as_of: dt.datetime | None = None,
    tariffs_path: str | None = None,
    concurrency: int = 4,
) -> RunReport:
    """Load what changed since the last load (the first load of a warehouse is full),
    recompute demurrage risk as of ``as_of`` (default now), publish the at-risk table and the
    summary (with what changed)."""
    return _load_then_risk(
        "sync", duckdb_path, base_url, rate_limit_per_minute, as_of, tariffs_path, concurrency,
        reconcile=False,
    )


@flow(name="reconcile", persist_result=False)
def reconcile(
    duckdb_path: str | None = None,
    base_url: str | None = None,
    rate_limit_per_minute: float | None = None,
    as_of: dt.datetime | None = None,
    tariffs_path: str | None = None,
    concurrency: int = 4,
) -> RunReport:
    """The nightly full scan with reconciliation (it also removes what the API no longer
    lists), then risk; the summary also compares the warehouse's row counts with the API's
    totals."""
    return _load_then_risk(
        "reconcile", duckdb_path, base_url, rate_limit_per_minute, as_of, tariffs_path,
        concurrency, reconcile=True,
    )


@flow(name="risk", persist_result=False)
def risk(
    duckdb_path: str | None = None,
    base_url: str | None = None,
    rate_limit_per_minute: float | None = None,
    as_of: dt.datetime | None = None,
    tariffs_path: str | None = None,
) -> RunReport:
    """Recompute risk from what is in the warehouse as of ``as_of`` (default now) and publish
    it; no API call (``base_url`` and ``rate_limit_per_minute`` are accepted so every flow
    takes the same settings, and ignored)."""
    del base_url, rate_limit_per_minute  # same parameters as the other flows; no API here
    body_started = time.perf_counter()
    timings: dict[str, float] = {}
    path = str(resolve_duckdb_path(duckdb_path))
    with warehouse_slot(path):
        timings["slot"] = elapsed(body_started)
        t = time.perf_counter()
        summary = compute_risk(path, as_of, tariffs_path)
        timings["risk"] = elapsed(t)
        t = time.perf_counter()
        published = publish_artifacts("risk", path, summary)
        timings["publish"] = elapsed(t)
    return RunReport(
        flow="risk",
        duckdb_path=path,
        risk=summary,
        at_risk=published.at_risk,
        changes=published.changes,
        timings=timings,
        body_started=body_started,
    )
