"""The tool server driven by the official mcp client, over streamable HTTP and stdio, against
a warehouse loaded from the sandbox."""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import duckdb
import pytest
from conftest import PUBLISHED_AS_OF
from mcp import Client, StdioServerParameters

from pipelines.warehouse import connect, writing
from tests.mcp_helpers import REPO, mcp_server

pytestmark = pytest.mark.sandbox

CLOCK = PUBLISHED_AS_OF
TOOLS = {
    "containers_at_risk",
    "get_container",
    "summarize_containers",
    "lfd_calendar",
    "search_container",
    "warehouse_freshness",
    "query_warehouse",
    "container_evidence",
    "audit_invoice",
}


@pytest.fixture(scope="module")
def warehouse(published_warehouse: Path) -> Path:
    """The session's published warehouse (risk as of :data:`CLOCK`): read only; the tests that
    write copy it first."""
    return published_warehouse


@pytest.fixture(scope="module")
def server(warehouse: Path) -> Iterator[str]:
    with mcp_server(warehouse) as base:
        yield base + "/mcp"


def _risk(db: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


async def _call(target: Any, name: str, args: dict[str, Any]) -> Any:
    async with Client(target) as c:
        return await c.call_tool(name, args)


def call(target: Any, name: str, args: dict[str, Any] | None = None) -> Any:
    return anyio.run(_call, target, name, args or {})


def test_lists_tools_resources_prompts(server: str) -> None:
    async def run() -> tuple[Any, Any, Any, str]:
        async with Client(server) as c:
            tools = await c.list_tools()
            res = await c.list_resources()
            prompts = await c.list_prompts()
            schema = await c.read_resource("freetime://schema")
            return tools, res, prompts, schema.contents[0].text  # type: ignore[union-attr]

    tools, res, prompts, schema = anyio.run(run)
    assert {t.name for t in tools.tools} == TOOLS
    assert all(t.input_schema and t.output_schema for t in tools.tools)
    assert {str(r.uri) for r in res.resources} == {"freetime://rules/risk", "freetime://schema"}
    assert {p.name for p in prompts.prompts} == {"check_demurrage", "plan_pickups_today"}
    assert "terminal49.containers" in schema and "Container number" in schema


def test_containers_at_risk_equals_the_risk_table(server: str, warehouse: Path) -> None:
    want = _risk(
        warehouse,
        "SELECT container_number FROM analytics.at_risk_containers ORDER BY urgency_rank LIMIT 10",
    )
    r = call(server, "containers_at_risk", {"limit": 10})
    assert not r.is_error
    got = r.structured_content
    assert [c["container_number"] for c in got["containers"]] == [w[0] for w in want]
    total = _risk(warehouse, "SELECT count(*) FROM analytics.at_risk_containers")[0][0]
    assert got["matching"] == total and r.content[0].text.startswith(f"{total} containers")
    port = got["containers"][0]["port_of_discharge_locode"]
    only = call(server, "containers_at_risk", {"port": port, "level": ["overdue"], "limit": 500})
    n = _risk(
        warehouse,
        "SELECT count(*) FROM analytics.demurrage_risk WHERE risk_level = "
        "'overdue' AND (port_of_discharge_locode = ? OR destination_locode = ?)",
        [port, port],
    )[0][0]
    assert only.structured_content["matching"] == n
    assert {c["risk_level"] for c in only.structured_content["containers"]} <= {"overdue"}


def test_get_container_gives_the_risk_tables_columns(server: str, warehouse: Path) -> None:
    """A person's questions about one box (as the at-risk list's columns), not its ~90 wire
    attributes: those stay one query_warehouse away."""
    from pipelines.toolserver.queries import RISK_LIST_COLUMNS

    cid, number, level, lfd, source, days, projected, line = _risk(
        warehouse,
        "SELECT container_id, container_number, risk_level, lfd_date, lfd_source, days_to_lfd, "
        "projected_demurrage, lfd_line FROM analytics.demurrage_risk WHERE container_id IN "
        "(SELECT container_id FROM terminal49.container_holds) LIMIT 1",
    )[0]
    by_number = call(server, "get_container", {"container": number.lower()})
    by_id = call(server, "get_container", {"container": cid}).structured_content
    got = by_number.structured_content
    assert got == by_id
    assert got["risk_level"] == level and got["days_to_lfd"] == days
    assert got["lfd_date"] == (lfd.isoformat() if lfd else None) and got["lfd_source"] == source
    assert got["projected_demurrage"] == projected
    assert got["lfds"]["line"] == (line.isoformat() if line else None)
    assert set(RISK_LIST_COLUMNS) - {"urgency_rank"} <= set(got)
    assert by_number.content[0].text.startswith(f"{number}: {level}, binding LFD")
    holds = _risk(
        warehouse,
        "SELECT count(*) FROM terminal49.container_holds WHERE container_id = ?",
        [cid],
    )[0][0]
    assert len(got["holds"]) == holds > 0 and set(got["holds"][0]) <= {
        "name",
        "status",
        "description",
    }
    # no wire copies: far fewer fields than the containers row, none of its raw attributes
    n_attributes = _risk(
        warehouse,
        "SELECT count(DISTINCT column_name) FROM information_schema.columns "
        "WHERE table_schema = 'terminal49' AND table_name = 'containers'",
    )[0][0]
    assert n_attributes > 60 and len(got) < 40
    for wire in ("attributes", "shipment", "pod_terminal_id", "import_deadlines", "_dlt_load_id"):
        assert wire not in got
    # the rest is one query away, and the query given works
    sql = got["more"].split("query_warehouse with ", 1)[1].split(" (", 1)[0]
    rows = call(server, "query_warehouse", {"sql": sql}).structured_content
    assert rows["row_count"] == 1 and rows["rows"][0][rows["columns"].index("number")] == number
    assert len(rows["columns"]) == n_attributes
    missing = call(server, "get_container", {"container": "NOPE0000000"})
    assert missing.is_error and "no container" in missing.content[0].text


def test_summary_calendar_search_freshness(server: str, warehouse: Path) -> None:
    s = call(server, "summarize_containers", {"group_by": "risk_level"}).structured_content
    counts = dict(
        _risk(
            warehouse,
            "SELECT risk_level, count(*) FROM analytics.demurrage_risk "
            "WHERE risk_level <> 'done' GROUP BY 1",
        )
    )
    assert {g["risk_level"]: g["containers"] for g in s["groups"] if g["containers"]} == counts
    cal = call(server, "lfd_calendar", {"days": 5}).structured_content
    assert len(cal["days"]) == 5 and cal["days"][0]["lfd_date"] == "2026-11-20"
    due = _risk(
        warehouse, "SELECT count(*) FROM analytics.demurrage_risk WHERE risk_level = 'due_today'"
    )[0][0]
    assert cal["days"][0]["boxes"] == due
    number, bl = _risk(
        warehouse,
        "SELECT c.number, s.bill_of_lading_number FROM "
        "terminal49.containers c JOIN terminal49.shipments s ON "
        "s.id = c.shipment_id LIMIT 1",
    )[0]
    found = call(server, "search_container", {"query": number[:8].lower()}).structured_content
    assert number in {c["container_number"] for c in found["containers"]}
    by_bl = call(server, "search_container", {"query": bl}).structured_content
    assert by_bl["containers"] and all(
        c["bill_of_lading_number"] == bl for c in by_bl["containers"]
    )
    fresh = call(server, "warehouse_freshness").structured_content
    assert fresh["risk_as_of"] == CLOCK and fresh["source"] == "terminal49.freetime_loads"
    assert fresh["last_full_load"]["kind"] == "full" and fresh["last_incremental_load"] is None


def test_container_evidence_is_the_evidence_command_as_a_tool(server: str, warehouse: Path) -> None:
    number = _risk(
        warehouse,
        "SELECT container_number FROM analytics.demurrage_risk WHERE lfd_date IS NOT NULL LIMIT 1",
    )[0][0]
    out = call(server, "container_evidence", {"container": number}).structured_content
    assert out["facts"]["Container"] == number
    assert out["csv"].startswith("section,item,value")
    missing = call(server, "container_evidence", {"container": "NOPE0000000"})
    assert missing.is_error


def test_search_by_reference_number(server: str, warehouse: Path) -> None:
    cid, ref = _risk(
        warehouse,
        "SELECT id, CAST(ref_numbers AS VARCHAR[])[1] FROM "
        "terminal49.containers WHERE len(CAST(ref_numbers AS "
        "VARCHAR[])) > 0 LIMIT 1",
    )[0]
    want = {
        r[0]
        for r in _risk(
            warehouse,
            "SELECT c.id FROM terminal49.containers c LEFT JOIN terminal49.shipments s "
            "ON s.id = c.shipment_id WHERE list_contains(CAST(c.ref_numbers AS "
            "VARCHAR[]), ?) OR list_contains(CAST(s.ref_numbers AS VARCHAR[]), ?)",
            [ref, ref],
        )
    }
    found = call(server, "search_container", {"query": ref.lower(), "limit": 200})
    hits = {c["container_id"]: c for c in found.structured_content["containers"]}
    assert cid in hits and want <= set(hits)
    assert hits[cid]["matched_on"] == "reference_number"
    assert ref in hits[cid]["matching_reference_numbers"]
    prefix = call(server, "search_container", {"query": ref[:-1], "limit": 200})
    assert cid in {c["container_id"] for c in prefix.structured_content["containers"]}
    none = call(server, "search_container", {"query": "ZZZZ-NOTHING"}).structured_content
    assert none["returned"] == 0 and none["containers"] == []


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_csv('/etc/passwd')",
        "COPY (SELECT 1) TO '/tmp/freetime-x.csv'",
        "ATTACH '/tmp/freetime-x.duckdb'",
        "INSTALL httpfs",
        "LOAD httpfs",
        "PRAGMA version",
        "SET threads = 1",
        "SELECT 1; SELECT 2",
        "SELECT * FROM read_text('/etc/hostname')",
        "CREATE TABLE x AS SELECT 1",
        "DELETE FROM terminal49.containers",
    ],
)
def test_sql_tool_refuses(server: str, sql: str) -> None:
    r = call(server, "query_warehouse", {"sql": sql})
    assert r.is_error
    text = r.content[0].text
    assert "Traceback" not in text and (
        "not" in text or "one statement" in text or "disabled" in text
    )


