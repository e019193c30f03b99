"""The warehouse on a real PostgreSQL server (started by the tests: tests/pg.py).

Loads from the real sandbox over loopback HTTP, through real dlt pipelines, into a real server;
the command line runs as a real process. Each test gets a database of its own.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import psycopg2
import pytest

from pipelines.analytics import publish_risk
from pipelines.config import DATASET, ApiSettings, Warehouse
from pipelines.document_intake import sync_documents
from pipelines.history.transport_events import fetch_transport_events
from pipelines.load import full_lists, run_load
from pipelines.pg.connection import connect
from pipelines.pg.lock import WRITER_KEY, writer_lock
from pipelines.pg.publish import DUCKDB_NAMES
from pipelines.pg.write import write
from pipelines.terminal49 import terminal49_source
from pipelines.terminal49.client import Terminal49Client
from pipelines.write import LoadFailed, ScanInfo
from sandbox.thread import SandboxThread
from tests.pg import PostgresServer, free_port

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[1]
CLOCK = "2026-11-20T12:00:00Z"
#: the tables a load writes, with the key their rows are compared by
TABLES = {
    "containers": ("id",),
    "shipments": ("id",),
    "container_holds": ("container_id", "position"),
    "container_fees": ("container_id", "position"),
    "terminals": ("id",),
    "ports": ("id",),
}
#: columns that say when or in which load a row was written: they differ between two loads
WHEN = {"_dlt_load_id", "_dlt_id", "fetched_at"}


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxThread]:
    with SandboxThread(containers=60, seed=49, clock=CLOCK) as sb:
        yield sb


def _api(sb: SandboxThread) -> ApiSettings:
    return ApiSettings(base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100000)


def _rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    con = psycopg2.connect(url)
    try:
        with con.cursor() as cur:
            cur.execute(sql)
            return list(cur.fetchall())
    finally:
        con.close()


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TERMINAL49_", "FREETIME_"))}
    return subprocess.run(
        [sys.executable, "-m", "freetime_cli.main", *args],
        cwd=REPO,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=240,
    )


# --- loading --------------------------------------------------------------------------------


def test_a_load_publishes_every_table_with_its_types_history_and_record(
    sandbox: SandboxThread, pg_database: str
) -> None:
    first = run_load(pg_database, _api(sandbox))
    assert first.kind == "full" and first.rows["containers"] == 60
    assert first.warehouse is not None and "***" in first.warehouse

    counts = dict(
        _rows(
            pg_database,
            "SELECT 'containers', count(*) FROM terminal49.containers UNION ALL "
            "SELECT 'shipments', count(*) FROM terminal49.shipments",
        )
    )
    assert counts == {"containers": 60, "shipments": first.rows["shipments"]}
    types = dict(
        _rows(
            pg_database,
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'terminal49' AND table_name = 'containers'",
        )
    )
    assert types["pickup_lfd"] == "date"  # an LFD is a calendar date
    assert types["pod_discharged_at"] == "timestamp with time zone"
    assert types["fetched_at"] == "timestamp with time zone"
    comment = _rows(
        pg_database,
        "SELECT col_description('terminal49.containers'::regclass, attnum) FROM pg_attribute "
        "WHERE attrelid = 'terminal49.containers'::regclass AND attname = 'pickup_lfd'",
    )
    assert comment[0][0]  # documented like on DuckDB
    loads = _rows(pg_database, "SELECT writer, kind, complete FROM terminal49.freetime_loads")
    assert loads == [("load", "full", True)]
    seen = _rows(pg_database, "SELECT DISTINCT how FROM terminal49.history")
    assert seen == [("full",)]  # a record seen for the first time enters history

    # the second load asks only for what changed, and publishes no history for unchanged rows
    again = run_load(pg_database, _api(sandbox))
    assert again.kind == "incremental"
    kinds = _rows(pg_database, "SELECT kind FROM terminal49.freetime_loads ORDER BY load_id")
    assert kinds == [("full",), ("incremental",)]
    assert _rows(pg_database, "SELECT count(*) FROM terminal49.history WHERE how <> 'full'") == [
        (0,)
    ]
    # nothing staged is left behind: the incoming schema holds no rows once published
    left = _rows(pg_database, "SELECT count(*) FROM _incoming_load.containers")
    assert left == [(0,)]
    # the password reaches no file of the writers' working folder (dlt's packages and state)
    password = Warehouse.parse(pg_database).password
    assert password
    work = Path(os.environ["FREETIME_WORKDIR"])
    files = [p for p in work.rglob("*") if p.is_file()]
    assert files and not [p for p in files if password.encode() in p.read_bytes()]
    state = _rows(pg_database, "SELECT state FROM _incoming_load._dlt_pipeline_state")
    assert state and password not in str(state)


def test_an_older_record_never_overwrites_a_newer_one(
    sandbox: SandboxThread, pg_database: str
) -> None:
    run_load(pg_database, _api(sandbox))
    future = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
    con = psycopg2.connect(pg_database)
    with con, con.cursor() as cur:
        cur.execute(
            "UPDATE terminal49.containers SET fetched_at = %s, current_status = 'newer' "
            "WHERE id = (SELECT min(id) FROM terminal49.containers) RETURNING id",
            [future],
        )
        row = cur.fetchone()
        assert row is not None
        kept = row[0]
    con.close()
    summary = run_load(pg_database, _api(sandbox), full=True)
    assert summary.skipped.get("containers") == 1
    status = _rows(
        pg_database, f"SELECT current_status FROM terminal49.containers WHERE id = '{kept}'"
    )
    assert status == [("newer",)]


def test_the_same_account_gives_equal_tables_on_duckdb_and_postgresql(
    sandbox: SandboxThread, pg_database: str, tmp_path: Path
) -> None:
    """`freetime load` into a DuckDB file and into PostgreSQL, then the documents sync and the
    transport events of the containers at risk into each: the same rows, the same types."""
    env = {"TERMINAL49_API_KEY": sandbox.api_key, "TERMINAL49_RATE_LIMIT": "100000"}
    env["FREETIME_WORKDIR"] = os.environ["FREETIME_WORKDIR"]
    path = tmp_path / "w.duckdb"
    to_duck = _cli("load", "--base-url", sandbox.base_url, "--duckdb", str(path), env=env)
    assert to_duck.returncode == 0, to_duck.stderr
    to_pg = _cli("load", "--base-url", sandbox.base_url, "--warehouse", pg_database, env=env)
    assert to_pg.returncode == 0, to_pg.stderr
    password = Warehouse.parse(pg_database).password
    assert password and password not in to_pg.stdout + to_pg.stderr
    assert "postgresql://postgres:***@127.0.0.1" in to_pg.stdout
    # in this process: the commands are tested on their own (tests/test_postgres_flow.py)
    events = {}
    for target in (path, Warehouse.parse(pg_database)):
        sync_documents(target, _api(sandbox))
        publish_risk(target, as_of=dt.datetime.fromisoformat(CLOCK))
        with Terminal49Client.for_api(_api(sandbox)) as client:
            events[str(target)] = fetch_transport_events(target, client, max_containers=1000)
    assert len({e.events for e in events.values()}) == 1, events

    duck = duckdb.connect(str(path), read_only=True)
    duck.execute("SET TimeZone = 'UTC'")
    pg = connect(Warehouse.parse(pg_database))
    try:
        for table, key in {**TABLES, **LATER_TABLES}.items():
            _assert_equal_table(duck, pg, table, key)
        history_sql = (
            "SELECT entity, entity_id, field, old_value, new_value, how FROM terminal49.history "
            "ORDER BY 1, 2, 3"
        )
        with pg.cursor() as cur:
            cur.execute(history_sql)
            assert cur.fetchall() == duck.execute(history_sql).fetchall()
    finally:
        duck.close()
        pg.close()


def test_an_hourly_load_writes_the_same_history_on_duckdb_and_postgresql(
    pg_database: str, tmp_path: Path
) -> None:
    """The changes an incremental load finds (LFDs moved, holds cleared, containers picked up)
    enter history alike on both: PostgreSQL makes the texts of changed rows only."""
    path = tmp_path / "w.duckdb"
    with SandboxThread(containers=60, seed=49, clock=CLOCK) as sb:
        for target in (str(path), pg_database):
            run_load(target, _api(sb))
        assert sb.advance(hours=36)["changed_containers"]
        for target in (str(path), pg_database):
            assert run_load(target, _api(sb)).kind == "incremental"
    sql = (
        "SELECT entity, entity_id, field, old_value, new_value, how FROM terminal49.history "
        "WHERE how = 'incremental' ORDER BY 1, 2, 3, 4, 5"
    )
    with duckdb.connect(str(path), read_only=True) as duck:
        expected = duck.execute(sql).fetchall()
    assert {r[2].split(":")[0] for r in expected} >= {"pickup_lfd", "current_status"}
    assert _rows(pg_database, sql) == expected


#: the tables the documents sync and the transport events fetch write, with their keys
LATER_TABLES = {
    "documents": ("id",),
    "email_submissions": ("id",),
    "document_representations": ("id",),
    "transport_events": ("id",),
}


def _assert_equal_table(
    duck: duckdb.DuckDBPyConnection, pg: Any, table: str, key: tuple[str, ...]
) -> None:
    """``terminal49.<table>`` has the same column types and rows (but for when they were
    written) in the DuckDB file and in PostgreSQL, and some rows."""
    duck_types = dict(
        duck.execute(
            "SELECT column_name, data_type FROM duckdb_columns() "
            "WHERE schema_name = ? AND table_name = ?",
            [DATASET, table],
        ).fetchall()
    )
    with pg.cursor() as cur:
        cur.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s",
            [DATASET, table],
        )
        pg_types = {c: DUCKDB_NAMES.get(t, t) for c, t in cur.fetchall()}
    assert pg_types == duck_types, table
    columns = [c for c in duck_types if c not in WHEN]
    listed = ", ".join(f'"{c}"' for c in columns)
    order = ", ".join(f'"{k}"' for k in key)
    duck_rows = duck.execute(
        f'SELECT {listed} FROM "{DATASET}"."{table}" ORDER BY {order}'
    ).fetchall()
    with pg.cursor() as cur:
        cur.execute(f'SELECT {listed} FROM "{DATASET}"."{table}" ORDER BY {order}')
        pg_rows = cur.fetchall()
    json_columns = {i for i, c in enumerate(columns) if duck_types[c] == "JSON"}
    assert len(pg_rows) == len(duck_rows) > 0, table
    for mine, theirs in zip(duck_rows, pg_rows, strict=True):
        mine = tuple(
            json.loads(v) if i in json_columns and v is not None else v for i, v in enumerate(mine)
        )
        assert mine == tuple(theirs), table


# --- writers serialise across processes --------------------------------------------------------


def test_a_writer_waits_for_the_one_holding_the_warehouse(
    sandbox: SandboxThread, pg_database: str
) -> None:
    warehouse = Warehouse.parse(pg_database)
    lines: list[str] = []
    with writer_lock(warehouse, "webhook apply"):
        # held by this process, seen from another: a load in a subprocess gives up
        busy = _cli(
            "load",
            "--base-url",
            sandbox.base_url,
            "--warehouse",
            pg_database,
            "--wait",
            "1",
            env={
                "TERMINAL49_API_KEY": sandbox.api_key,
                "FREETIME_WORKDIR": os.environ["FREETIME_WORKDIR"],
            },
        )
    assert busy.returncode == 2
    error = busy.stderr.strip().splitlines()[-1]
    assert error.startswith("error: the warehouse is being written by the webhook apply (pid ")
    assert "Traceback" not in busy.stderr

    # held by another session for a second: the load waits, says so once, then runs
    holder = connect(warehouse, autocommit=True, application="freetime writer: documents sync")
    with holder.cursor() as cur:
        cur.execute("SELECT pg_advisory_lock(%s)", [WRITER_KEY])
    waited: list[float] = []

    def on_wait(line: str) -> None:  # the load has scanned and waits to publish
        lines.append(line)
        waited.append(time.monotonic())
        threading.Timer(1.0, holder.close).start()

    summary = run_load(warehouse, _api(sandbox), on_wait=on_wait, wait_seconds=30)
    assert time.monotonic() - waited[0] >= 0.9
    assert summary.rows["containers"] == 60
    assert lines == ["waiting for the documents sync (pid "] or (
        len(lines) == 1 and lines[0].startswith("waiting for the documents sync")
    )

    # within one process the lock is re-entrant (nested steps of one writer); not across
    with writer_lock(warehouse, "load"), writer_lock(warehouse, "load", wait_seconds=0):
        pass


def test_a_load_scanning_slowly_does_not_block_another_writers_publish(
    pg_database: str,
) -> None:
    warehouse = Warehouse.parse(pg_database)
    env = {"TERMINAL49_API_KEY": "", "FREETIME_WORKDIR": os.environ["FREETIME_WORKDIR"]}
    # every answer takes 2-6 s and the load asks one page at a time: its three pages (two of
    # containers, one of shipments) take over 6 s, the other writer's publish a moment
    with SandboxThread(containers=60, seed=47, clock=CLOCK, faults=SLOW) as slow:
        env["TERMINAL49_API_KEY"] = slow.api_key
        args = ["load", "--base-url", slow.base_url, "--warehouse", pg_database]
        base = {
            k: v for k, v in os.environ.items() if not k.startswith(("TERMINAL49_", "FREETIME_"))
        }
        load = subprocess.Popen(
            [sys.executable, "-m", "freetime_cli.main", *args, "--concurrency", "1"],
            cwd=REPO,
            env={**base, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _wait_until_scanning(slow, load)
            # another writer publishes at once while the load scans (it used to hold the lock)
            with writer_lock(warehouse, "webhook apply", wait_seconds=0):
                pass
            assert load.poll() is None, "the load ended first: the test proves nothing"
            out, err = load.communicate(timeout=300)
        finally:
            if load.poll() is None:
                load.kill()
    assert load.returncode == 0, err
    assert _rows(pg_database, "SELECT count(*) FROM terminal49.containers") == [(60,)]


#: every answer of the sandbox after 2-6 s
SLOW = "slow=1.0,slow_seconds=4"


def _wait_until_scanning(sb: SandboxThread, proc: subprocess.Popen[str]) -> None:
    """Until the sandbox has answered the process's first page (it then scans for long)."""
    deadline = time.monotonic() + 120
    while sb.stats()["requests"] < 1:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the load never asked for a page"
        time.sleep(0.2)


