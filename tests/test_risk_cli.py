"""`freetime risk` end to end on a temp warehouse, and its one-line errors (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from risk_fixtures import make_warehouse
from test_risk import DATA
from typer.testing import CliRunner

from freetime_cli.risk_cmd import risk
from pipelines.analytics import risk_changes
from pipelines.warehouse import reading

pytestmark = pytest.mark.fast

app = typer.Typer()
app.command()(risk)
runner = CliRunner()


@pytest.fixture()
def db(tmp_path: Path) -> Path:
    return make_warehouse(tmp_path / "w.duckdb", DATA)


def test_cli_json_and_changes(db: Path) -> None:
    r = runner.invoke(
        app, ["--duckdb", str(db), "--as-of", "2025-11-14T16:00:00Z", "--format", "json"]
    )
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    # days to LFD: B2 -13, B -4, G -2, E 1, A 3
    assert [x["container_number"] for x in rows] == ["B2", "B", "G", "E", "A"]
    r = runner.invoke(app, ["--duckdb", str(db), "--as-of", "2025-11-17T16:00:00Z"])
    assert r.exit_code == 0 and "At-risk containers" in r.stdout
    with reading(db) as con:
        prev = con.sql("SELECT * FROM analytics.demurrage_risk_previous").pl()
        cur = con.sql("SELECT * FROM analytics.demurrage_risk").pl()
    ch = risk_changes(prev, cur)
    # On Mon 17 Nov: A's LFD (17 Nov) is today, not overdue; F's (20 Nov) is not either;
    # E (rail LFD 15 Nov) becomes overdue.
    assert [x["container_number"] for x in ch["newly_overdue"]] == ["E"]
    assert ch["lfd_moved"] == [] and ch["newly_ready"] == []
    assert risk_changes(None, cur)["counts"]["newly_overdue"] == 4


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--as-of", "yesterday"], "not an ISO 8601"),
        (["--level", "urgent"], "unknown level urgent"),
        (["--format", "xml"], "unknown format"),
    ],
)
def test_cli_bad_input_exit_2(db: Path, args: list[str], needle: str) -> None:
    r = runner.invoke(app, ["--duckdb", str(db), *args])
    assert r.exit_code == 2 and needle in r.stderr and "Traceback" not in r.output


def test_cli_missing_warehouse_and_bad_tariffs(tmp_path: Path, db: Path) -> None:
    r = runner.invoke(app, ["--duckdb", str(tmp_path / "none.duckdb")])
    assert r.exit_code == 2 and "no warehouse" in r.stderr
    # a path holding the word "lock" is no locked warehouse: refused at once, not waited for
    blocked = tmp_path / "blocker" / "w.duckdb"
    blocked.parent.mkdir()
    for bad, needle in (
        (tmp_path, "is a folder"),
        (db.parent / "t.txt", "not a valid DuckDB"),
        (blocked, "not a valid DuckDB"),
    ):
        if bad.suffix:
            bad.write_text("not a warehouse\n")
        r = runner.invoke(app, ["--duckdb", str(bad)])
        assert r.exit_code == 2 and needle in r.stderr and "Traceback" not in r.output
    bracketed = tmp_path / "a[b]" / "none.duckdb"  # printed as given, not read as markup
    r = runner.invoke(app, ["--duckdb", str(bracketed)])
    assert r.exit_code == 2 and f"no warehouse at {bracketed}" in r.stderr.replace("\n", "")
    bad = tmp_path / "t.csv"
    bad.write_text("charge\n")
    r = runner.invoke(app, ["--duckdb", str(db), "--tariffs", str(bad)])
    assert r.exit_code == 2 and "missing column" in r.stderr


def test_cli_limit_filters_and_total(db: Path) -> None:
    base = ["--duckdb", str(db), "--as-of", "2025-11-14T16:00:00Z"]
    r = runner.invoke(app, [*base, "--limit", "2"])
    assert r.exit_code == 0, r.output
    assert "B2" in r.stdout and "2 shown, 3 more (--limit 0: all); projected demurrage" in r.stdout
    every = json.loads(runner.invoke(app, [*base, "--format", "json"]).stdout)
    first = every[0]["container_number"]
    r = runner.invoke(app, [*base, "--format", "json", "--limit", "1"])
    assert [x["container_number"] for x in json.loads(r.stdout)] == [first]
    carrier = next(x["shipping_line_scac"] for x in every if x["shipping_line_scac"])
    r = runner.invoke(app, [*base, "--format", "json", "--carrier", carrier.lower()])
    want = [x["container_number"] for x in every if x["shipping_line_scac"] == carrier]
    assert [x["container_number"] for x in json.loads(r.stdout)] == want
    r = runner.invoke(app, [*base, "--port", "ZZZZZ"])
    assert r.exit_code == 0 and "No container: At-risk containers" in r.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--limit", "-3"], "--limit -3 is negative"),
        (["--limit", "all"], "--limit 'all' is not a whole number"),
        (["--port", "LAX"], "--port 'LAX' is not a UN/LOCODE"),
        (["--carrier", "M"], "--carrier 'M' is not a carrier SCAC"),
        (["--terminal", ""], "--terminal is empty"),
    ],
)
def test_cli_bad_list_options_exit_2(db: Path, args: list[str], needle: str) -> None:
    r = runner.invoke(app, ["--duckdb", str(db), *args])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr
