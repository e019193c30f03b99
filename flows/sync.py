"""The two flows: ``sync`` (load, risk, publish; ``full=True`` is the nightly reconciliation)
and ``risk`` (risk only, from what the warehouse holds).

Both flows:
- take the warehouse as a parameter (``duckdb_path``: a DuckDB path or a ``postgresql://``
  URL), defaulting (``None``) to the project's configuration on the machine that runs them (env
  ``FREETIME_WAREHOUSE``, then ``FREETIME_DUCKDB``, then ``data/freetime.duckdb``), every
  step on either, so a deployment run by a worker works on both;
  ``sync`` also takes the API settings (base URL, rate limit), resolved the same way. The API
  key is never a parameter: the load resolves it itself;
- write the warehouse through its writer lock, held only while each step publishes (see
  docs/scheduling.md, "One writer at a time"): an hourly sync runs while the nightly full scan
  scans, and both publish in turn;
- fail (the flow run ends Failed, a direct call raises) with the pipeline's user-safe message
  when the API or the warehouse cannot be reached;
- return a :class:`RunReport` (in process; results are not persisted).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prefect import flow, get_run_logger

from flows.alerts import send_alerts
from flows.artifacts import Reconciliation
from flows.tasks import (
    LoadOutcome,
    apply_webhooks,
    audit_invoices,
    check_warehouse,
    elapsed,
    fetch_events,
    load_account,
    publish_artifacts,
    reconcile_counts,
    refresh_risk,
    write_html_report,
)
from pipelines.analytics import RiskSummary
from pipelines.config import resolve_warehouse
from pipelines.history.transport_events import REQUEST_BUDGET, EventsSummary


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
    #: seconds: each step in the order it ran
    timings: dict[str, float] = field(default_factory=dict)
    body_started: float = 0.0  # time.perf_counter() when the flow body began (same process)
    #: API requests of each step that makes any (load, webhooks, events)
    requests: dict[str, int] = field(default_factory=dict)
    events: EventsSummary | None = None

    def requests_line(self) -> str:
        """``API requests: load 12, webhooks 0, events 40 (budget 40; 58 left for the next
        runs)``."""
        parts = []
        for step, n in self.requests.items():
            part = f"{step} {n}"
            if step == "events" and self.events is not None:
                part += f" (budget {REQUEST_BUDGET}"
                if self.events.deferred:
                    part += f"; {self.events.deferred} containers left for the next runs"
                part += ")"
            parts.append(part)
        return f"API requests: {', '.join(parts)}; total {sum(self.requests.values())}"


@contextlib.contextmanager
def _timed(timings: dict[str, float], step: str) -> Iterator[None]:
    started = time.perf_counter()
    yield
    timings[step] = elapsed(started)


@flow(name="sync", persist_result=False)
def sync(
    duckdb_path: str | None = None,
    base_url: str | None = None,
    rate_limit_per_minute: float | None = None,
    as_of: dt.datetime | None = None,
    tariffs_path: str | None = None,
    concurrency: int = 4,
    full: bool = False,
) -> RunReport:
    """Load the account, recompute demurrage risk as of ``as_of`` (default now), publish the
    at-risk table and the summary (with what changed since the last run).

    ``full=False``: the load decides (incremental once the warehouse holds a completed load).
    ``full=True``, the nightly reconciliation: a full scan that also removes what the API no
    longer lists, pulls the webhook notifications the receiver missed, and adds to the summary
    the warehouse's row counts against the API's totals.
    """
    name = "sync (full)" if full else "sync"
    body_started = time.perf_counter()
    timings: dict[str, float] = {}
    with _timed(timings, "load"):
        path = check_warehouse(duckdb_path)
        load = load_account(path, base_url, rate_limit_per_minute, concurrency, full=full)
    with _timed(timings, "webhooks"):
        # Webhook notifications received since (and during) the scan land on top of it.
        hooks = apply_webhooks(path, base_url, rate_limit_per_minute, reconcile=full)
    with _timed(timings, "risk"):
        risk = refresh_risk(path, as_of, tariffs_path)
    with _timed(timings, "invoices"):  # after risk: the audit reads the engine it published
        audit_invoices(path, as_of)
    with _timed(timings, "events"):  # after risk: at-risk containers get their events
        events = fetch_events(path, base_url, rate_limit_per_minute)
    requests = {
        "load": load.summary.requests,
        "webhooks": hooks.requests,
        "events": events.requests,
    }
    with _timed(timings, "report"):
        write_html_report(path)
    with _timed(timings, "publish"):
        reconciliation = reconcile_counts(path, load) if full else None
        published = publish_artifacts(
            name, path, risk, load, reconciliation, timings=timings, requests=requests
        )
    with _timed(timings, "alerts"):  # last: a slow channel never delays the load or risk
        send_alerts(path)
    get_run_logger().info(
        "%s done: %d at risk; %s",
        name,
        len(published.at_risk),
        ", ".join(f"{step} {s:.1f}s" for step, s in timings.items()),
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
        requests=requests,
        events=events,
    )


@flow(name="risk", persist_result=False)
def risk(
    duckdb_path: str | None = None,
    as_of: dt.datetime | None = None,
    tariffs_path: str | None = None,
) -> RunReport:
    """Recompute risk from what is in the warehouse as of ``as_of`` (default now) and publish
    it; no API call."""
    body_started = time.perf_counter()
    timings: dict[str, float] = {}
    path = resolve_warehouse(duckdb_path).display  # a URL: its password masked
    with _timed(timings, "risk"):
        summary = refresh_risk(path, as_of, tariffs_path)
    with _timed(timings, "publish"):
        published = publish_artifacts("risk", path, summary)
    with _timed(timings, "alerts"):
        send_alerts(path)
    return RunReport(
        flow="risk",
        duckdb_path=path,
        risk=summary,
        at_risk=published.at_risk,
        changes=published.changes,
        timings=timings,
        body_started=body_started,
    )
