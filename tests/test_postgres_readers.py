"""PostgreSQL readers during a risk publish, and warehouses made by hand or by an older freetime:
readers see every analytics table of one run, whole; old tables are migrated, unreadable
ones refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import psycopg2
import pytest
from typer.testing import CliRunner

from freetime_cli.main import app
from pipelines.analytics import publish_risk
from pipelines.config import Warehouse
from pipelines.report.data import load_risk

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[1]
CLOCK = "2026-11-20T12:00:00Z"
AS_OF = datetime.fromisoformat(CLOCK.replace("Z", "+00:00"))


def _execute(url: str, *statements: str) -> list[tuple[object, ...]]:
    con = psycopg2.connect(url)
    try:
        with con.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
            rows = list(cur.fetchall()) if cur.description else []
        con.commit()
        return rows
    finally:
        con.close()


#: ``pg_loaded``'s account here: a sandbox of 40 containers of seed 49 at CLOCK
ACCOUNT = (40, 49, CLOCK)


def _freetime(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TERMINAL49_", "FREETIME_"))}
    env["FREETIME_WORKDIR"] = os.environ.get("FREETIME_WORKDIR", "data")
    return subprocess.run(
        [sys.executable, "-m", "freetime_cli.main", *args, "--warehouse", url],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


#: one statement, one snapshot: the runs of the risk table, the charges, the days and a view
SNAPSHOT = """
SELECT (SELECT count(DISTINCT as_of) FROM analytics.demurrage_risk),
       (SELECT min(as_of) FROM analytics.demurrage_risk),
       (SELECT count(*) FROM analytics.demurrage_risk),
       (SELECT count(DISTINCT as_of) FROM analytics.charges),
       (SELECT min(as_of) FROM analytics.charges),
       (SELECT count(DISTINCT as_of) FROM analytics.charge_days),
       (SELECT min(as_of) FROM analytics.charge_days),
       (SELECT count(*) FROM analytics.exposure_by_carrier)
"""


def test_a_reader_during_risk_publishes_sees_one_run_whole(pg_loaded: Callable[..., str]) -> None:
    pg_database = pg_loaded(*ACCOUNT)
    first = publish_risk(pg_database, as_of=AS_OF)
    runs = [AS_OF + timedelta(hours=h) for h in range(1, 7)]
    seen: list[tuple[object, ...]] = []
    reports: list[datetime] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        try:
            con = psycopg2.connect(pg_database)
            con.autocommit = True
            with con.cursor() as cur:
                while not done.is_set():
                    cur.execute(SNAPSHOT)
                    row = cur.fetchone()
                    assert row is not None
                    seen.append(row)
                    reports.append(load_risk(pg_database).as_of)
            con.close()
        except BaseException as exc:  # the assertion is made in the test's thread
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for when in runs:
            publish_risk(pg_database, as_of=when)
    finally:
        done.set()
        reader.join(timeout=120)
    assert not errors, errors
    assert len(seen) > 3
    for risk_runs, risk_as_of, rows, c_runs, c_as_of, d_runs, d_as_of, carriers in seen:
        assert (risk_runs, c_runs, d_runs) == (1, 1, 1)  # never two runs in one table
        assert risk_as_of == c_as_of == d_as_of  # nor the tables of two runs together
        assert rows == first.rows and carriers
    assert {r[1] for r in seen} <= {AS_OF, *runs}
    assert set(reports) <= {AS_OF, *runs}


#: a dashboard's count and cost by terminal and level (the benchmark's aggregate), with the
#: run's instant and row count
BY_TERMINAL = """
SELECT sum(n), min(first), max(last) FROM (
    SELECT pod_terminal_name, risk_level, count(*) AS n, sum(projected_demurrage),
           min(days_to_lfd), min(as_of) AS first, max(as_of) AS last
    FROM analytics.demurrage_risk GROUP BY 1, 2) AS t