def test_sql_tool_caps_rows_and_answers(server: str, warehouse: Path) -> None:
    r = call(server, "query_warehouse", {"sql": "SELECT * FROM range(5000)"})
    assert not r.is_error and r.structured_content["row_count"] == 1000
    assert r.structured_content["truncated"] is True
    n = call(
        server, "query_warehouse", {"sql": "SELECT count(*) AS n FROM analytics.demurrage_risk"}
    ).structured_content
    assert n["rows"] == [[_risk(warehouse, "SELECT count(*) FROM analytics.demurrage_risk")[0][0]]]
    bad = call(server, "query_warehouse", {"sql": "SELECT nope FROM nowhere"})
    assert bad.is_error and "failed" in bad.content[0].text


def test_stdio(warehouse: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "freetime_cli.main", "mcp", "stdio", "--duckdb", str(warehouse)],
        cwd=str(REPO),
    )

    async def run() -> tuple[set[str], Any]:
        async with Client(params) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            return names, await c.call_tool("containers_at_risk", {"limit": 3})

    names, r = anyio.run(run)
    assert names == TOOLS
    want = _risk(
        warehouse,
        "SELECT container_number FROM analytics.at_risk_containers ORDER BY urgency_rank LIMIT 3",
    )
    assert [c["container_number"] for c in r.structured_content["containers"]] == [
        w[0] for w in want
    ]


