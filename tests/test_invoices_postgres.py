"""`freetime invoices` on a PostgreSQL warehouse: the same results as on DuckDB.

The walked boxes of ``tests/test_invoices.py`` (tests/history_walk.py) are copied, table by
table, from the walked DuckDB file into a PostgreSQL database of the shared server; risk is
published on both at 2030-02-01 with the same tariffs. The same hand-built invoices are imported
and audited on both through the CLI (``--duckdb`` / ``--warehouse``):

- the stored invoices, their lines and ``analytics.invoice_audit`` (and the view by month) hold
  equal rows, with the amounts in dispute worked out by hand in ``tests/test_invoices.py``;
- re-importing changes nothing and a corrected invoice is version 2, on both;
- bad input is one line per problem and stores nothing, as on DuckDB;
- the dispute package is the same HTML and CSV;
- the tool server (a read-only role, the official mcp client) answers ``audit_invoice`` and
  ``container_evidence`` as on DuckDB;
- the sync flow's audit task audits pending invoices on PostgreSQL.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import duckdb
import psycopg2
import pytest
from mcp import Client
from psycopg2.extras import Json, execute_values

from freetime_cli.main import app
from pipelines.analytics.publish import publish_risk
from tests.test_invoices import (
    BEFORE_FIRST_SEEN,
    BILLED_TWICE,
    CONTACT,
    DETENTION_OK,
    DETENTION_TIERS,
    EMCU,
    EMCU_DETENTION_FREE,
    HEADER,
    HOLD,
    HUSKY,
    TARIFFS,
    TGHU,
    line,
    run,
    runner,
)

# On the worker of the session's Prefect server (one of its tests runs the sync flow): a group
# of this module's own would start a second server there (tests/conftest.py, _xdist_group).
pytestmark = [pytest.mark.postgres, pytest.mark.xdist_group("prefect_harness")]

AS_OF = datetime(2030, 2, 1, tzinfo=UTC)
TODAY = "2030-02-01"
#: invoices that do not bill each other's days, with the amount each puts in dispute
INVOICES = [
    HOLD,  # T-1: 4 days under the terminal's unavailability, 940
    DETENTION_OK,  # L-1: correct, 0
    BILLED_TWICE,  # L-2: the last two detention days of L-1 again, 400
    line(  # T-3: before the extended LFD and past the rail departure, 880
        "T-3",
        HUSKY,
        "2030-01-20",
        TGHU,
        "demurrage,2030-01-13,2030-01-16,4,220,,880,USD",
        f"4,2030-01-09,2030-01-12,{CONTACT}",
    ),
    BEFORE_FIRST_SEEN,  # T-7: days before freetime first saw the box: unverified, 0
]
DISPUTED = {"T-1": 940.0, "L-1": 0.0, "L-2": 400.0, "T-3": 880.0, "T-7": 0.0}
FINDINGS = {
    "T-1": ["not_available"],
    "L-1": [],
    "L-2": ["overlap"],
    "T-3": ["lfd_extended", "after_out"],
    "T-7": ["unverified"],
}
READER_PASSWORD = "reader-Pass-Not-Shown"
#: DuckDB's type names PostgreSQL spells otherwise (the copy of the walked tables)
PG_TYPES = {"DOUBLE": "DOUBLE PRECISION", "JSON": "JSONB", "FLOAT": "REAL"}


@dataclass
class Both:
    duck: Path
    url: str
    folder: Path

    def duck_rows(self, sql: str) -> list[dict[str, Any]]:
        with duckdb.connect(str(self.duck), read_only=True) as con:
            con.execute("SET TimeZone = 'UTC'")
            cur = con.execute(sql)
            names = [d[0] for d in cur.description or []]
            return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    def pg_rows(self, sql: str) -> list[dict[str, Any]]:
        con = psycopg2.connect(self.url, options="-c timezone=UTC")
        try:
            with con.cursor() as cur:
                cur.execute(sql)
                names = [d[0] for d in cur.description or []]
                return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        finally:
            con.close()

    def assert_same(self, sql: str) -> list[dict[str, Any]]:
        """``sql`` gives equal rows on both (in its order); the rows."""
        duck, pg = self.duck_rows(sql), self.pg_rows(sql)
        assert len(pg) == len(duck), sql
        for p, d in zip(pg, duck, strict=True):
            assert p == d, (sql, {k: (p[k], d[k]) for k in d if p.get(k) != d[k]})
        return duck

    def both(self, *args: str) -> tuple[Any, Any]:
        """The CLI on the DuckDB file, then on PostgreSQL."""
        return (
            run(*args, "--duckdb", str(self.duck)),
            run(*args, "--warehouse", self.url),
        )


def copy_to_postgres(duck: Path, url: str) -> None:
    """Every table of ``terminal49`` in the DuckDB file, with its rows, into PostgreSQL."""
    with duckdb.connect(str(duck), read_only=True) as src:
        src.execute("SET TimeZone = 'UTC'")
        tables = [
            r[0]
            for r in src.execute(
                "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'terminal49'"
            ).fetchall()
        ]
        pg = psycopg2.connect(url, options="-c timezone=UTC")
        try:
            with pg.cursor() as cur:
                cur.execute("CREATE SCHEMA IF NOT EXISTS terminal49")
                for table in tables:
                    cols = src.execute(
                        "SELECT column_name, data_type FROM duckdb_columns() WHERE "
                        "schema_name = 'terminal49' AND table_name = ? ORDER BY column_index",
                        [table],
                    ).fetchall()
                    ddl = ", ".join(f'"{n}" {PG_TYPES.get(t, t)}' for n, t in cols)
                    cur.execute(f'CREATE TABLE terminal49."{table}" ({ddl})')
                    rows = src.execute(f'SELECT * FROM terminal49."{table}"').fetchall()
                    names = ", ".join(f'"{n}"' for n, _ in cols)
                    execute_values(
                        cur,
                        f'INSERT INTO terminal49."{table}" ({names}) VALUES %s',
                        [[Json(v) if isinstance(v, dict) else v for v in r] for r in rows],
                    )
            pg.commit()
        finally:
            pg.close()


@pytest.fixture(scope="module")
def both(
    walked: Any, postgres_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Both]:
    """The walked account in DuckDB and PostgreSQL, risk published, :data:`INVOICES` imported
    and audited on both."""
    folder = tmp_path_factory.mktemp("pginvoices")
    duck = folder / "w.duckdb"
    shutil.copy(walked.duckdb_path, duck)
    url = str(postgres_server.url(postgres_server.create_database()))
    copy_to_postgres(duck, url)
    tariffs = folder / "tariffs.csv"
    tariffs.write_text(TARIFFS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FREETIME_WORKDIR", str(folder / "work"))
        mp.delenv("FREETIME_WAREHOUSE", raising=False)
        publish_risk(duck, AS_OF, tariffs)
        publish_risk(url, AS_OF, tariffs)
        sheet = folder / "invoices.csv"
        sheet.write_text("\n".join([HEADER, *INVOICES]) + "\n")
        b = Both(duck, url, folder)
        for r in b.both("invoices", "import", str(sheet), "--as-of", TODAY):
            assert r.exit_code == 0, r.output
            assert "5 new, 0 corrected, 0 unchanged, 0 refused" in r.stderr
        for r in b.both("invoices", "audit", "--as-of", TODAY):
            assert r.exit_code == 0, r.output
            assert "5 invoice lines, 4 with findings, 2,220.00 USD in dispute" in r.stdout
        yield b


AUDIT = "SELECT * FROM analytics.invoice_audit ORDER BY issuer_name, invoice_number, line_number"


def test_the_same_invoices_give_equal_rows_and_types_on_both(both: Both) -> None:
    rows = both.assert_same(AUDIT)
    assert {r["invoice_number"]: r["disputed_amount"] for r in rows} == DISPUTED
    assert {r["invoice_number"]: [f["code"] for f in r["findings"]] for r in rows} == FINDINGS
    both.assert_same(
        "SELECT * FROM analytics.invoice_disputes_by_month ORDER BY issuer_name, invoice_month"
    )
    keys = "issuer_name, invoice_number, version"
    both.assert_same(f"SELECT * FROM terminal49.invoices ORDER BY {keys}")
    both.assert_same(f"SELECT * FROM terminal49.invoice_lines ORDER BY {keys}, line_number")
    # the same columns with the same types (PostgreSQL's names for DuckDB's)
    types = "SELECT table_name, column_name, data_type FROM information_schema.columns "
    where = "WHERE table_name IN ('invoices', 'invoice_lines', 'invoice_audit') ORDER BY 1, 2"
    duck = {(t, c): ty for t, c, ty in (r.values() for r in both.duck_rows(types + where))}
    pg = {(t, c): ty for t, c, ty in (r.values() for r in both.pg_rows(types + where))}
    assert duck.keys() == pg.keys()
    spelled = {
        "DOUBLE": "double precision",
        "TIMESTAMP WITH TIME ZONE": "timestamp with time zone",
        "VARCHAR": "character varying",
        "STRUCT(code VARCHAR, sentence VARCHAR)[]": "jsonb",
    }
    assert {k: spelled.get(v, v.lower()) for k, v in duck.items()} == pg


def test_reimport_changes_nothing_and_a_correction_is_version_2(both: Both) -> None:
    sheet = both.folder / "invoices.csv"
    for r in both.both("invoices", "import", str(sheet), "--as-of", TODAY):
        assert r.exit_code == 0 and "0 new, 0 corrected, 5 unchanged" in r.stderr, r.output
    corrected = both.folder / "corrected.csv"
    fixed = HOLD.replace(",2030-01-11,", ",2030-01-15,").replace(",6,,", ",2,,")
    corrected.write_text(f"{HEADER}\n{fixed.replace(',1510,', ',570,')}\n")
    for r in both.both("invoices", "import", str(corrected), "--as-of", TODAY):
        assert r.exit_code == 0 and "0 new, 1 corrected" in r.stderr, r.output
    versions = both.assert_same(
        "SELECT version, superseded_at IS NULL AS current FROM terminal49.invoices "
        "WHERE invoice_number = 'T-1' ORDER BY version"
    )
    assert [(v["version"], v["current"]) for v in versions] == [(1, False), (2, True)]
    for r in both.both("invoices", "audit", "--as-of", TODAY):
        assert r.exit_code == 0, r.output
    rows = both.assert_same(AUDIT)
    assert {r["invoice_number"]: r["disputed_amount"] for r in rows}["T-1"] == 0.0


def test_bad_input_is_one_line_per_problem_and_stores_nothing(both: Both) -> None:
    bad = both.folder / "bad.csv"
    wrong_box = line(
        "X-1",
        HUSKY,
        "2030-01-20",
        "ZZZU0000000,EGLV0003901303,USTIW",
        "demurrage,2030-01-11,2030-01-12,2,235,,470,USD",
        EMCU_DETENTION_FREE,
    )
    future = line(
        "X-2",
        HUSKY,
        "2030-03-20",
        EMCU,
        "demurrage,2030-03-01,2030-03-02,2,235,,470,USD",
        EMCU_DETENTION_FREE,
    )
    bad.write_text(f"{HEADER}\n{wrong_box}\n{future}\n")
    count = "SELECT count(*) AS n FROM terminal49.invoices"
    before = both.assert_same(count)
    duck, pg = both.both("invoices", "import", str(bad), "--as-of", TODAY)
    assert pg.exit_code == duck.exit_code == 2
    assert pg.stderr == duck.stderr and "Traceback" not in pg.output
    errors = [x for x in pg.stderr.splitlines() if x.startswith("error:")]
    assert any("unknown container ZZZU0000000" in e for e in errors), pg.stderr
    assert any("invoice_date 2030-03-20 is in the future" in e for e in errors), pg.stderr
    assert both.assert_same(count) == before
    for r in both.both("invoices", "dispute", "NOPE", "--out", str(both.folder / "n.html")):
        assert r.exit_code == 2 and "no invoice 'NOPE' imported" in r.stderr


def test_the_dispute_package_is_the_same_from_postgresql(both: Both) -> None:
    pages = []
    for where in ("duck", "pg", "setting"):
        out = both.folder / where / "T-3.html"
        flag = {"duck": ["--duckdb", str(both.duck)], "pg": ["--warehouse", both.url]}
        r = runner.invoke(
            app,
            ["invoices", "dispute", "T-3", "--out", str(out), *flag.get(where, [])],
            env={"FREETIME_WAREHOUSE": both.url} if where == "setting" else {},
        )
        assert r.exit_code == 0, r.output
        html = re.sub(r"Written by freetime on [^U]* UTC", "", out.read_text())
        pages.append((html, out.with_suffix(".csv").read_text()))
    assert pages[0] == pages[1] == pages[2]  # FREETIME_WAREHOUSE names PostgreSQL as well
    html, sheet = pages[1]
    assert "lfd_extended" in html and "after_out" in html
    # the LFD's extension, as freetime saw it: when, through which load
    assert "proof,1,lfd_extended,LFD (pickup_lfd_terminal),2030-01-12 -> 2030-01-15" in sheet


async def _tool_calls(target: Any, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    async with Client(target) as c:
        return [await c.call_tool(name, args) for name, args in calls]


def test_the_tool_server_audits_and_gives_evidence_as_on_duckdb(
    both: Both, postgres_server: Any
) -> None:
    from pipelines.config import Warehouse
    from pipelines.pg.reader import grant_reader
    from pipelines.toolserver.server import build_server

    role = "reader_" + uuid.uuid4().hex[:8]
    grant_reader(Warehouse.parse(both.url), role, READER_PASSWORD)
    database = both.url.rsplit("/", 1)[1]
    reader_url = str(postgres_server.url(database, user=role, password=READER_PASSWORD))
    todo = [
        ("audit_invoice", {"invoice": "T-3"}),
        ("audit_invoice", {"invoice": "NOPE"}),
        ("container_evidence", {"container": "EMCU1764628"}),
    ]
    answers = []
    for target in (both.duck, Warehouse.parse(reader_url)):
        mcp, reader = build_server(target)
        try:
            answers.append(anyio.run(_tool_calls, mcp, todo))
        finally:
            reader.close()
    duck, pg = answers
    for d, p in zip(duck, pg, strict=True):
        assert p.is_error == d.is_error, p.content
        assert p.structured_content == d.structured_content
    assert pg[0].structured_content["disputed_amount"] == 880.0
    assert "no invoice 'NOPE' imported" in pg[1].content[0].text
    assert "Pick up before (binding LFD)" in pg[2].structured_content["facts"]


def test_the_sync_flows_audit_step_runs_on_postgresql(both: Both, prefect_harness: Any) -> None:
    from prefect import flow

    from flows.tasks import audit_invoices
    from pipelines.invoices.store import pending_audit

    sheet = both.folder / "late.csv"
    sheet.write_text(
        HEADER
        + "\n"
        + line(
            "L-5",
            "Maersk,line",
            "2030-01-30",
            EMCU,
            f"detention,2030-01-21,2030-01-22,2,,{DETENTION_TIERS},300,USD",
            EMCU_DETENTION_FREE,
        )
        + "\n"
    )
    for r in both.both("invoices", "import", str(sheet), "--as-of", TODAY):
        assert r.exit_code == 0, r.output
    assert pending_audit(both.url) == 1

    @flow
    def audit_only(warehouse: str) -> Any:
        return audit_invoices(warehouse, AS_OF)

    summary = audit_only(both.url)
    assert summary is not None and pending_audit(both.url) == 0
    audit_only(str(both.duck))
    both.assert_same(AUDIT)


def test_an_import_waits_for_another_writer_of_the_database(
    both: Both, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer holds the writers' advisory lock (a session of another process, as a
    load on another machine would): the import waits, then gives up in one line."""
    from pipelines.pg.lock import WRITER_KEY

    monkeypatch.setenv("FREETIME_WRITER_WAIT", "1")
    other = psycopg2.connect(both.url)
    other.autocommit = True
    try:
        with other.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(%s)", [WRITER_KEY])
        r = run(
            "invoices",
            "import",
            str(both.folder / "invoices.csv"),
            "--warehouse",
            both.url,
            "--as-of",
            TODAY,
        )
    finally:
        other.close()
    assert r.exit_code == 2, r.output
    (error,) = r.stderr.strip().splitlines()
    assert error.startswith("error: the warehouse is being written by another writer")


