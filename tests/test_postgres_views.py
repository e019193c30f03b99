"""The same sandbox account in DuckDB and in PostgreSQL: the risk run publishes the same charges,
views and alerts on both, and every SQL query of the README and docs/ answers the same."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import psycopg2
import pytest

from pipelines.analytics import publish_risk
from pipelines.config import ApiSettings
from sandbox.process import SandboxProcess

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[1]
CLOCK = "2026-11-20T12:00:00Z"
AS_OF = datetime.fromisoformat(CLOCK.replace("Z", "+00:00"))
LATER = AS_OF + timedelta(days=3)

TABLES = ("analytics.charges", "analytics.charge_days")
VIEWS = (
    "analytics.at_risk_containers",
    "analytics.exposure_by_terminal",
    "analytics.exposure_by_carrier",
    "analytics.lfd_calendar",
    "analytics.containers_wide",
    "terminal49.lfd_changes",
    "terminal49.charged_days",
    "terminal49.free_time_used",
    "terminal49.eta_reliability",
)
#: list columns (the others holding lists are JSON: text on DuckDB, parsed by psycopg2)
PLAIN_LISTS = {"blocking_holds", "reference_numbers"}
#: when each warehouse fetched the rows (two loads, two instants): not compared
LOADED_AT = {"updated_at", "observed_at", "first_seen_at", "first_available_at"}


def documented_queries() -> list[tuple[str, str]]:
    """``(where, query)`` of every SELECT in a ```sql block of the README and docs/*.md."""
    out = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for block in re.findall(r"```sql\n(.*?)```", path.read_text(), flags=re.S):
            for statement in block.split(";"):
                lines = [x for x in statement.splitlines() if not x.strip().startswith("--")]
                sql = "\n".join(lines).strip()
                if sql.upper().startswith(("SELECT", "WITH")):
                    out.append((path.name, sql))
    return out


class Both:
    """The DuckDB file and the PostgreSQL database holding the same account."""

    def __init__(self, duck: Path, url: str) -> None:
        self.duck, self.url = duck, url

    def duck_rows(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        with duckdb.connect(str(self.duck), read_only=True) as con:
            con.execute("SET TimeZone = 'UTC'")
            cur = con.execute(sql)
            return [d[0] for d in cur.description or []], cur.fetchall()

    def pg_rows(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        con = psycopg2.connect(self.url, options="-c timezone=UTC")
        try:
            with con.cursor() as cur:
                cur.execute(sql)
                return [d[0] for d in cur.description or []], list(cur.fetchall())
        finally:
            con.close()


def _whole(value: Any) -> Any:
    """JSON with whole floats as ints (DuckDB writes ``235.0``, PostgreSQL ``235``)."""
    if isinstance(value, list):
        return [_whole(v) for v in value]
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _value(column: str, value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "[{" and value[-1:] in "]}":
        value = json.loads(value)  # JSON text: the same JSON, spaced otherwise on PostgreSQL
    if isinstance(value, list | dict) and column not in PLAIN_LISTS:
        return json.dumps(_whole(value), sort_keys=True)
    if column in LOADED_AT:
        return None
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, list):
        return tuple(value)
    return value


def _same(both: Both, sql: str) -> int:
    """Assert ``sql`` returns the same columns and rows on both (any order); how many rows."""
    duck_cols, duck = both.duck_rows(sql)
    pg_cols, pg = both.pg_rows(sql)
    assert pg_cols == duck_cols, sql
    norm = lambda rows: sorted(  # noqa: E731
        (tuple(_value(c, v) for c, v in zip(duck_cols, r, strict=True)) for r in rows), key=repr
    )
    got, expected = norm(pg), norm(duck)
    assert len(got) == len(expected), sql
    for g, e in zip(got, expected, strict=True):
        differ = {c: (x, y) for c, x, y in zip(duck_cols, g, e, strict=True) if x != y}
        assert not differ, (sql, sorted(differ), differ)
    return len(expected)


@pytest.fixture(scope="module")
def both(postgres_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Both]:
    from pipelines.load import run_load

    tmp = tmp_path_factory.mktemp("views")
    url = str(postgres_server.url(postgres_server.create_database()))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FREETIME_WORKDIR", str(tmp / "work"))
        path = tmp / "w.duckdb"
        with SandboxProcess(containers=120, seed=49, clock=CLOCK) as sb:
            api = ApiSettings(
                base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100000
            )
            run_load(path, api)
            run_load(url, api)
        for as_of in (AS_OF, LATER):  # the second run has a previous one: alerts
            publish_risk(path, as_of=as_of)
            publish_risk(url, as_of=as_of)
        yield Both(path, url)


def test_the_engines_tables_are_the_same_on_both(both: Both) -> None:
    for table in TABLES:
        assert _same(both, f"SELECT * FROM {table}") > 0, table


def test_every_view_has_the_same_columns_types_and_rows(both: Both) -> None:
    for view in VIEWS:
        _same(both, f"SELECT * FROM {view}")
    schema, name = "analytics", "containers_wide"
    types = {
        "duck": both.duck_rows(
            "SELECT column_name, data_type FROM information_schema.columns "
            f"WHERE table_schema = '{schema}' AND table_name = '{name}' ORDER BY ordinal_position"
        )[1],
        "pg": both.pg_rows(
            "SELECT column_name, data_type FROM information_schema.columns "
            f"WHERE table_schema = '{schema}' AND table_name = '{name}' ORDER BY ordinal_position"
        )[1],
    }
    assert [c for c, _ in types["pg"]] == [c for c, _ in types["duck"]]
    pg_types = dict(types["pg"])
    assert pg_types["pod_last_free_day_on"] == "date"  # LFDs are dates on both
    assert pg_types["pod_discharged_at"] == "timestamp with time zone"
    assert _same(both, "SELECT * FROM analytics.lfd_calendar") == 14


def test_the_alerts_of_a_run_are_the_same_on_both(both: Both) -> None:
    columns = (
        "seq, alert_key, container_id, kind, value, detail, risk_level, previous_level, "
        "lfd_date, previous_lfd, blocking_holds, reference_numbers, projected_demurrage, as_of"
    )
    assert _same(both, f"SELECT {columns} FROM analytics.alert_outbox") > 0


def test_every_documented_query_answers_the_same_on_both(both: Both) -> None:
    queries = documented_queries()
    where = {w for w, _ in queries}
    assert {"README.md", "history.md", "lfd-dates.md"} <= where
    assert len(queries) >= 11
    answered = 0
    for _, sql in queries:
        answered += _same(both, sql) > 0
    assert answered >= 8  # most of them return rows on this account


def _csv_rows(path: Path, sections: set[str]) -> list[tuple[str, ...]]:
    import csv

    with path.open() as fh:
        # section, item, value, how: the instants a row was observed at differ between loads
        return [(r[0], r[1], r[2], r[4]) for r in csv.reader(fh) if r[0] in sections]


def test_report_and_evidence_run_on_postgresql_with_duckdbs_answers(
    both: Both, tmp_path: Path
) -> None:
    import os
    import subprocess
    import sys

    from pipelines.history.evidence import write_evidence

    numbers = [
        r[0]
        for r in both.duck_rows(
            "SELECT container_number, count(*) AS n FROM terminal49.charged_days "
            "GROUP BY container_number ORDER BY n DESC, container_number LIMIT 2"
        )[1]
    ]
    assert numbers
    on_duck = write_evidence(both.duck, numbers, tmp_path / "duck" / "box.html")
    on_pg = write_evidence(both.url, numbers, tmp_path / "pg" / "box.html")
    for (_, duck_csv), (_, pg_csv) in zip(on_duck, on_pg, strict=True):
        expected = _csv_rows(duck_csv, {"charged_day", "timeline"})
        assert any(r[0] == "charged_day" for r in expected)
        assert _csv_rows(pg_csv, {"charged_day", "timeline"}) == expected

    env = {k: v for k, v in os.environ.items() if not k.startswith(("TERMINAL49_", "FREETIME_"))}
    env["FREETIME_WAREHOUSE"] = both.url  # the setting, not --warehouse: what a team sets
    for args in (
        ["report", "--out", str(tmp_path / "report.html")],
        ["evidence", numbers[0], "--out", str(tmp_path / "cli" / "box.html")],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "freetime_cli.main", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stderr
    page = (tmp_path / "report.html").read_text()
    assert "postgresql://postgres:***@" in page and "superpass" not in page
    assert (tmp_path / "cli" / "box.csv").read_text().count("charged_day") > 0