def test_calls_during_a_write_answer_and_never_hold_the_writer(
    warehouse: Path, tmp_path: Path
) -> None:
    db = tmp_path / "w.duckdb"
    shutil.copy(warehouse, db)
    with mcp_server(db) as base:
        url = base + "/mcp"
        before = call(url, "containers_at_risk", {"limit": 1}).structured_content
        assert before["matching"] > 0  # the server has its snapshot
        stop = threading.Event()
        results: list[bool] = []

        def hammer() -> None:
            while not stop.is_set():
                results.append(call(url, "containers_at_risk", {"limit": 5}).is_error)

        t = threading.Thread(target=hammer)
        t.start()
        try:
            time.sleep(0.5)
            # A writer under a steady stream of calls gets the file at its first try ...
            con = connect(db, read_only=False, retry_seconds=1.0)
            con.execute("CREATE TABLE analytics.marker AS SELECT 1 AS x")
            con.execute(
                "DELETE FROM analytics.demurrage_risk WHERE container_number = ?",
                [before["containers"][0]["container_number"]],
            )
            n = len(results)
            time.sleep(1.0)  # ... and holds it while the calls keep being answered
            con.close()
            time.sleep(1.0)
        finally:
            stop.set()
            t.join()
        assert len(results) > n and not any(results)
        # After the write the server answers from the new data.
        deadline = time.monotonic() + 10
        while True:
            r = call(url, "query_warehouse", {"sql": "SELECT x FROM analytics.marker"})
            if not r.is_error or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert r.structured_content["rows"] == [[1]]
        # ... for the questions asked before too (no answer outlives its data).
        after = call(url, "containers_at_risk", {"limit": 1}).structured_content
        assert after["matching"] == before["matching"] - 1
        assert (
            after["containers"][0]["container_number"]
            != (before["containers"][0]["container_number"])
        )


