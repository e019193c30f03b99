"""The tool server on a PostgreSQL warehouse, driven by the official mcp client.

The same sandbox account is loaded into a DuckDB file and into PostgreSQL, with risk published
at the same instant; one ``freetime mcp serve`` process serves each. The PostgreSQL one reads the
live database as a role made by ``freetime warehouse grant-reader``:

- the tools give the same answers on both;
- the role cannot write: an INSERT through the SQL tool fails with PostgreSQL's reason, and
  the role itself is refused writes outside the server too; a role that can write is refused
  by the server at start;
- a runaway statement is stopped at the time limit, and the next call answers;
- a call during risk publishes sees the risk of one run or the other, whole.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import psycopg2
import pytest
from mcp import Client

from freetime_cli.mcp_cmd import serving
from pipelines.analytics import publish_risk
from pipelines.config import Warehouse
from pipelines.toolserver import queries
from pipelines.toolserver.pgread import PgReader

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[1]
CLOCK = "2026-11-20T12:00:00Z"
AS_OF = datetime.fromisoformat(CLOCK.replace("Z", "+00:00"))
#: the account: a sandbox of 120 containers of seed 49 at CLOCK, as test_postgres_risk loads
CONTAINERS = 120
READER_PASSWORD = "reader-Pass-Not-Shown"


@dataclass
class Both:
    duckdb: Path
    writer_url: str  # the superuser: the writer of the warehouse
    reader_url: str
    reader: str


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "freetime_cli.main", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **env},
        timeout=120,
    )


@pytest.fixture(scope="module")
def both(postgres_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Both]:
    from tests.pg import loaded_template

    folder = tmp_path_factory.mktemp("pgmcp")
    # the account of tests/test_postgres_risk*.py: loaded once per server, copied here
    template, twin = loaded_template(postgres_server, CONTAINERS, 49, CLOCK, duckdb_twin=True)
    assert twin is not None
    database = postgres_server.clone(template)
    writer_url = str(postgres_server.url(database))
    role = "reader_" + uuid.uuid4().hex[:8]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FREETIME_WORKDIR", str(folder / "work"))
        path = folder / "w.duckdb"
        shutil.copyfile(twin, path)
        publish_risk(path, as_of=AS_OF)
        publish_risk(writer_url, as_of=AS_OF)
        granted = _cli(
            "warehouse",
            "grant-reader",
            role,
            env={"FREETIME_WAREHOUSE": writer_url, "FREETIME_READER_PASSWORD": READER_PASSWORD},
        )
        assert granted.returncode == 0, granted.stderr
        assert READER_PASSWORD not in granted.stdout + granted.stderr
        reader_url = str(postgres_server.url(database, user=role, password=READER_PASSWORD))
        yield Both(path, writer_url, reader_url, role)


@pytest.fixture(scope="module")
def servers(both: Both) -> Iterator[tuple[str, str]]:
    with (
        serving(both.duckdb) as (duck, _),
        serving(None, env={"FREETIME_WAREHOUSE": both.reader_url}) as (pg, proc),
    ):
        yield duck + "/mcp", pg + "/mcp"


async def _calls(target: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    async with Client(target) as c:
        return [await c.call_tool(name, args) for name, args in calls]


def calls(target: str, todo: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    return anyio.run(_calls, target, todo)


def test_the_tools_answer_the_same_on_postgresql_as_on_duckdb(
    servers: tuple[str, str], both: Both
) -> None:
    import duckdb

    with duckdb.connect(str(both.duckdb), read_only=True) as con:
        numbers = [
            r[0]
            for r in con.execute(
                "SELECT number FROM terminal49.containers ORDER BY number LIMIT 3"
            ).fetchall()
        ]
        bol = con.execute(
            "SELECT bill_of_lading_number FROM terminal49.shipments "
            "WHERE bill_of_lading_number IS NOT NULL ORDER BY 1 LIMIT 1"
        ).fetchone()
    assert numbers and bol
    todo: list[tuple[str, dict[str, Any]]] = [
        ("containers_at_risk", {}),
        (
            "containers_at_risk",
            {"level": ["overdue", "due_today", "imminent", "watch"], "limit": 500},
        ),
        ("containers_at_risk", {"terminal": "a", "limit": 50}),
        ("lfd_calendar", {"days": 30}),
        ("search_container", {"query": numbers[0][:4]}),
        ("search_container", {"query": bol[0][:6]}),
        ("query_warehouse", {"sql": "SELECT count(*) AS n FROM terminal49.containers"}),
        *[("get_container", {"container": n}) for n in numbers],
        *[("summarize_containers", {"group_by": g}) for g in queries.GROUP_KEYS],
    ]
    duck, pg = servers
    on_duck, on_pg = calls(duck, todo), calls(pg, todo)
    for (name, args), a, b in zip(todo, on_duck, on_pg, strict=True):
        assert not a.is_error and not b.is_error, (name, a.content, b.content)
        assert _same(b.structured_content) == _same(a.structured_content), (name, args)
        assert b.content[0].text == a.content[0].text, (name, args)
    fresh = calls(pg, [("warehouse_freshness", {})])[0]
    assert fresh.structured_content["risk_as_of"] == "2026-11-20T12:00:00Z"
    assert fresh.structured_content["risk_containers"] == CONTAINERS


def _same(value: Any) -> Any:
    """Floats to 6 places (sums in another order), the rest as it is."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {k: _same(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_same(v) for v in value]
    return value


