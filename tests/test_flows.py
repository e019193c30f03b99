"""The flows: pure pieces without Prefect, then the flows under the session's Prefect harness
against the sandbox (one sandbox for the module; its clock starts at a fixed instant)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import duckdb
import pytest

from flows import tasks
from flows.artifacts import (
    AT_RISK_KEY,
    REPORT_MARKER,
    SUMMARY_KEY,
    Reconciliation,
    SummaryInput,
    at_risk_rows,
    summary_markdown,
)
from pipelines.config import ApiSettings, ConfigError
from pipelines.load import LoadFailed, run_load
from pipelines.terminal49.client import AuthError
from pipelines.warehouse import WarehouseLocked

CLOCK = "2026-11-20T12:00:00Z"

# -- pure pieces ----------------------------------------------------------------------------------


def _failed(cause: BaseException, message: str) -> LoadFailed:
    try:
        raise LoadFailed(message) from cause
    except LoadFailed as exc:
        return exc


@pytest.mark.fast
def test_retry_policy_retries_what_can_pass_and_nothing_else() -> None:
    refused = _failed(AuthError("the API refused the key (401)"), "load failed: refused the key")
    assert not tasks.is_transient(refused)
    assert not tasks.is_transient(ConfigError("no API key"))
    assert tasks.is_transient(_failed(OSError("connection refused"), "load failed: ConnectError"))
    assert tasks.is_transient(WarehouseLocked("locked"))

    class _State:
        data = refused

    assert tasks._retry_if_transient(None, None, _State()) is False


def _summary(tmp_path: Path, **overrides: Any) -> SummaryInput:
    base: dict[str, Any] = dict(
        flow="sync",
        as_of=dt.datetime(2026, 11, 20, 12, tzinfo=dt.UTC),
        duckdb_path=tmp_path / "w.duckdb",
        levels={"overdue": 2, "due_today": 1, "imminent": 0, "ok": 5},
        rows=8,
        accrued_demurrage=100.0,
        projected_demurrage=250.0,
        projected_detention=0.0,
        uncosted=1,
        at_risk=at_risk_rows(
            [
                {
                    "container_number": "ABCU1234567",
                    "risk_level": "overdue",
                    "currency": "USD",
                    "lfd_date": dt.date(2026, 11, 18),
                    "risk_reason": "LFD passed | 2 days ago",
                    "projected_demurrage": 250.0,
                    "blocking_holds": ["customs"],
                }
            ]
        ),
        exposure_by_terminal=[
            {
                "pod_terminal_name": "YTI",
                "containers": 3,
                "overdue": 2,
                "projected_demurrage": 250.0,
            }
        ],
        changes=None,
    )
    base.update(overrides)
    return SummaryInput(**base)


@pytest.mark.fast
def test_at_risk_rows_keep_the_given_order_and_are_json_friendly() -> None:
    rows = at_risk_rows(
        [
            {
                "container_number": "B",
                "risk_level": "overdue",
                "lfd_date": dt.date(2026, 1, 2),
                "blocking_holds": ["customs", "freight"],
                "projected_demurrage": float("nan"),
            },
            {"container_number": "A", "risk_level": "imminent", "projected_demurrage": 12.345},
        ]
    )
    assert [r["container"] for r in rows] == ["B", "A"] and [r["rank"] for r in rows] == [1, 2]
    assert rows[0]["lfd"] == "2026-01-02" and rows[0]["blocking_holds"] == "customs, freight"
    assert rows[1]["projected_demurrage"] == 12.35
    json.dumps(rows)


@pytest.mark.fast
def test_summary_markdown_sections_and_report_link(tmp_path: Path) -> None:
    md = summary_markdown(_summary(tmp_path))
    for part in (
        "Containers per risk level",
        "| overdue | 2 |",
        "Exposure by terminal",
        "YTI",
        "Since the last run",
        "First run",
        REPORT_MARKER,
        "No HTML report yet",
    ):
        assert part in md
    assert "LFD passed" not in md or "\\|" in md  # table cells are escaped
    assert "Reconciliation" not in md
    (tmp_path / "report.html").write_text("<html></html>")
    changes = {
        "newly_overdue": [
            {
                "container_number": "ABCU1234567",
                "lfd_date": "2026-11-18",
                "days_to_lfd": -2,
                "risk_reason": "x",
            }
        ],
        "newly_ready": [],
        "lfd_moved": [],
        "counts": {"newly_overdue": 1, "newly_ready": 0, "lfd_moved": 0},
    }
    md = summary_markdown(
        _summary(
            tmp_path,
            changes=changes,
            flow="reconcile",
            reconciliation=[
                Reconciliation("terminal49.containers", 500, 500, 500),
                Reconciliation("terminal49.shipments", 510, 509, 509),
            ],
        )
    )
    assert "newly overdue: **1**" in md and "### Newly overdue" in md
    assert "Open the HTML report" in md and (tmp_path / "report.html").as_uri() in md
    assert "| terminal49.containers | 500 | 500 | 500 | yes |" in md
    assert "| terminal49.shipments | 510 | 509 | 509 | **no** |" in md


# -- flows under the Prefect harness ------------------------------------------------------------


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Any]:
    # A process: the flows load it from this process, beside Prefect's own threads; on a
    # thread it cost no less.
    from sandbox.process import SandboxProcess

    with SandboxProcess(containers=300, seed=49, clock=CLOCK) as sb:
        yield sb


@pytest.fixture
def api_env(monkeypatch: pytest.MonkeyPatch, sandbox: Any) -> Any:
    """The sandbox's key for the flows. The sandbox sets no rate limit and the pacing is tested
    with the loader (tests/test_load_sandbox.py): unpaced here, a test's second and third sync
    do not sit out the 100-a-minute window the first one filled."""
    monkeypatch.setenv("TERMINAL49_API_KEY", sandbox.api_key)
    monkeypatch.setenv("TERMINAL49_RATE_LIMIT", "100000")
    monkeypatch.delenv("TERMINAL49_BASE_URL", raising=False)
    return sandbox


def _instant(clock: str) -> dt.datetime:
    return dt.datetime.fromisoformat(clock.replace("Z", "+00:00"))


def _read_artifacts(artifact_filter: Any) -> list[Any]:
    """Artifacts through the Prefect client, newest first. Every filter argument is passed:
    with fastapi<0.154, Prefect 3.8's sync client sends None for omitted ones and the server
    answers 422."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, TaskRunFilter
    from prefect.client.schemas.sorting import ArtifactSort

    with get_client(sync_client=True) as client:
        return client.read_artifacts(
            artifact_filter=artifact_filter,
            flow_run_filter=FlowRunFilter(),
            task_run_filter=TaskRunFilter(),
            sort=ArtifactSort.CREATED_DESC,
            limit=50,
            offset=0,
        )