# --- faults ---------------------------------------------------------------------------------


def test_a_connection_dropped_in_the_publish_changes_nothing_and_the_next_run_publishes(
    sandbox: SandboxThread, pg_database: str, postgres_server: PostgresServer
) -> None:
    warehouse = Warehouse.parse(pg_database)
    run_load(warehouse, _api(sandbox))
    snapshot = "SELECT id, fetched_at FROM terminal49.containers ORDER BY id"
    before = _rows(pg_database, snapshot)
    loads_before = _rows(pg_database, "SELECT load_id FROM terminal49.freetime_loads")

    def drop_connection(cur: Any) -> None:
        # the publish has merged every table: end its session from outside, as a restarted
        # server or a lost network would
        pid = cur.connection.get_backend_pid()
        postgres_server.execute(f"SELECT pg_terminate_backend({pid})")

    client = Terminal49Client.for_api(_api(sandbox))
    scan = ScanInfo(kind="full", started_at=dt.datetime.now(dt.UTC))
    scan.complete_lists = ("containers", "shipments")
    source = terminal49_source(client, full_lists(), scan_info=scan.table)
    try:
        with pytest.raises(LoadFailed) as failed:
            write("load", source, warehouse, finish=drop_connection)
    finally:
        client.close()
    assert "changed nothing" in str(failed.value)
    assert warehouse.password and warehouse.password not in str(failed.value)
    assert _rows(pg_database, snapshot) == before
    assert _rows(pg_database, "SELECT load_id FROM terminal49.freetime_loads") == loads_before

    after = run_load(warehouse, _api(sandbox))  # publishes the staged load, then its own
    loads = _rows(pg_database, "SELECT load_id FROM terminal49.freetime_loads ORDER BY load_id")
    assert len(loads) == len(loads_before) + 2
    assert after.load_id == loads[-1][0]
    assert _rows(pg_database, snapshot) != before  # the newer fetches were published