def test_the_lookups_of_the_tools_have_indexes(both: Both) -> None:
    con = psycopg2.connect(both.writer_url)
    try:
        with con.cursor() as cur:
            cur.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE 'freetime_%'")
            names = {r[0] for r in cur.fetchall()}
            # the risk row of a container: an index scan of the published slot (the view's
            # other slot is never scanned)
            cur.execute("SET enable_seqscan = off")
            cur.execute(
                "EXPLAIN (ANALYZE, COSTS off, TIMING off, SUMMARY off) "
                "SELECT * FROM analytics.demurrage_risk WHERE container_id = 'x'"
            )
            plan = "\n".join(r[0] for r in cur.fetchall())
    finally:
        con.close()
    assert {
        "freetime_containers_number",
        "freetime_containers_id",
        "freetime_container_holds_container_id",
    } <= names
    assert "Seq Scan" not in plan.replace("Seq Scan on published", "")
    assert plan.count("Index Scan") == 2 and "(never executed)" in plan, plan


def test_the_servers_role_cannot_write(servers: tuple[str, str], both: Both) -> None:
    _, pg = servers
    insert, two, allowed = calls(
        pg,
        [
            ("query_warehouse", {"sql": "INSERT INTO terminal49.containers (id) VALUES ('x')"}),
            (
                "query_warehouse",
                {"sql": "SELECT 1; DELETE FROM analytics.demurrage_risk"},
            ),
            ("query_warehouse", {"sql": "SELECT count(*) FROM analytics.demurrage_risk"}),
        ],
    )
    assert insert.is_error
    assert "cannot execute INSERT in a read-only transaction" in insert.content[0].text
    assert two.is_error and "one statement per call" in two.content[0].text
    assert allowed.structured_content["rows"] == [[CONTAINERS]]
    # the role itself, outside the server's read-only transactions, may only read
    con = psycopg2.connect(both.reader_url)
    con.autocommit = True
    try:
        with con.cursor() as cur:
            with pytest.raises(psycopg2.errors.ReadOnlySqlTransaction):  # the role's default
                cur.execute("INSERT INTO terminal49.containers (id) VALUES ('x')")
            cur.execute("SET default_transaction_read_only = off")
            with pytest.raises(psycopg2.errors.InsufficientPrivilege, match="permission denied"):
                cur.execute("INSERT INTO terminal49.containers (id) VALUES ('x')")
    finally:
        con.close()
    # the warehouse is unchanged
    con = psycopg2.connect(both.writer_url)
    try:
        with con.cursor() as cur:
            cur.execute("SELECT count(*) FROM terminal49.containers WHERE id = 'x'")
            assert cur.fetchone() == (0,)
    finally:
        con.close()


def test_a_role_that_can_write_is_refused_in_one_line(both: Both) -> None:
    done = _cli("mcp", "serve", "--port", "1", env={"FREETIME_WAREHOUSE": both.writer_url})
    assert done.returncode == 2
    assert "can only read" in done.stderr and "grant-reader" in done.stderr
    assert "superpass" not in done.stderr and "Traceback" not in done.stderr
    given_twice = _cli(
        "mcp", "serve", "--warehouse", both.reader_url, "--duckdb", str(both.duckdb), env={}
    )
    assert given_twice.returncode == 2 and "give the warehouse once" in given_twice.stderr


def test_a_runaway_statement_stops_at_the_limit(servers: tuple[str, str]) -> None:
    _, pg = servers

    async def run() -> tuple[Any, float, Any]:
        async with Client(pg) as c:
            started = time.monotonic()
            slow = await c.call_tool("query_warehouse", {"sql": "SELECT pg_sleep(60)"})
            took = time.monotonic() - started
            after = await c.call_tool("containers_at_risk", {"limit": 1})
            return slow, took, after

    slow, took, after = anyio.run(run)
    assert slow.is_error and "ran longer than 10s and was stopped" in slow.content[0].text
    assert 9 < took < 20
    assert not after.is_error


def test_sessions_the_server_lost_are_replaced(servers: tuple[str, str], both: Both) -> None:
    _, pg = servers
    assert not calls(pg, [("containers_at_risk", {"limit": 1})])[0].is_error
    con = psycopg2.connect(both.writer_url)
    con.autocommit = True
    try:
        with con.cursor() as cur:  # as a server restart would: every session of the server ends
            cur.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'freetime tool server'"
            )
            ended = cur.fetchone()
    finally:
        con.close()
    assert ended and ended[0] >= 1
    again = calls(pg, [("containers_at_risk", {"limit": 1})])[0]
    assert not again.is_error, again.content


def test_a_call_during_risk_publishes_sees_one_run_whole(both: Both) -> None:
    later = AS_OF + timedelta(days=3)
    reader = PgReader(Warehouse.parse(both.reader_url), timeout_seconds=30)
    try:

        def summary() -> dict[str, Any]:
            with reader.snapshot() as view:
                return queries.summarize_containers(view, "risk_level")

        expected = {}
        for at in (AS_OF, later):
            publish_risk(both.writer_url, as_of=at)
            got = summary()
            expected[got["as_of"]] = got
        assert len(expected) == 2 and len({str(v["totals"]) for v in expected.values()}) == 2

        stop = threading.Event()
        errors: list[BaseException] = []

        def publish() -> None:
            try:
                while not stop.is_set():
                    for at in (AS_OF, later):
                        publish_risk(both.writer_url, as_of=at)
            except BaseException as exc:
                errors.append(exc)

        writer = threading.Thread(target=publish)
        writer.start()
        seen = 0
        try:
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                got = summary()
                assert got == expected[got["as_of"]]
                seen += 1
        finally:
            stop.set()
            writer.join(60)
        assert not errors, errors
        assert seen > 5
    finally:
        reader.close()
        publish_risk(both.writer_url, as_of=AS_OF)
