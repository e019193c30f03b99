"""The same sandbox account in DuckDB and in PostgreSQL: the risk run publishes the same charges,
views and alerts on both, and every SQL query of the README and docs/ answers the same."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import psycopg2
import pytest

from pipelines.analytics import publish_risk

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
    from tests.pg import loaded_template

    tmp = tmp_path_factory.mktemp("views")
    # the account of tests/test_postgres_risk*.py: loaded once per server, copied here
    template, twin = loaded_template(postgres_server, 120, 49, CLOCK, duckdb_twin=True)
    assert twin is not None
    url = str(postgres_server.url(postgres_server.clone(template)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FREETIME_WORKDIR", str(tmp / "work"))
        path = tmp / "w.duckdb"
        shutil.copyfile(twin, path)
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


# ---- alerts and the digest of the PostgreSQL warehouse (the account above) ------------------
def _alert_config(path: Path, name: str, url: str, references: list[str]) -> Path:
    """One destination wanting the alerts of the boxes ``references`` (a few: cheap tests)."""
    listed = ", ".join(f'"{r}"' for r in references)
    path.write_text(
        f'[alerts]\n[[alerts.destinations]]\nname = "{name}"\nurl = "{url}"\n'
        f"references = [{listed}]\n"
    )
    return path


def _some_alerts(both: Both, boxes: int) -> tuple[list[str], list[tuple[str, str]]]:
    """The container numbers of the first ``boxes`` boxes that alerts were raised for, and
    their alerts ``(alert_key, container_number)``."""
    rows = both.pg_rows(
        "SELECT alert_key, container_number FROM analytics.alert_outbox ORDER BY seq"
    )[1]
    numbers = list(dict.fromkeys(r[1] for r in rows))[:boxes]
    return numbers, [(r[0], r[1]) for r in rows if r[1] in numbers]


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {k: _value(k, v) for k, v in row.items()}


def test_the_digest_of_postgresql_is_the_digest_of_duckdb(both: Both, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from freetime_cli.main import app
    from pipelines.alerts import Destination, Filter, render_digest
    from pipelines.alerts.digest import read_at_risk

    duck, pg = read_at_risk(both.duck), read_at_risk(both.url)
    assert len(pg) == len(duck) > 0
    assert [_plain(r) for r in pg] == [_plain(r) for r in duck]  # the same rows, same order
    ref = next(r["reference_numbers"][0] for r in duck if r["reference_numbers"])
    mine = Destination("refs", "json://x/y", filter=Filter(references=(ref.lower(),)))
    for dest in (None, mine):
        for fmt in ("text", "email", "chat"):
            on_pg = render_digest(dest, pg, None, LATER, fmt)
            assert on_pg == render_digest(dest, duck, None, LATER, fmt), (dest, fmt)
    assert render_digest(mine, pg, None, LATER).rows >= 1

    # the command, given --warehouse, prints what it prints for the DuckDB file
    runner, when = CliRunner(), LATER.isoformat()
    printed = [
        runner.invoke(app, ["alerts", "digest", "--dry-run", *given, "--as-of", when])
        for given in (["--duckdb", str(both.duck)], ["--warehouse", both.url])
    ]
    assert [r.exit_code for r in printed] == [0, 0], printed[1].output
    assert printed[1].output == printed[0].output and " at risk: " in printed[0].output
    assert both.pg_rows("SELECT to_regclass('analytics.alert_digests')")[1] == [(None,)]


def test_alerts_raised_on_postgresql_reach_the_inbox_once(
    both: Both, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from typer.testing import CliRunner

    from freetime_cli.main import app
    from pipelines.config import Warehouse

    sys.path.insert(0, str(REPO / "tests"))
    from alerts_servers import start_smtp

    for name in ("FREETIME_ALERT_URLS", "FREETIME_ALERTS_STATE", "FREETIME_WAREHOUSE"):
        monkeypatch.delenv(name, raising=False)
    numbers, alerts = _some_alerts(both, 3)
    raised = [n for _, n in alerts]
    assert raised  # the risk run on PostgreSQL raised them
    smtp = start_smtp(tmp_path, "starttls")
    cfg = _alert_config(tmp_path / "a.toml", "desk", smtp.url(), numbers)
    given = ["--warehouse", both.url, "--config", str(cfg)]
    runner = CliRunner()
    try:
        first = runner.invoke(app, ["alerts", "send", *given])
        assert first.exit_code == 0, first.output
        assert f"{len(raised)} sent, 0 pending" in first.output
        # FREETIME_WAREHOUSE names it as well as --warehouse does
        again = runner.invoke(
            app, ["alerts", "send", "--config", str(cfg)], env={"FREETIME_WAREHOUSE": both.url}
        )
        assert again.exit_code == 0 and "0 sent, 0 pending" in again.output
        subjects = [str(m["subject"]) for m in smtp.messages]
        assert len(subjects) == len(raised)
        assert sorted(n for n in raised) == sorted(s.split()[0] for s in subjects)
        listed = runner.invoke(
            app, ["alerts", "list", *given, "--status", "sent", "--limit", "5000"]
        )
        assert listed.exit_code == 0 and listed.output.count(": sent at ") == len(raised)
        password = Warehouse.parse(both.url).password
        assert password and password not in first.output + again.output + listed.output
        # the state of a PostgreSQL warehouse is in it: a state file is a mistake, said once
        bad = runner.invoke(app, ["alerts", "send", *given, "--state", str(tmp_path / "s")])
        assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1, bad.output
        assert "keeps its delivery state in the database" in bad.output
    finally:
        smtp.controller.stop()


def test_two_senders_at_once_send_each_alert_once(both: Both, tmp_path: Path) -> None:
    import sys
    import threading

    from pipelines.alerts import SendSummary, load_settings, send_pending

    sys.path.insert(0, str(REPO / "tests"))
    from alerts_servers import start_hooks

    numbers, alerts = _some_alerts(both, 4)
    keys = [k for k, _ in alerts]
    hooks = start_hooks()
    hooks.answer = lambda path: (200, 0.3)  # the senders overlap for the whole pass
    url = f"json://{hooks.netloc}/hook"
    settings = load_settings(_alert_config(tmp_path / "a.toml", "hook", url, numbers), env={})
    start = threading.Barrier(2)
    results: list[SendSummary] = []

    def sender() -> None:  # a machine of its own: its own sessions of the database
        start.wait()
        results.append(send_pending(both.url, settings))

    try:
        threads = [threading.Thread(target=sender) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        received = [b["idempotency_key"] for b in hooks.bodies("/hook")]
        assert sorted(received) == sorted(keys) and len(set(received)) == len(keys)
        assert sorted(s.sent for s in results) == [0, len(keys)]
    finally:
        hooks.close()


def test_the_digest_flow_sends_the_digest_of_postgresql_once_a_day(
    both: Both, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefect_harness: None
) -> None:
    import sys
    import threading

    from flows.alerts import digest
    from pipelines.alerts import load_settings, send_digests
    from pipelines.config import Warehouse

    sys.path.insert(0, str(REPO / "tests"))
    from alerts_servers import start_smtp

    smtp = start_smtp(tmp_path, "ssl")
    cfg = tmp_path / "a.toml"
    cfg.write_text(f'[alerts]\n[[alerts.destinations]]\nname = "mail"\nurl = "{smtp.url()}"\n')
    monkeypatch.setenv("FREETIME_ALERTS_CONFIG", str(cfg))
    monkeypatch.delenv("FREETIME_ALERT_URLS", raising=False)
    monkeypatch.setenv("FREETIME_WAREHOUSE", both.url)  # the worker's setting
    shown = Warehouse.parse(both.url).display  # a flow parameter: the password masked
    try:
        lines = digest(shown, as_of=LATER)
        assert len(lines) == 1 and "digest sent" in lines[0] and len(smtp.messages) == 1
        assert digest(shown, as_of=LATER) == []  # once a local day
        # the next day, two digest runs at once (two workers): one digest
        settings, results = load_settings(cfg), []
        start = threading.Barrier(2)

        def run() -> None:
            start.wait()
            results.append(send_digests(both.url, settings, now=LATER + timedelta(days=1)))

        threads = [threading.Thread(target=run) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(len(r) for r in results) == [0, 1] and len(smtp.messages) == 2
        assert "newly at risk" in str(smtp.messages[1])
    finally:
        smtp.controller.stop()