# --- bad input: one line, exit 2, never the password ---------------------------------------------

SECRET = "s3cret-Never-Shown"


def _refused(url: str, *extra: str) -> str:
    done = _cli("load", "--sandbox", "--warehouse", url, *extra)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert SECRET not in done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_a_url_that_is_not_one_is_refused() -> None:
    line = _refused(f"postgresql://me:{SECRET}@db.example:port/freetime")
    assert "is not a PostgreSQL URL" in line and "postgresql://me:***@" in line


def test_a_wrong_password_is_refused(postgres_server: PostgresServer) -> None:
    line = _refused(postgres_server.url("postgres", "postgres", SECRET))
    assert "password authentication failed" in line


def test_an_unreachable_server_is_refused() -> None:
    line = _refused(f"postgresql://me:{SECRET}@127.0.0.1:{free_port()}/freetime")
    assert "cannot connect to the warehouse postgresql://me:***@127.0.0.1" in line
    assert "Connection refused" in line


def test_a_database_without_the_right_to_create_schemas_is_refused(
    postgres_server: PostgresServer,
) -> None:
    database = postgres_server.create_database()
    postgres_server.execute(
        f"DROP ROLE IF EXISTS reader; CREATE ROLE reader LOGIN PASSWORD '{SECRET}'"
    )
    postgres_server.execute(f'REVOKE ALL ON DATABASE "{database}" FROM PUBLIC')
    postgres_server.execute(f'GRANT CONNECT ON DATABASE "{database}" TO reader')
    line = _refused(postgres_server.url(database, "reader", SECRET))
    assert "the role reader may not create schemas" in line and "GRANT CREATE" in line


