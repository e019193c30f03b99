"""`freetime run`, `documents sync` and every step of the sync flow on a PostgreSQL warehouse.

A real sandbox over loopback HTTP, a real PostgreSQL server (tests/pg.py), real dlt pipelines
and the session's one Prefect server: `freetime run` runs as a real process against it (so it
starts no temporary server of its own), the nightly sync as a real flow in this process.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from pipelines.analytics import at_risk, publish_risk
from pipelines.config import ApiSettings, Warehouse
from pipelines.document_intake import sync_documents
from pipelines.load import run_load
from sandbox.thread import SandboxThread
from tests.pg import PostgresServer, free_port

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[1]
CLOCK = "2026-11-20T12:00:00Z"
AS_OF = dt.datetime(2026, 11, 20, 12, tzinfo=dt.UTC)
CONTAINERS = 60
SECRET = "s3cret-Pw"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxThread]:
    with SandboxThread(containers=CONTAINERS, seed=49, clock=CLOCK) as sb:
        yield sb


def _api(sb: SandboxThread) -> ApiSettings:
    return ApiSettings(base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100000)


def _env(sb: SandboxThread | None = None, **extra: str) -> dict[str, str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TERMINAL49_", "FREETIME_", "PGPASSWORD"))
    }
    if sb is not None:
        base.update(
            TERMINAL49_API_KEY=sb.api_key,
            TERMINAL49_BASE_URL=sb.base_url,
            TERMINAL49_RATE_LIMIT="100000",
        )
    base["COLUMNS"] = "200"
    return {**base, **extra}


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "freetime_cli.main", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _count(url: str, sql: str) -> int:
    con = psycopg2.connect(url)
    try:
        with con.cursor() as cur:
            cur.execute(sql)
            row = cur.fetchone()
            assert row is not None
            return int(row[0])
    finally:
        con.close()


# --- freetime run ----------------------------------------------------------------------------


@pytest.mark.prefect
def test_freetime_run_on_postgresql_prints_the_duckdb_at_risk_table_and_changes(
    sandbox: SandboxThread, pg_database: str, tmp_path: Path, prefect_harness: None
) -> None:
    """Two `freetime run --warehouse URL`: the at-risk table is DuckDB's for the same
    account (loaded and published in this process); the second run's summary has the changes
    since the first, read from PostgreSQL."""
    from prefect.settings import PREFECT_API_URL

    duck = tmp_path / "w.duckdb"
    run_load(duck, _api(sandbox))
    publish_risk(duck, as_of=AS_OF)
    expected = at_risk(duck)

    env = _env(
        sandbox,
        PREFECT_API_URL=str(PREFECT_API_URL.value()),
        FREETIME_WORKDIR=os.environ["FREETIME_WORKDIR"],
    )
    runs = [
        _cli("run", "--warehouse", pg_database, "--as-of", CLOCK, "--limit", "0", env=env)
        for _ in range(2)
    ]
    password = Warehouse.parse(pg_database).password
    assert password
    for done in runs:
        assert done.returncode == 0, done.stderr[-3000:]
        assert "Traceback" not in done.stderr
        assert password not in done.stdout + done.stderr
        assert "postgresql://postgres:***@127.0.0.1" in done.stdout
        # DuckDB's at-risk containers, in its order (most urgent first), and no other
        assert f"At-risk containers ({expected.height})" in done.stdout
        assert f"\n{expected.height} shown; projected demurrage " in done.stdout
        where = [done.stdout.index(n) for n in expected["container_number"]]
        assert where == sorted(where)
    # the first run on an empty warehouse has nothing to compare with; the second has
    assert "since the last run" not in runs[0].stdout
    assert "since the last run: 0 newly overdue, 0 newly ready, 0 LFDs moved" in runs[1].stdout
    # the events step ran on PostgreSQL too: the at-risk containers' events are in it
    assert "events 0 (budget" not in runs[0].stdout
    assert _count(pg_database, "SELECT count(*) FROM terminal49.transport_events") > 0
    assert _count(pg_database, "SELECT count(*) FROM analytics.demurrage_risk_previous") == (
        CONTAINERS
    )


def test_freetime_run_and_documents_sync_refuse_a_bad_postgresql_warehouse_in_one_line(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong password and a server that does not answer: one line, exit 2, before the
    sandbox, Prefect or any request start; the password never shown."""
    from typer.testing import CliRunner

    from freetime_cli.main import app

    monkeypatch.delenv("FREETIME_WAREHOUSE", raising=False)
    monkeypatch.setenv("TERMINAL49_API_KEY", "a-key")  # the warehouse is what is wrong
    wrong = postgres_server.url("postgres", "postgres", SECRET)
    gone = f"postgresql://postgres:{SECRET}@127.0.0.1:{free_port()}/freetime"
    for command in (["run"], ["documents", "sync"]):
        for url in (wrong, gone):
            done = CliRunner().invoke(app, [*command, "--warehouse", url])
            assert done.exit_code == 2, done.output
            lines = done.output.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("error: cannot connect"), lines
            assert SECRET not in done.output
            assert "postgresql://postgres:***@127.0.0.1" in lines[0]
        both = CliRunner().invoke(app, [*command, "--warehouse", wrong, "--duckdb", "w.duckdb"])
        assert both.exit_code == 2 and "give the warehouse once" in both.output


