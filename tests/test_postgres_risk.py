"""Demurrage risk on a real PostgreSQL server: the same rows as on DuckDB, one transaction."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import duckdb
import psycopg2
import pytest

from pipelines.analytics import LEVELS, at_risk, publish_risk
from pipelines.config import Warehouse

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[1]
CLOCK = "2026-11-20T12:00:00Z"
AS_OF = datetime.fromisoformat(CLOCK.replace("Z", "+00:00"))


def _rows(url: str, sql: str) -> list[tuple[object, ...]]:
    con = psycopg2.connect(url)
    try:
        with con.cursor() as cur:
            cur.execute(sql)
            return list(cur.fetchall())
    finally:
        con.close()


def test_risk_on_postgresql_publishes_the_rows_duckdb_publishes(
    pg_loaded: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pipelines.pg.slots as pg_slots

    monkeypatch.setattr(pg_slots, "BATCH_ROWS", 7)  # the rows go in many batches, not one

    path = tmp_path / "w.duckdb"  # loaded from the same sandbox as the database
    pg_database = pg_loaded(120, 49, CLOCK, duckdb=path)

    on_duck = publish_risk(path, as_of=AS_OF)
    on_pg = publish_risk(pg_database, as_of=AS_OF)
    assert on_pg.rows == on_duck.rows == 120
    assert on_pg.levels == on_duck.levels
    assert on_pg.projected_demurrage == pytest.approx(on_duck.projected_demurrage)
    assert "***" in on_pg.duckdb_path  # the summary never carries the password

    with duckdb.connect(str(path), read_only=True) as con:
        con.execute("SET TimeZone = 'UTC'")
        expected = con.sql("SELECT * FROM analytics.demurrage_risk ORDER BY container_id").pl()
    got = at_risk(pg_database, list(LEVELS)).sort("container_id")
    assert got.columns == expected.columns
    assert got.schema == expected.schema
    assert got.equals(expected)

    # a second run keeps the first as _previous, and history has the binding LFD once
    publish_risk(pg_database, as_of=AS_OF)
    counts = _rows(
        pg_database,
        "SELECT (SELECT count(*) FROM analytics.demurrage_risk_previous), "
        "(SELECT count(*) FROM terminal49.history WHERE how = 'risk')",
    )
    assert counts[0][0] == 120
    first_run = counts[0][1]
    assert first_run > 0
    publish_risk(pg_database, as_of=AS_OF)
    again = _rows(pg_database, "SELECT count(*) FROM terminal49.history WHERE how = 'risk'")
    assert again == [(first_run,)]  # nothing moved: nothing new in history


def test_freetime_risk_runs_on_the_warehouse_the_setting_names(
    pg_loaded: Callable[..., str],
) -> None:
    pg_database = pg_loaded(40, 49, CLOCK)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TERMINAL49_", "FREETIME_"))}
    env["FREETIME_WAREHOUSE"] = pg_database
    done = subprocess.run(
        [sys.executable, "-m", "freetime_cli.main", "risk", "--as-of", CLOCK, "--format", "csv"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith("risk_level,")
    password = Warehouse.parse(pg_database).password
    assert password and password not in done.stdout + done.stderr


def test_risk_on_postgresql_publishes_under_the_writers_lock(pg_database: str) -> None:
    from pipelines.pg.connection import connect
    from pipelines.pg.lock import WRITER_KEY
    from pipelines.write import WriterBusy

    warehouse = Warehouse.parse(pg_database)
    # another writer's session holds the lock
    holder = connect(warehouse, autocommit=True, application="freetime writer: full load")
    try:
        with holder.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", [WRITER_KEY])
        lines: list[str] = []
        with pytest.raises(WriterBusy, match=r"^the warehouse is being written by the full load"):
            publish_risk(pg_database, as_of=AS_OF, wait_seconds=0.5, on_wait=lines.append)
        assert len(lines) == 1 and lines[0].startswith("waiting for the full load (pid ")
    finally:
        holder.close()