def test_risk_on_a_wrong_password_is_one_line(postgres_server: PostgresServer) -> None:
    url = postgres_server.url("postgres", "postgres", SECRET)
    done = _cli("risk", env={"FREETIME_WAREHOUSE": url})
    assert done.returncode == 2
    assert SECRET not in done.stdout + done.stderr and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "password authentication failed" in lines[0]
    assert lines[0].startswith("error: cannot connect to the warehouse postgresql://postgres:***@")
    assert "[libpq]" not in lines[0]


# --- where the password comes from ----------------------------------------------------------------


@pytest.fixture
def bare_url(postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """The superuser's URL without a password, with none of the other sources set."""
    for name in ("PGPASSWORD", "PGPASSFILE", "DESTINATION__POSTGRES__CREDENTIALS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", "/nonexistent")  # no ~/.pgpass of the machine's
    return f"postgresql://postgres@127.0.0.1:{postgres_server.port}/postgres"


def _password_used(url: str) -> str:
    con = connect(Warehouse.parse(url))
    try:
        return str(con.info.password)
    finally:
        con.close()


def test_the_password_comes_from_pgpassword(bare_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.pg import SUPERUSER_PASSWORD

    monkeypatch.setenv("PGPASSWORD", SUPERUSER_PASSWORD)
    assert _password_used(bare_url) == SUPERUSER_PASSWORD


def test_the_password_comes_from_a_pgpass_file(
    bare_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.pg import SUPERUSER_PASSWORD

    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"127.0.0.1:*:*:postgres:{SUPERUSER_PASSWORD}\n")
    pgpass.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    assert _password_used(bare_url) == SUPERUSER_PASSWORD


def test_the_password_comes_from_the_dlt_secret(
    bare_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.pg import SUPERUSER_PASSWORD

    monkeypatch.setenv(
        "DESTINATION__POSTGRES__CREDENTIALS",
        f"postgresql://postgres:{SUPERUSER_PASSWORD}@127.0.0.1/postgres",
    )
    assert _password_used(bare_url) == SUPERUSER_PASSWORD


def test_without_a_password_anywhere_the_error_says_so(bare_url: str) -> None:
    from pipelines.warehouse import WarehouseUnusable

    with pytest.raises(WarehouseUnusable, match="no password supplied"):
        connect(Warehouse.parse(bare_url))


def test_two_machines_loading_one_warehouse_share_the_keys_budget(
    pg_database: str, tmp_path: Path
) -> None:
    # two "machines": two processes with working folders of their own, one database; the API's
    # rule (a rolling window's budget shared, Retry-After honoured) in a 6 s window of 40, as in
    # tests/test_shared_budget.py, not a minute of 100
    limit, window = 40, 6
    with SandboxThread(
        containers=1000, seed=41, clock=CLOCK, rate_limit=limit, rate_window=window
    ) as sb:
        base = {
            k: v for k, v in os.environ.items() if not k.startswith(("TERMINAL49_", "FREETIME_"))
        }
        args = [sys.executable, "-m", "freetime_cli.main", "load", "--full"]
        args += ["--base-url", sb.base_url, "--warehouse", pg_database]
        procs = [
            subprocess.Popen(
                args,
                cwd=REPO,
                env={
                    **base,
                    "TERMINAL49_API_KEY": sb.api_key,
                    "TERMINAL49_RATE_LIMIT": str(limit),
                    "TERMINAL49_RATE_WINDOW_SECONDS": str(window),
                    "FREETIME_WORKDIR": str(tmp_path / f"machine{n}"),
                },
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(2)
        ]
        outs = [p.communicate(timeout=600) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        stats = sb.stats()
        assert stats["requests"] > limit  # together they needed more than a window's budget
        assert "429" not in stats["by_status"], stats
        truth = {c["id"] for c in sb.ground_truth()["containers"]}
    assert {r[0] for r in _rows(pg_database, "SELECT id FROM terminal49.containers")} == truth
    # the window is kept by key digest, never by the key
    states = _rows(pg_database, "SELECT key, state FROM terminal49.freetime_budget")
    assert len(states) == 1 and sb.api_key not in str(states)
