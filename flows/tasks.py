"""Prefect tasks around the pipeline calls: load, webhooks, events, risk, publish.

Each task wraps one call of :mod:`pipelines` and adds only orchestration: retries with backoff
for failures that can pass (an unreachable API, a locked warehouse), none for those that cannot
(a refused key, a missing key, a bad request), and the artifacts. The API key is resolved inside
:func:`load_account` from the environment or dlt secrets: it is never a parameter, a log line,
an artifact or a task result. Results are not persisted (they hold business data, and a cached
load would be wrong), so every task is ``NO_CACHE`` and ``persist_result=False``.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from flows.artifacts import (
    AT_RISK_KEY,
    REPORT_NAME,
    SUMMARY_KEY,
    Reconciliation,
    SummaryInput,
    at_risk_rows,
    summary_markdown,
)
from pipelines import progress
from pipelines.analytics import (
    RiskSummary,
    TariffError,
    at_risk,
    publish_risk,
)
from pipelines.analytics.changes import published_changes as read_changes
from pipelines.config import (
    DATASET,
    ApiSettings,
    ConfigError,
    resolve_duckdb_path,
    resolve_warehouse,
)
from pipelines.history.transport_events import EventsSummary, fetch_transport_events
from pipelines.invoices.audit import AuditSummary, run_audit
from pipelines.invoices.store import pending_audit
from pipelines.load import LoadFailed, LoadSummary, key_budget, run_load
from pipelines.report import write_report
from pipelines.terminal49.client import ApiError, ApiStalled, AuthError, Terminal49Client
from pipelines.terminal49.scan import ScanStats
from pipelines.warehouse import (
    WarehouseError,
    WarehouseLocked,
    check_usable,
    reading,
    row_counts,
)
from pipelines.webhooks.apply import ApplySummary, apply_inbox
from pipelines.webhooks.inbox import default_inbox_path

# How long a run waits for a reader (a notebook, `duckdb` CLI) to let go of the file.
LOCK_RETRY_SECONDS = 30.0
# The load's own retries: the client already retries each request 8 times, so these are for a
# whole scan that failed (API down for minutes, a reader holding the file through the write).
LOAD_RETRY_DELAYS = [30.0, 120.0]
# Lists that the full sync checks against the API's meta.total, and their tables.
RECONCILED_TABLES = {"containers": "containers", "shipments": "shipments"}


# -- retry policy ----------------------------------------------------------------------------------


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the same call later can succeed.

    Not transient: a missing or refused key, a request the API rejects (4xx), an API that
    accepted connections and never answered, bad tariffs or configuration. Transient:
    everything else a load raises (network, 5xx, 429 storms, a reconciliation that could not
    converge) and a locked warehouse.
    """
    if isinstance(exc, WarehouseLocked):
        return True
    if isinstance(exc, LoadFailed):
        cause = exc.__cause__
        # a refused key or request, or an API that stopped answering for the whole stall bound
        # (a retry would wait as long again): not worth another try
        hopeless = isinstance(cause, AuthError | ApiError | ApiStalled)
        return not (hopeless or "refused the key" in str(exc))
    return False