def test_first_call_during_a_write_says_retry(warehouse: Path, tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    shutil.copy(warehouse, db)
    with mcp_server(db) as base, writing(db):
        r = call(base + "/mcp", "warehouse_freshness")
    assert r.is_error and "being written, retry in a few seconds" in r.content[0].text


def test_a_killed_server_leaves_no_copy_behind_the_next_one(
    warehouse: Path, tmp_path: Path
) -> None:
    """A server killed with SIGKILL cannot delete its copy of the warehouse; the next server
    deletes the copies of servers that are gone, and keeps its own."""
    from freetime_cli.mcp_cmd import serving

    env = {"TMPDIR": str(tmp_path)}
    with serving(warehouse, env=env) as (base, proc):
        call(base + "/mcp", "warehouse_freshness")
        orphaned = list(tmp_path.glob("freetime-mcp-*"))
        assert len(orphaned) == 1 and any(orphaned[0].rglob("*.duckdb"))
        proc.kill()
        proc.wait()
    assert orphaned[0].exists()
    with serving(warehouse, env=env) as (base, proc):
        call(base + "/mcp", "warehouse_freshness")
        left = list(tmp_path.glob("freetime-mcp-*"))
        assert not orphaned[0].exists()
        assert [p.name.startswith(f"freetime-mcp-{proc.pid}-") for p in left] == [True]


def test_a_runaway_statement_stops_at_the_limit_and_the_next_one_answers(
    tmp_path: Path,
) -> None:
    # One scalar call over large strings checks for DuckDB's interrupt only when it returns:
    # the limit must stop the work itself, not only the wait for it.
    from pipelines.toolserver.server import build_server

    db = tmp_path / "freetime.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE SCHEMA terminal49; CREATE TABLE terminal49.t AS SELECT 42 AS x")
    mcp, reader = build_server(db, sql_timeout=1.0)
    runaway = "SELECT levenshtein(repeat('a', 100000), repeat('b', 100000)) AS d"

    async def run() -> tuple[Any, float, float, Any, float]:
        async with Client(mcp) as c:
            start = time.monotonic()
            slow = await c.call_tool("query_warehouse", {"sql": runaway})
            answered = time.monotonic()
            cpu = time.process_time()
            await anyio.sleep(1.5)
            busy = time.process_time() - cpu
            quick = await c.call_tool("query_warehouse", {"sql": "SELECT x FROM terminal49.t"})
            return slow, answered - start, busy, quick, time.monotonic() - answered - 1.5

    try:
        slow, slow_seconds, busy, quick, quick_seconds = anyio.run(run)
    finally:
        reader.close()
    assert slow.is_error and "longer than 1s" in slow.content[0].text
    assert slow_seconds < 5
    assert busy < 0.5  # nothing of the runaway statement still runs here
    assert not quick.is_error and quick.structured_content["rows"] == [[42]]
    assert quick_seconds < 5


def test_audit_invoice_is_the_audit_command_as_a_tool(warehouse: Path, tmp_path: Path) -> None:
    """An invoice billing the LFD and the next two days of a box: the tool answers what
    ``freetime invoices audit`` published for it."""
    import datetime as dt

    from pipelines.invoices.audit import run_audit
    from pipelines.invoices.schema import Invoice, InvoiceLine
    from pipelines.invoices.store import import_invoices

    db = tmp_path / "w.duckdb"
    shutil.copy(warehouse, db)
    number, lfd, rate = _risk(
        db,
        "SELECT container_number, lfd_date, min(rate) FROM analytics.charge_days "
        "WHERE party = 'terminal' AND day_number <= 2 AND rate IS NOT NULL "
        "GROUP BY ALL HAVING count(*) = 2 ORDER BY container_number LIMIT 1",
    )[0]
    now = dt.datetime.fromisoformat(CLOCK.replace("Z", "+00:00"))
    line = InvoiceLine(number, "demurrage", lfd, lfd + dt.timedelta(days=2), 3, 3 * rate, rate)
    invoice = Invoice("INV-7", "Pier T", "terminal", now.date(), "USD", [line], source="test")
    assert import_invoices(db, [invoice], today=now.date(), now=now).new == ["INV-7"]
    run_audit(db, now)
    (published,) = _risk(
        db,
        "SELECT computed_amount, disputed_amount, [f.code FOR f IN findings] "
        "FROM analytics.invoice_audit",
    )
    assert "free_time" in published[2]
    with mcp_server(db) as base:
        out = call(base + "/mcp", "audit_invoice", {"invoice": "INV-7"})
        assert not out.is_error
        data = out.structured_content
        (row,) = data["lines"]
        assert (row["computed_amount"], row["disputed_amount"]) == published[:2]
        assert [f["code"] for f in row["findings"]] == published[2]
        assert data["dispute_by"] == (now.date() + dt.timedelta(days=30)).isoformat()
        missing = call(base + "/mcp", "audit_invoice", {"invoice": "NOPE"})
        assert missing.is_error and "no invoice 'NOPE' imported" in missing.content[0].text