def test_the_evidence_copy_is_taken_in_the_readers_snapshot(both: Both) -> None:
    """The dispute's timelines and the tool's evidence are copied in the snapshot of the
    transaction that read the audit: a history row committed in between is in neither."""
    from pipelines.config import Warehouse
    from pipelines.invoices.access import evidence_connection, reader

    warehouse = Warehouse.parse(both.url)
    count = "SELECT count(*) FROM terminal49.history WHERE field = 'test_only'"
    insert = (
        "INSERT INTO terminal49.history (entity, entity_id, field, observed_at, how) "
        "SELECT 'container', id, 'test_only', now(), 'full' FROM terminal49.containers "
        "WHERE number = 'TGHU9547300'"
    )
    other = psycopg2.connect(both.url)
    try:
        with reader(warehouse) as con:
            con.execute("SELECT count(*) FROM terminal49.invoices").fetchall()  # the snapshot
            with other.cursor() as cur:
                cur.execute(insert)
            other.commit()
            with evidence_connection(warehouse, ["TGHU9547300"], within=con) as shared:
                assert shared.execute(count).fetchall() == [(0,)]
        with evidence_connection(warehouse, ["TGHU9547300"]) as fresh:
            assert fresh.execute(count).fetchall() == [(1,)]
    finally:
        with other.cursor() as cur:
            cur.execute("DELETE FROM terminal49.history WHERE field = 'test_only'")
        other.commit()
        other.close()