def _retry_if_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect ``retry_condition_fn``: the failed state's data is the raised exception.

    A retry is announced as a warning (what failed, when the next try starts): between tries a
    run is otherwise silent for minutes.
    """
    exc = getattr(state, "data", None)
    retry = isinstance(exc, BaseException) and is_transient(exc)
    tries = int(getattr(task_run, "run_count", 0) or 0)
    delays = getattr(task, "retry_delay_seconds", None)
    delays = delays if isinstance(delays, list) else []
    if retry and 0 < tries <= len(delays):
        logging.getLogger("freetime.flows").warning(
            "%s failed (%s); trying again in about %.0f s (retry %d of %d)",
            task.name,
            exc,
            delays[tries - 1],
            tries,
            len(delays),
        )
    return retry


# -- load ------------------------------------------------------------------------------------------


@dataclass
class LoadOutcome:
    """What the load task returns: the pipeline's summary and each list's scan totals."""

    summary: LoadSummary
    api_totals: dict[str, int] = field(default_factory=dict)  # kind -> meta.total
    distinct_seen: dict[str, int] = field(default_factory=dict)  # kind -> distinct ids

    def line(self) -> str:
        s = self.summary
        removed = ", ".join(f"{t} {n}" for t, n in s.removed.items())
        return (
            f"{s.window_line()}; {s.table_counts_line()} rows written"
            + (f", removed (no longer listed): {removed}" if removed else "")
            + f" in {s.seconds:.1f}s; {s.requests} requests "
            f"({s.pages} pages, {s.reconcile_pages} to reconcile), {s.retries} retries, "
            f"{s.rate_limited} rate-limited, {s.budget_wait_seconds:.1f}s waited for the budget"
        )


@task(name="check-warehouse", cache_policy=NO_CACHE, persist_result=False)
def check_warehouse(duckdb_path: str | None) -> str:
    """Before any API call: the warehouse chosen (``duckdb_path``: a DuckDB path or a
    ``postgresql://`` URL, default ``FREETIME_WAREHOUSE``) can be written; returns the form the
    other tasks take (a URL with its password masked, completed again from
    ``FREETIME_WAREHOUSE`` where needed).

    DuckDB: the path can be a warehouse (a folder or another kind of file is one line), and no
    process keeps it open for writing (a notebook's write connection) for longer than
    ``LOCK_RETRY_SECONDS``: then ``WarehouseLocked``, reported plainly. PostgreSQL: the server
    answers and the role may write the schemas of the load, else ``WarehouseUnusable``. A look
    only: one writer at a time is the writer lock's job, not this task's."""
    warehouse = resolve_warehouse(duckdb_path)
    if warehouse.is_postgres:
        from pipelines.config import incoming_dataset
        from pipelines.pg.connection import check_writable

        check_writable(warehouse, (DATASET, incoming_dataset("load")))
        return warehouse.display
    path = resolve_duckdb_path(duckdb_path)
    if path.exists():
        with reading(path, retry_seconds=LOCK_RETRY_SECONDS):
            pass
    check_usable(path)
    return str(path)


@task(
    name="load-account",
    retries=len(LOAD_RETRY_DELAYS),
    retry_delay_seconds=LOAD_RETRY_DELAYS,
    retry_jitter_factor=0.5,
    retry_condition_fn=_retry_if_transient,
    cache_policy=NO_CACHE,
    persist_result=False,
)
def load_account(
    duckdb_path: str,
    base_url: str | None = None,
    rate_limit_per_minute: float | None = None,
    concurrency: int = 4,
    full: bool | None = None,
) -> LoadOutcome:
    """Scan the account into the warehouse (:func:`pipelines.load.run_load`; ``full``: a full
    scan, None: incremental once the warehouse holds a completed load).

    The key comes from ``TERMINAL49_API_KEY`` or dlt secrets, resolved here. Raises
    ``ConfigError`` (no key), ``LoadFailed`` (the previous load stays) or ``WarehouseLocked``.
    """
    logger = get_run_logger()
    api = ApiSettings.resolve(base_url=base_url, rate_limit_per_minute=rate_limit_per_minute)
    logger.info("loading %s from %s into %s", "the account", api.base_url, duckdb_path)
    scans: dict[str, ScanStats] = {}

    def track(stats: ScanStats) -> None:
        scans[stats.kind] = stats
        progress.report(f"load {stats.kind}", stats.distinct, stats.total or None, "records")

    try:
        summary = run_load(duckdb_path, api, full=full, concurrency=concurrency, on_page=track)
    finally:
        for kind in scans:
            progress.finish(f"load {kind}")
    outcome = LoadOutcome(
        summary=summary,
        api_totals={k: s.total for k, s in scans.items()},
        distinct_seen={k: s.distinct for k, s in scans.items()},
    )
    logger.info("loaded: %s", outcome.line())
    return outcome


@task(
    name="apply-webhooks",
    retries=1,
    retry_delay_seconds=30,
    retry_condition_fn=_retry_if_transient,
    cache_policy=NO_CACHE,
    persist_result=False,
)
def apply_webhooks(
    duckdb_path: str,
    base_url: str | None = None,
    rate_limit_per_minute: float | None = None,
    reconcile: bool = False,
) -> WebhooksOutcome:
    """Apply the webhook inbox (``freetime webhooks serve`` fills it) after the scan.

    Nothing to do (no summary, no request) when no receiver ever wrote an inbox beside the
    warehouse. With ``reconcile`` (the nightly flow) notifications the receiver missed are
    pulled first.
    """
    warehouse = resolve_warehouse(duckdb_path)
    inbox = default_inbox_path(warehouse)
    if not inbox.exists():
        return WebhooksOutcome()
    api = ApiSettings.resolve(base_url=base_url, rate_limit_per_minute=rate_limit_per_minute)
    budget = key_budget(warehouse)  # the key's budget, shared with the other writers
    client = Terminal49Client.for_api(api, budget=budget) if api.api_key else None
    try:
        summary = apply_inbox(warehouse, inbox, client, reconcile=reconcile and client is not None)
    finally:
        if client is not None:
            client.close()
    get_run_logger().info("webhooks: %s", summary.line())
    return WebhooksOutcome(summary, client.stats.requests if client is not None else 0)


@dataclass
class WebhooksOutcome:
    """What the webhooks task did (``summary`` None: no inbox) and its API requests."""

    summary: ApplySummary | None = None
    requests: int = 0


@task(name="fetch-transport-events", cache_policy=NO_CACHE, persist_result=False)
def fetch_events(
    duckdb_path: str, base_url: str | None = None, rate_limit_per_minute: float | None = None
) -> EventsSummary:
    """The transport events of the containers whose milestones changed, or at risk
    (:func:`pipelines.history.transport_events.fetch_transport_events`: at most
    ``REQUEST_BUDGET`` requests a run, within the rate limit), with progress as it waits."""
    api = ApiSettings.resolve(base_url=base_url, rate_limit_per_minute=rate_limit_per_minute)

    def step(done: int, total: int) -> None:
        progress.report("events", done, total, "requests")

    warehouse = resolve_warehouse(duckdb_path)
    budget = key_budget(warehouse)  # the key's budget, shared with the other writers
    try:
        with Terminal49Client.for_api(api, budget=budget) as client:
            summary = fetch_transport_events(warehouse, client, on_request=step)
    finally:
        progress.finish("events")
    get_run_logger().info("transport events: %s", summary.line())
    return summary


# -- risk ------------------------------------------------------------------------------------------


@task(
    name="refresh-risk",
    retries=1,
    retry_delay_seconds=10,
    retry_condition_fn=_retry_if_transient,
    cache_policy=NO_CACHE,
    persist_result=False,
)
def refresh_risk(
    duckdb_path: str | None, as_of: dt.datetime | None = None, tariffs_path: str | None = None
) -> RiskSummary:
    """Recompute and publish ``analytics.demurrage_risk`` and its views as of ``as_of``, under
    the warehouse's writer lock (it writes the warehouse like any writer)."""
    summary = publish_risk(duckdb_path, as_of=as_of, tariffs_path=tariffs_path)
    get_run_logger().info(
        "risk as of %s: %s",
        summary.as_of.isoformat(),
        ", ".join(f"{k} {v}" for k, v in summary.levels.items()),
    )
    return summary


# -- publish ---------------------------------------------------------------------------------------


@task(name="write-report", cache_policy=NO_CACHE, persist_result=False)
def write_html_report(duckdb_path: str) -> str:
    """The self-contained HTML report beside the warehouse (the markdown artifact links it)."""
    warehouse = resolve_warehouse(duckdb_path)
    folder = warehouse.path.parent if warehouse.path else warehouse.working_folder()
    return str(write_report(warehouse.path or duckdb_path, folder / REPORT_NAME))


@dataclass
class Published:
    """What the publish task made: the at-risk rows (also printed by ``freetime run``)."""

    at_risk: list[dict[str, Any]]
    changes: dict[str, int] | None
    reconciliation: list[Reconciliation]
    markdown: str
    table_artifact_id: str
    markdown_artifact_id: str


@task(name="reconcile-counts", cache_policy=NO_CACHE, persist_result=False)
def reconcile_counts(duckdb_path: str, load: LoadOutcome) -> list[Reconciliation]:
    """The warehouse's row counts of the reconciled lists against the API's totals (after a
    full scan, which removed what the API no longer lists: the counts should match)."""
    warehouse = resolve_warehouse(duckdb_path)
    tables = list(RECONCILED_TABLES.values())
    if warehouse.is_postgres:
        from pipelines.pg.tables import row_counts as pg_row_counts

        counts = pg_row_counts(warehouse, DATASET, tables)
    else:
        counts = row_counts(duckdb_path, DATASET, tables, retry_seconds=LOCK_RETRY_SECONDS)
    return [
        Reconciliation(
            table=f"{DATASET}.{table}",
            api_total=load.api_totals.get(kind, 0),
            distinct_seen=load.distinct_seen.get(kind, 0),
            warehouse_rows=counts[table],
        )
        for kind, table in RECONCILED_TABLES.items()
    ]


@task(name="publish-artifacts", cache_policy=NO_CACHE, persist_result=False)
def publish_artifacts(
    flow_name: str,
    duckdb_path: str | None,
    risk: RiskSummary,
    load: LoadOutcome | None = None,
    reconciliation: list[Reconciliation] | None = None,
    timings: dict[str, float] | None = None,
    requests: dict[str, int] | None = None,
) -> Published:
    """Table artifact of the at-risk containers (most urgent first) and the summary markdown:
    counts per level, exposure by terminal, changes since the previous risk run, the steps
    run so far with their seconds and API requests and, when given, the ``reconciliation``
    (warehouse row counts against the API's totals)."""
    warehouse = resolve_warehouse(duckdb_path)
    rows = at_risk_rows(at_risk(duckdb_path).to_dicts())
    # from the warehouse on both: the previous run's rows are published beside the new
    since = read_changes(warehouse, retry_seconds=LOCK_RETRY_SECONDS)
    changes, exposure = since.changes, since.exposure
    recon = list(reconciliation or [])
    markdown = summary_markdown(
        SummaryInput(
            flow=flow_name,
            as_of=risk.as_of,
            duckdb_path=warehouse.path or warehouse.display,
            levels=dict(risk.levels),
            rows=risk.rows,
            accrued_demurrage=risk.accrued_demurrage,
            projected_demurrage=risk.projected_demurrage,
            projected_detention=risk.projected_detention,
            uncosted=risk.uncosted,
            at_risk=rows,
            exposure_by_terminal=exposure.to_dicts() if exposure is not None else [],
            changes=changes,
            load_line=load.line() if load else None,
            reconciliation=recon,
            timings=dict(timings or {}),
            requests=dict(requests or {}),
        )
    )
    table_id = create_table_artifact(
        rows,
        key=AT_RISK_KEY,
        description=f"Containers at risk of demurrage, most urgent first ({flow_name}, as of "
        f"{risk.as_of.isoformat()})",
    )
    md_id = create_markdown_artifact(
        markdown, key=SUMMARY_KEY, description=f"Demurrage risk summary ({flow_name})"
    )
    return Published(
        at_risk=rows,
        changes=dict(changes["counts"]) if changes else None,
        reconciliation=recon,
        markdown=markdown,
        table_artifact_id=str(table_id),
        markdown_artifact_id=str(md_id),
    )


# Exceptions whose message is written for the user: the CLI prints them as one line and the
# console log filter drops Prefect's tracebacks for them.
USER_FACING: tuple[type[BaseException], ...] = (
    ConfigError,
    LoadFailed,
    WarehouseError,  # locked, missing, or not a DuckDB file
    TariffError,
)


def elapsed(started: float) -> float:
    return round(time.perf_counter() - started, 3)


# -- invoices ----------------------------------------------------------------------------------
@task(name="audit-invoices", cache_policy=NO_CACHE, persist_result=False)
def audit_invoices(duckdb_path: str, as_of: dt.datetime | None = None) -> AuditSummary | None:
    """Audit the imported invoices (:func:`pipelines.invoices.audit.run_audit`) of the warehouse
    (a DuckDB path or a PostgreSQL URL) when some wait for an audit; None when none does. Never
    fails the run: the audit is a side product, a failure is a warning and the invoices stay
    pending for the next run."""
    try:
        warehouse = resolve_warehouse(duckdb_path)
        if not pending_audit(warehouse):
            return None
        summary = run_audit(warehouse, as_of)
    except Exception as exc:  # noqa: BLE001 - the load and risk must not fail for it
        get_run_logger().warning("invoice audit skipped: %s", exc)
        return None
    get_run_logger().info(
        "invoices: %d lines audited, %d with findings", summary.lines, summary.with_findings
    )
    return summary