"""


def _publish_into(url: str, when: datetime, errors: list[BaseException]) -> None:
    try:
        publish_risk(url, as_of=when)
    except BaseException as exc:  # the assertion is made in the test's thread
        errors.append(exc)


def test_a_reader_during_an_open_risk_publish_reads_the_published_run_whole(
    pg_loaded: Callable[..., str],
) -> None:
    pg_database = pg_loaded(*ACCOUNT)
    first = publish_risk(pg_database, as_of=AS_OF)
    later = AS_OF + timedelta(hours=1)
    one = _execute(pg_database, "SELECT container_id FROM analytics.demurrage_risk LIMIT 1")
    lookup = f"SELECT as_of FROM analytics.demurrage_risk WHERE container_id = '{one[0][0]}'"
    # a session holding the history table: the next publish writes its risk rows, then
    # waits for it to record the binding LFD's changes, its transaction open
    holder = psycopg2.connect(pg_database)
    with holder.cursor() as cur:
        cur.execute("LOCK TABLE terminal49.history IN SHARE MODE")
    errors: list[BaseException] = []
    writer = threading.Thread(target=_publish_into, args=(pg_database, later, errors))
    writer.start()
    try:
        waiting = (
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "WHERE NOT l.granted AND c.relname = 'history'"
        )
        deadline = time.monotonic() + 120
        while _execute(pg_database, waiting) != [(1,)] and not errors:
            assert time.monotonic() < deadline, "the publish never reached the history"
            time.sleep(0.05)
        assert not errors, errors
        # the reader waits for no lock of the open publish (else: lock timeout) and reads
        # the run published before it, whole
        during = _execute(pg_database, "SET lock_timeout = '2s'", BY_TERMINAL)
        assert during == [(first.rows, AS_OF, AS_OF)]
        assert _execute(pg_database, "SET lock_timeout = '2s'", lookup) == [(AS_OF,)]
    finally:
        holder.rollback()
        holder.close()
        writer.join(timeout=120)
    assert not errors, errors
    assert _execute(pg_database, BY_TERMINAL) == [(first.rows, later, later)]
    assert _execute(pg_database, lookup) == [(later,)]
    previous = "SELECT count(*), min(as_of), max(as_of) FROM analytics.demurrage_risk_previous"
    assert _execute(pg_database, previous) == [(first.rows, AS_OF, AS_OF)]


def test_a_reader_left_in_an_open_transaction_never_stops_a_risk_run(
    pg_loaded: Callable[..., str],
) -> None:
    pg_database = pg_loaded(*ACCOUNT)
    runs = [AS_OF + timedelta(hours=h) for h in range(4)]
    first = publish_risk(pg_database, as_of=runs[0])
    idle = psycopg2.connect(pg_database)  # a psql session that read, then left BEGIN open
    try:
        with idle.cursor() as cur:
            cur.execute(BY_TERMINAL)
            assert cur.fetchall() == [(first.rows, runs[0], runs[0])]
        for when in runs[1:3]:  # each slot in turn is the one written while the session waits
            errors: list[BaseException] = []
            writer = threading.Thread(target=_publish_into, args=(pg_database, when, errors))
            writer.start()
            writer.join(timeout=120)
            assert not writer.is_alive(), "the risk run waited for the reader's transaction"
            assert not errors, errors
            assert _execute(pg_database, BY_TERMINAL) == [(first.rows, when, when)]
    finally:
        idle.rollback()
        idle.close()
    publish_risk(pg_database, as_of=runs[3])
    assert _execute(pg_database, BY_TERMINAL) == [(first.rows, runs[3], runs[3])]


def test_an_older_analytics_schema_is_migrated_by_the_next_risk_run(
    pg_loaded: Callable[..., str],
) -> None:
    pg_database = pg_loaded(*ACCOUNT)
    # what an older freetime left: a narrower risk table, a view over it, no charges
    _execute(
        pg_database,
        "CREATE SCHEMA analytics",
        "CREATE TABLE analytics.demurrage_risk AS SELECT id AS container_id, "
        "number AS container_number, 'overdue'::text AS risk_level FROM terminal49.containers",
        "CREATE VIEW analytics.at_risk_containers AS SELECT * FROM analytics.demurrage_risk",
    )
    done = _freetime(pg_database, "risk", "--as-of", CLOCK, "--format", "csv")
    assert done.returncode == 0, done.stderr
    columns = _execute(
        pg_database,
        "SELECT table_name, count(*) FROM information_schema.columns "
        "WHERE table_schema = 'analytics' GROUP BY table_name",
    )
    widths = dict(columns)  # type: ignore[arg-type]
    assert widths["demurrage_risk"] > 40 and widths["at_risk_containers"] == (
        widths["demurrage_risk"] + 1  # urgency_rank
    )
    assert {"charges", "charge_days", "containers_wide", "alert_outbox"} <= set(widths)
    # the previous table kept the old rows, with the old columns
    assert widths["demurrage_risk_previous"] == 3


def test_a_hand_made_warehouse_runs_or_is_refused_in_one_line(pg_database: str) -> None:
    # containers with a few columns, an LFD kept as an instant: refused in one line
    _execute(
        pg_database,
        "CREATE SCHEMA terminal49",
        "CREATE TABLE terminal49.containers (id text, number text, pod_timezone text, "
        "pickup_lfd_terminal timestamptz, fetched_at timestamptz)",
        "INSERT INTO terminal49.containers VALUES ('c1', 'ABCU1234567', 'America/Los_Angeles', "
        "'2026-11-18T08:00:00Z', '2026-11-20T10:00:00Z')",
        "CREATE TABLE terminal49.history (entity text, entity_id text, field text, "
        "old_value text, new_value text, observed_at timestamptz, fetched_at timestamptz, "
        "how text, notification_id text, load_id text)",
    )
    refused = _freetime(pg_database, "risk", "--as-of", CLOCK)
    assert refused.returncode == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "pickup_lfd_terminal" in refused.stderr and "Traceback" not in refused.stderr
    assert not _execute(
        pg_database, "SELECT 1 FROM information_schema.schemata WHERE schema_name = 'analytics'"
    )

    # the LFD as a date: what the table has is read, the rest is unknown
    _execute(
        pg_database,
        "ALTER TABLE terminal49.containers ALTER pickup_lfd_terminal TYPE date "
        "USING (pickup_lfd_terminal AT TIME ZONE 'America/Los_Angeles')::date",
    )
    done = _freetime(pg_database, "risk", "--as-of", CLOCK, "--format", "csv", "--level", "overdue")
    assert done.returncode == 0, done.stderr
    assert "ABCU1234567" in done.stdout
    wide = _execute(
        pg_database,
        "SELECT pod_last_free_day_on, pod_last_free_day_on_local FROM analytics.containers_wide",
    )
    assert [(str(a), b) for a, b in wide] == [("2026-11-18", "2026-11-18")]

    # no column id: refused in one line, the published run stays
    _execute(pg_database, "ALTER TABLE terminal49.containers RENAME COLUMN id TO box_id")
    refused = _freetime(pg_database, "risk", "--as-of", CLOCK)
    assert refused.returncode == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "no column id" in refused.stderr
    assert _execute(pg_database, "SELECT count(*) FROM analytics.demurrage_risk") == [(1,)]
    password = Warehouse.parse(pg_database).password
    assert password and password not in refused.stderr + done.stdout + done.stderr


def test_a_column_changing_type_takes_the_views_over_it_along(
    pg_loaded: Callable[..., str],
) -> None:
    from pipelines.pg.views import drop_views_over, refresh_views

    pg_database = pg_loaded(*ACCOUNT)
    publish_risk(pg_database, as_of=AS_OF)
    views = "SELECT table_schema, table_name FROM information_schema.views ORDER BY 1, 2"
    before = _execute(pg_database, views)
    assert ("analytics", "containers_wide") in before and ("terminal49", "lfd_changes") in before
    con = psycopg2.connect(pg_database)
    try:
        with con.cursor() as cur:  # what the loader's publish does when dlt retypes a column
            drop_views_over(cur, "terminal49", "containers")
            cur.execute("ALTER TABLE terminal49.containers ALTER number TYPE varchar(20)")
            assert refresh_views(cur) > 0
        con.commit()
    finally:
        con.close()
    assert _execute(pg_database, views) == before
    assert _execute(pg_database, "SELECT count(*) FROM analytics.containers_wide") == [(40,)]


def test_the_notebooks_read_the_postgresql_warehouse_the_setting_names(
    pg_loaded: Callable[..., str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.test_notebooks import NOTEBOOKS, run_notebook

    pg_database = pg_loaded(*ACCOUNT)
    publish_risk(pg_database, as_of=AS_OF)
    publish_risk(pg_database, as_of=AS_OF + timedelta(days=1))
    monkeypatch.setenv("FREETIME_WAREHOUSE", pg_database)
    for notebook in NOTEBOOKS:
        # FREETIME_DUCKDB names a file that does not exist: the setting wins
        defs = run_notebook(notebook, tmp_path / "not-read.duckdb", monkeypatch)
        if notebook.name == "demurrage_risk.py":
            assert defs["risk_data"].source == "published"
            assert defs["risk_data"].risk.height == 40
        if notebook.name == "explore.py":
            assert defs["table_overview"].height >= 6
            assert len(defs["answers"]) >= 10  # every example question, on PostgreSQL
    assert not (tmp_path / "not-read.duckdb").exists()


def test_report_with_a_postgresql_setting_never_reads_the_duckdb_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # a server nothing listens on: the report tries it (one line), not data/freetime.duckdb
    monkeypatch.setenv("FREETIME_WAREHOUSE", "postgresql://team:secret@127.0.0.1:9/freetime")
    monkeypatch.setenv("FREETIME_DUCKDB", str(tmp_path / "w.duckdb"))
    for command in (["report", "--out", str(tmp_path / "r.html")], ["evidence", "ABCU1234567"]):
        result = CliRunner().invoke(
            app, command
        )  # a driver looks at the platform (`file`): not fast
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and "127.0.0.1" in lines[0], lines
        assert "secret" not in result.output and "w.duckdb" not in result.output
