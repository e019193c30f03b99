"""The deployments of prefect.yaml run by a real process worker against a real Prefect server, on
a PostgreSQL warehouse (issue 30, docs/workers.md).

The set-up is the guide's: ``prefect server start``, a work pool of type process named
``freetime``, ``prefect deploy --all`` from this repository, ``prefect worker start --pool
freetime`` on a machine whose ``FREETIME_WAREHOUSE`` names the PostgreSQL warehouse and whose
``TERMINAL49_*`` settings name the API (here the sandbox). Every command is the real CLI in its
own process, over a temporary ``PREFECT_HOME``; the Prefect server is the session's real server
process (``prefect_harness``: like ``prefect server start --no-services``, no scheduler, so no
scheduled run of the deployments interferes), not one more started for this test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import psycopg2
import pytest

from sandbox.thread import SandboxThread

pytestmark = [pytest.mark.prefect, pytest.mark.postgres]

REPO = Path(__file__).resolve().parents[1]
CONTAINERS = 40


def _prefect_env(home: Path, api_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TERMINAL49_", "FREETIME_"))}
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_API_URL=api_url,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_CLI_PROMPT="false",
    )
    return env


def _prefect(env: dict[str, str], *args: str, timeout: float = 120) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "prefect", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"prefect {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _count(url: str, table: str) -> int:
    con = psycopg2.connect(url)
    try:
        with con.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {table}")
            row = cur.fetchone()
            assert row is not None
            return int(row[0])
    finally:
        con.close()


def test_a_process_worker_runs_the_hourly_and_nightly_deployments_on_postgresql(
    prefect_harness: None, pg_database: str, tmp_path: Path
) -> None:
    """One worker runs the hourly sync and the nightly reconciliation, side by side: the
    writers take turns by the warehouse's advisory lock, every step runs on PostgreSQL and the
    nightly summary holds the row counts against the API's totals."""
    from prefect.settings import PREFECT_API_URL
    from prefect.workers.process import ProcessWorker

    with SandboxThread(containers=CONTAINERS, seed=49, clock="2026-11-20T12:00:00Z") as sb:
        api_url = str(PREFECT_API_URL.value())
        api = httpx.Client(base_url=api_url, timeout=30)
        # `prefect work-pool create freetime --type process`, by the API (a CLI start less)
        template = ProcessWorker.get_default_base_job_template()
        pool = {"name": "freetime", "type": "process", "base_job_template": template}
        api.post("/work_pools/", json=pool).raise_for_status()
        env = _prefect_env(tmp_path / "home", api_url)
        out = _prefect(env, "deploy", "--all")
        assert "sync/freetime-sync" in out and "sync/freetime-reconcile" in out, out
        # `prefect deployment run sync/freetime-sync` (and -reconcile), by the API
        runs: dict[str, str] = {}
        for name in ("freetime-sync", "freetime-reconcile"):
            deployment = api.get(f"/deployments/name/sync/{name}").json()
            assert deployment["work_pool_name"] == "freetime"
            created = api.post(f"/deployments/{deployment['id']}/create_flow_run", json={})
            runs[name] = created.json()["id"]

        # the worker's machine: the warehouse and the API are its settings, never parameters
        worker_env = dict(
            env,
            FREETIME_WAREHOUSE=pg_database,
            FREETIME_WORKDIR=str(tmp_path / "work"),
            TERMINAL49_BASE_URL=sb.base_url,
            TERMINAL49_API_KEY=sb.api_key,
            TERMINAL49_RATE_LIMIT="100000",
        )
        _prefect(worker_env, "worker", "start", "--pool", "freetime", "--run-once", timeout=240)

    password = pg_database.split(":")[2].split("@")[0]
    for name, run_id in runs.items():
        run = api.get(f"/flow_runs/{run_id}").json()
        assert run["state_type"] == "COMPLETED", (name, run)
        # the URL given to the worker keeps its password out of the run's parameters
        assert run["parameters"] == ({"full": True} if name == "freetime-reconcile" else {})
        logs = api.post("/logs/filter", json={"logs": {"flow_run_id": {"any_": [run_id]}}})
        text = "\n".join(log["message"] for log in logs.json())
        assert "transport events: " in text, text  # the events step ran, not skipped
        assert "postgresql://postgres:***@127.0.0.1" in text, text
        assert password not in text
    artifacts = api.post(
        "/artifacts/filter",
        json={"artifacts": {"flow_run_id": {"any_": [runs["freetime-reconcile"]]}}},
    ).json()
    summary = next(a["data"] for a in artifacts if a["type"] == "markdown")
    assert "## Reconciliation: warehouse against the API" in summary, summary
    assert "terminal49.containers" in summary and "**no**" not in summary, summary
    assert password not in summary

    # the warehouse on PostgreSQL holds the account and its risk
    assert _count(pg_database, "terminal49.containers") == CONTAINERS
    assert _count(pg_database, "analytics.demurrage_risk") == CONTAINERS
    assert _count(pg_database, "terminal49.freetime_loads WHERE writer = 'load'") == 2