# --- documents sync --------------------------------------------------------------------------


def test_documents_sync_on_postgresql(
    sandbox: SandboxThread, pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _env(sandbox, FREETIME_WORKDIR=os.environ["FREETIME_WORKDIR"])
    done = _cli("documents", "sync", "--warehouse", pg_database, env=env)
    assert done.returncode == 0, done.stderr
    password = Warehouse.parse(pg_database).password
    assert password and password not in done.stdout + done.stderr
    docs = _count(pg_database, "SELECT count(*) FROM terminal49.documents")
    assert docs > 0 and f"documents {docs}" in done.stdout
    assert _count(pg_database, "SELECT count(*) FROM terminal49.freetime_loads") == 1
    # again, by the setting: the newest fetch replaces each row, no duplicates
    monkeypatch.setenv("FREETIME_WAREHOUSE", pg_database)
    assert sync_documents(None, _api(sandbox))["documents"] == docs
    assert _count(pg_database, "SELECT count(*) FROM terminal49.documents") == docs
    assert _count(pg_database, "SELECT count(DISTINCT id) FROM terminal49.documents") == docs
    assert _count(pg_database, "SELECT count(*) FROM terminal49.freetime_loads") == 2


# --- the nightly sync's steps ----------------------------------------------------------------


@pytest.mark.prefect
def test_the_nightly_sync_runs_every_step_on_postgresql(
    sandbox: SandboxThread,
    pg_database: str,
    prefect_harness: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The full sync on PostgreSQL: the reconciliation's row counts match the API's totals,
    the transport events are fetched, and the second run's summary has its changes."""
    from flows.sync import sync

    warehouse = Warehouse.parse(pg_database)
    monkeypatch.setenv("FREETIME_WAREHOUSE", pg_database)
    monkeypatch.setenv("TERMINAL49_API_KEY", sandbox.api_key)
    first = sync(base_url=sandbox.base_url, rate_limit_per_minute=100000, as_of=AS_OF, full=True)
    assert first.duckdb_path == warehouse.display
    assert first.changes is None  # nothing to compare with yet
    assert first.events is not None and first.events.requests > 0
    counts = {r.table: r for r in first.reconciliation}
    assert set(counts) == {"terminal49.containers", "terminal49.shipments"}
    for r in counts.values():
        assert r.warehouse_rows == r.api_total == r.distinct_seen > 0
    assert counts["terminal49.containers"].warehouse_rows == CONTAINERS

    second = sync(base_url=sandbox.base_url, rate_limit_per_minute=100000, as_of=AS_OF, full=True)
    assert second.changes == {"newly_overdue": 0, "newly_ready": 0, "lfd_moved": 0}
    events = _count(pg_database, "SELECT count(*) FROM terminal49.transport_events")
    assert events >= first.events.events > 0
    fetches = "SELECT count(*) FROM terminal49.freetime_loads WHERE writer = 'events'"
    assert _count(pg_database, fetches) == 2