def _artifacts(flow_run_id: UUID) -> dict[str, Any]:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    found = _read_artifacts(ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    return {a.key: a for a in found}


def test_sync_loads_risk_and_publishes_both_artifacts(
    prefect_harness: None, api_env: Any, tmp_path: Path
) -> None:
    from prefect.client.orchestration import get_client

    from flows.sync import sync

    warehouse = tmp_path / "w.duckdb"
    state = sync(
        duckdb_path=str(warehouse),
        base_url=api_env.base_url,
        as_of=_instant(api_env.clock()),
        return_state=True,
    )
    assert state.is_completed(), state.message
    report = state.result()
    assert report.load.summary.rows["containers"] == 300
    assert sum(report.risk.levels.values()) == 300

    with duckdb.connect(str(warehouse), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM terminal49.containers").fetchone() == (300,)
        assert con.execute("SELECT count(*) FROM analytics.demurrage_risk").fetchone() == (300,)
        n_at_risk = con.execute("SELECT count(*) FROM analytics.at_risk_containers").fetchone()
    assert n_at_risk == (len(report.at_risk),) and report.at_risk

    found = _artifacts(state.state_details.flow_run_id)
    assert set(found) >= {AT_RISK_KEY, SUMMARY_KEY}
    table = found[AT_RISK_KEY]
    assert table.type == "table"
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    assert [r["container"] for r in rows] == [r["container"] for r in report.at_risk]
    assert {"reason", "projected_demurrage", "risk_level"} <= set(rows[0])
    urgency = {"overdue": 0, "due_today": 1, "imminent": 2}
    assert [urgency[r["risk_level"]] for r in rows] == sorted(
        urgency[r["risk_level"]] for r in rows
    )
    md = found[SUMMARY_KEY]
    assert md.type == "markdown"
    for part in (
        "Containers per risk level",
        "Exposure by terminal",
        "Since the last run",
        REPORT_MARKER,
    ):
        assert part in md.data
    assert "sandbox-key" not in md.data and api_env.api_key not in str(rows)
    # The HTML report was written beside the warehouse and the summary links it.
    html = tmp_path / "report.html"
    assert html.exists() and html.stat().st_size > 10_000
    assert html.resolve().as_uri() in md.data

    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(state.state_details.flow_run_id)
    assert "api_key" not in json.dumps(flow_run.parameters)

    # A second sync after the sandbox clock moves reports what changed.
    api_env.advance(hours=72)
    report2 = sync(
        duckdb_path=str(warehouse), base_url=api_env.base_url, as_of=_instant(api_env.clock())
    )
    assert report2.changes is not None
    assert report2.changes["newly_overdue"] > 0
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    latest = _read_artifacts(ArtifactFilter(key=ArtifactFilterKey(any_=[SUMMARY_KEY])))[0]
    assert f"newly overdue: **{report2.changes['newly_overdue']}**" in latest.data
    assert "### Newly overdue" in latest.data


def test_risk_flow_recomputes_as_of_an_instant_without_the_api(
    prefect_harness: None, api_env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.sync import risk
    from pipelines.analytics import publish_risk

    warehouse = str(tmp_path / "w.duckdb")
    # the state a sync leaves (an account and its risk now), without the flow's other steps
    run_load(warehouse, ApiSettings.resolve(base_url=api_env.base_url))
    publish_risk(warehouse, as_of=_instant(api_env.clock()))
    monkeypatch.setenv("TERMINAL49_API_KEY", "not-used")
    later = _instant(api_env.clock()) + dt.timedelta(days=10)
    report = risk(duckdb_path=warehouse, as_of=later)
    assert report.load is None and report.risk.as_of == later
    assert report.changes is not None and report.changes["newly_overdue"] > 0


def test_full_sync_reconciles_removes_what_the_api_no_longer_lists_and_reports_counts(
    prefect_harness: None, api_env: Any, tmp_path: Path
) -> None:
    from flows.sync import sync

    warehouse = tmp_path / "w.duckdb"
    first = sync(duckdb_path=str(warehouse), base_url=api_env.base_url)
    assert first.reconciliation == [] and first.load.summary.kind == "full"
    # A container the API does not list (say, deleted from the account since the last load):
    # only a full sync notices it is gone.
    with duckdb.connect(str(warehouse)) as con:
        con.execute("CREATE TEMP TABLE ghost AS SELECT * FROM terminal49.containers LIMIT 1")
        con.execute("UPDATE ghost SET id = 'ghost-container-id'")
        con.execute("INSERT INTO terminal49.containers SELECT * FROM ghost")
    incremental = sync(duckdb_path=str(warehouse), base_url=api_env.base_url)
    assert incremental.load.summary.kind == "incremental"
    assert _has_ghost(warehouse)

    state = sync(
        duckdb_path=str(warehouse), base_url=api_env.base_url, full=True, return_state=True
    )
    report = state.result()
    assert report.flow == "sync (full)" and report.load.summary.kind == "full"
    assert not _has_ghost(warehouse) and report.load.summary.removed.get("containers") == 1
    assert {r.table for r in report.reconciliation} == {
        "terminal49.containers",
        "terminal49.shipments",
    }
    assert all(r.matches for r in report.reconciliation), report.reconciliation
    md = _artifacts(state.state_details.flow_run_id)[SUMMARY_KEY].data
    assert "Reconciliation: warehouse against the API" in md
    n = next(r.api_total for r in report.reconciliation if r.table.endswith("containers"))
    assert n >= 300  # the sandbox may have added containers since the clock advanced
    assert f"| terminal49.containers | {n} | {n} | {n} | yes |" in md


def _has_ghost(warehouse: Path) -> bool:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        found = con.execute(
            "SELECT count(*) FROM terminal49.containers WHERE id = 'ghost-container-id'"
        ).fetchone()
    return found == (1,)


@pytest.mark.fast
def test_flows_take_no_parameter_they_ignore() -> None:
    """``risk`` makes no API call, so it takes no API settings; ``sync`` uses all it takes."""
    import inspect

    from flows.sync import risk, sync

    assert set(inspect.signature(risk.fn).parameters) == {"duckdb_path", "as_of", "tariffs_path"}
    assert "full" in inspect.signature(sync.fn).parameters


def test_wrong_key_fails_the_flow_with_the_message_and_no_retry(
    prefect_harness: None, api_env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.sync import sync

    monkeypatch.setenv("TERMINAL49_API_KEY", "wrong-key")
    started = time.monotonic()
    state = sync(
        duckdb_path=str(tmp_path / "w.duckdb"), base_url=api_env.base_url, return_state=True
    )
    assert state.is_failed()
    assert "refused the key" in (state.message or "")
    with pytest.raises(LoadFailed, match="refused the key"):
        state.result()
    assert time.monotonic() - started < 25  # no 30 s retry delay: a refused key is final
    assert "wrong-key" not in (state.message or "")


def test_unreachable_api_fails_the_flow_after_retries(
    prefect_harness: None,
    api_env: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from flows.sync import sync
    from pipelines.load import run_load

    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v2"
    # Fast: one attempt per request and no delay between the task's attempts.
    if run_load.__kwdefaults__ and "max_attempts" in run_load.__kwdefaults__:
        monkeypatch.setitem(run_load.__kwdefaults__, "max_attempts", 1)
    else:
        pytest.skip("run_load has no max_attempts knob yet")
    monkeypatch.setattr(tasks.load_account, "retry_delay_seconds", [0.0, 0.0])
    caplog.set_level(logging.WARNING, logger="freetime.flows")
    state = sync(duckdb_path=str(tmp_path / "w.duckdb"), base_url=dead, return_state=True)
    assert state.is_failed()
    assert "load failed while reading the API" in (state.message or "")
    announced = [r.getMessage() for r in caplog.records if r.name == "freetime.flows"]
    assert [m.split("; ")[-1] for m in announced] == [
        "trying again in about 0 s (retry 1 of 2)",
        "trying again in about 0 s (retry 2 of 2)",
    ], announced
    assert all(
        m.startswith("load-account failed (load failed while reading the API") for m in announced
    )
    with pytest.raises(LoadFailed):
        state.result()


def test_locked_warehouse_is_retried_then_reported_plainly(
    prefect_harness: None, api_env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.sync import sync

    warehouse = tmp_path / "w.duckdb"
    duckdb.connect(str(warehouse)).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import duckdb, sys, time
            con = duckdb.connect({str(warehouse)!r})
            print("locked", flush=True)
            time.sleep(60)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        monkeypatch.setattr(tasks, "LOCK_RETRY_SECONDS", 1.0)
        started = time.monotonic()
        state = sync(duckdb_path=str(warehouse), base_url=api_env.base_url, return_state=True)
        assert state.is_failed()
        assert "locked by another process" in (state.message or "")
        assert time.monotonic() - started >= 1.0
    finally:
        holder.kill()
        holder.wait()


def test_sync_applies_the_webhook_inbox(
    prefect_harness: None, api_env: Any, tmp_path: Path
) -> None:
    from conftest import T49

    from flows.sync import sync
    from pipelines.webhooks.inbox import Inbox, default_inbox_path, parse_notification

    warehouse = tmp_path / "w.duckdb"
    body = (T49 / "webhooks" / "container.updated.json").read_bytes()
    note = parse_notification(body)
    with Inbox(default_inbox_path(warehouse)) as inbox:
        assert inbox.add(note)
    state = sync(duckdb_path=str(warehouse), base_url=api_env.base_url, return_state=True)
    assert state.is_completed(), state.message
    with duckdb.connect(str(warehouse), read_only=True) as con:
        ids = con.execute("SELECT id FROM terminal49.webhook_notifications").fetchall()
    assert ids == [(note.id,)]
    with Inbox(default_inbox_path(warehouse)) as inbox:
        assert inbox.pending() == []


def test_sync_audits_pending_invoices_and_never_fails_for_them(
    prefect_harness: None, api_env: Any, tmp_path: Path
) -> None:
    from flows.sync import sync
    from pipelines.invoices.schema import Invoice, InvoiceLine
    from pipelines.invoices.store import import_invoices, pending_audit

    warehouse = tmp_path / "w.duckdb"
    now = _instant(api_env.clock())
    # the account the invoice is about: a load is enough (the flow runs below)
    run_load(warehouse, ApiSettings.resolve(base_url=api_env.base_url))
    with duckdb.connect(str(warehouse), read_only=True) as con:
        (number,) = con.execute("SELECT min(number) FROM terminal49.containers").fetchone() or ()
    day = now.date() - dt.timedelta(days=3)
    line = InvoiceLine(number, "demurrage", day, day, 1, 100.0, 100.0)
    invoice = Invoice("INV-1", "Pier T", "terminal", now.date(), "USD", [line], source="test")
    import_invoices(warehouse, [invoice], today=now.date(), now=now)
    assert pending_audit(warehouse) == 1

    state = sync(
        duckdb_path=str(warehouse), base_url=api_env.base_url, as_of=now, return_state=True
    )
    assert state.is_completed(), state.message
    assert "invoices" in state.result().timings
    assert pending_audit(warehouse) == 0
    with duckdb.connect(str(warehouse), read_only=True) as con:
        audited = con.execute("SELECT invoice_number FROM analytics.invoice_audit").fetchall()
    assert audited == [("INV-1",)]

    # an audit that cannot run leaves the invoices pending and the run completed
    corrected = Invoice("INV-1", "Pier T", "terminal", now.date(), "USD", [line], source="t2")
    corrected.invoice_total = 100.0
    import_invoices(warehouse, [corrected], today=now.date(), now=now)
    with duckdb.connect(str(warehouse)) as con:
        con.execute("ALTER TABLE terminal49.invoice_lines RENAME COLUMN party TO party_gone")
    state = sync(
        duckdb_path=str(warehouse), base_url=api_env.base_url, as_of=now, return_state=True
    )
    assert state.is_completed(), state.message
    assert pending_audit(warehouse) == 1
