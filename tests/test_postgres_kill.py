"""A SIGKILL of the loader at any moment of its publish on PostgreSQL leaves every table
before or after the load, all together, and the next load completes (the DuckDB test of
test_write_safety, on a real server)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from pipelines.config import ApiSettings
from pipelines.load import TABLES, run_load
from sandbox.process import SandboxProcess
from tests.pg import PostgresServer

pytestmark = pytest.mark.postgres

CLOCK = "2026-11-20T12:00:00Z"
REPO = Path(__file__).resolve().parents[1]
PUBLISH = "freetime publish load"
#: the session of a load's writer lock (pipelines/pg/lock.py: "freetime writer: full load pid
#: ..."), held from before the publish
WRITER = "freetime writer: % load pid %"


def _api(sb: Any) -> ApiSettings:
    return ApiSettings(base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100_000)


def _dump(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows, without the columns that differ between two loads of one state."""
    out = {}
    con = psycopg2.connect(url)
    try:
        with con.cursor() as cur:
            for table in TABLES:
                cur.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = "
                    "'terminal49' AND table_name = %s AND column_name NOT IN "
                    "('fetched_at', '_dlt_load_id', '_dlt_id') ORDER BY column_name",
                    [table],
                )
                cols = ", ".join(f'"{r[0]}"' for r in cur.fetchall())
                cur.execute(f"SELECT {cols} FROM terminal49.{table}")
                out[table] = sorted(cur.fetchall(), key=repr)
    finally:
        con.close()
    return out


def _copy(server: PostgresServer, template: str) -> str:
    """A new database with the template's tables (and no staged load); its URL."""
    return server.url(server.clone(template))


def _load(url: str, sb: Any, work: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TERMINAL49_", "FREETIME_"))}
    env.update(TERMINAL49_API_KEY=sb.api_key, FREETIME_WORKDIR=str(work))
    return subprocess.Popen(
        [sys.executable, "-m", "freetime_cli.main", "load", "--full", "--warehouse", url]
        # unpaced: the clone carries the earlier loads' requests, which at the API's 100 a
        # minute held each loader some seconds before its first page
        + ["--base-url", sb.base_url, "--rate-limit", "100000"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_publish(server: PostgresServer, proc: subprocess.Popen[str] | None) -> None:
    """Until the loader's publishing session shows in pg_stat_activity (``proc``: the loader,
    which must not have ended meanwhile; None for a load in this process)."""
    deadline = time.monotonic() + 180
    con = psycopg2.connect(server.url())
    con.autocommit = True
    try:
        with con.cursor() as cur:
            while True:
                cur.execute(
                    "SELECT application_name = %s FROM pg_stat_activity "
                    "WHERE application_name = %s OR application_name LIKE %s",
                    [PUBLISH, PUBLISH, WRITER],
                )
                seen = [r[0] for r in cur.fetchall()]
                if True in seen:
                    return
                assert proc is None or proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the load did not start publishing"
                # while it scans, now and then; once it holds the writers' lock (dlt then
                # loads the staged rows, and the publish follows), closely
                time.sleep(0.002 if seen else 0.05)
    finally:
        con.close()


def _publish_seconds(server: PostgresServer, url: str, sb: Any) -> float:
    """Run a full load into ``url`` in this process; seconds from its publishing session's
    start to the load's end."""
    watcher = ThreadPoolExecutor(1)
    try:
        started = watcher.submit(lambda: (_wait_for_publish(server, None), time.monotonic()))
        run_load(url, _api(sb), full=True)
        ended = time.monotonic()
        return ended - started.result(timeout=10)[1]
    finally:
        watcher.shutdown()


def test_a_kill_at_any_moment_of_the_publish_leaves_old_or_new_tables(
    postgres_server: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FREETIME_WORKDIR", str(tmp_path / "work"))
    # A process: this process times the publish and kills it at a share of it; a server on a
    # thread would compete with that timing for the GIL.
    with SandboxProcess(containers=400, seed=5, clock=CLOCK) as sb:
        old_db = postgres_server.create_database()
        run_load(postgres_server.url(old_db), _api(sb))
        old = _dump(postgres_server.url(old_db))
        sb.advance(hours=36)  # holds clear and appear, LFDs move, containers are picked up
        new_url = postgres_server.url(postgres_server.create_database())
        run_load(new_url, _api(sb))
        new = _dump(new_url)
        assert old["container_holds"] != new["container_holds"]
        assert old["containers"] != new["containers"]

        # how long the publish of the old state's copy takes (in this process: the loader's
        # own start is not part of it), and that it gives the new state
        url = _copy(postgres_server, old_db)
        window = _publish_seconds(postgres_server, url, sb)
        assert _dump(url) == new

        outcomes = []
        for n, share in enumerate((0.0, 0.25, 0.5, 0.75)):
            url = _copy(postgres_server, old_db)
            work = tmp_path / f"kill{n}"
            proc = _load(url, sb, work)
            _wait_for_publish(postgres_server, proc)
            time.sleep(share * window)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            got = _dump(url)  # the server rolled back the dead session's transaction, or not
            assert got in (old, new), (
                f"kill {share:.0%} into the publish: "
                + ", ".join(t for t in TABLES if got[t] not in (old[t], new[t]))
                + " hold neither the old nor the new rows"
            )
            outcomes.append("old" if got == old else "new")
            monkeypatch.setenv("FREETIME_WORKDIR", str(work))
            run_load(url, _api(sb), full=True)  # publishes what is staged, then its own load
            assert _dump(url) == new
        assert "old" in outcomes, outcomes  # the kills did land inside the publish
