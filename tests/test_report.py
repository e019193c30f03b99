"""The HTML report: data matches the published views, the page is self-contained, and a real
headless browser draws every chart (Debian's chromium; skipped with instructions if absent)."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from freetime_cli.main import app
from pipelines.analytics import at_risk
from pipelines.report import charts, load_risk, render_report, write_report
from pipelines.report import data as rdata
from pipelines.report import html as report_html
from pipelines.report.html import vega_bundle
from pipelines.warehouse import reading

AS_OF = datetime(2026, 11, 20, 12, tzinfo=UTC)
CHART_IDS = [
    "risk-levels",
    "lfd-calendar",
    "exposure-terminal",
    "exposure-carrier",
    "holds",
    "dwell",
    "eta-slip",
]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
INSTALL_HINT = (
    "chromium is not installed; install it with "
    "`apt-get update && apt-get install -y chromium` (Debian/Ubuntu)"
)
runner = CliRunner()


@pytest.fixture(scope="module")
def warehouse(published_warehouse: Path) -> Path:
    return published_warehouse


@pytest.fixture(scope="module")
def report(warehouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_report(warehouse, tmp_path_factory.mktemp("out") / "sub" / "report.html")


def _view(path: Path, sql: str) -> pl.DataFrame:
    with reading(path) as con:
        return con.sql(sql).pl()


def test_report_aggregates_over_a_frame_match_the_published_views(warehouse: Path) -> None:
    rd = load_risk(warehouse)
    assert rd.source == "published" and rd.as_of == AS_OF and rd.risk.height == 500
    key = ["port_of_discharge_locode", "pod_terminal_name"]
    cols = key + [
        "containers",
        "overdue",
        "due_today",
        "imminent",
        "unknown",
        "accrued_demurrage",
        "projected_demurrage",
        "uncosted",
    ]
    mine = rdata.exposure_by_terminal(rd.risk).select(cols).sort(key)
    view = _view(warehouse, f"SELECT {', '.join(cols)} FROM analytics.exposure_by_terminal")
    assert mine.equals(view.sort(key).cast(dict(mine.schema)))  # type: ignore[arg-type]
    cal = rdata.lfd_calendar(rd.risk, rd.today)
    vcal = _view(
        warehouse,
        "SELECT lfd_date, boxes, ready, on_hold, with_appointment, "
        "projected_demurrage, uncosted FROM analytics.lfd_calendar",
    )
    assert cal.equals(vcal.cast(dict(cal.schema)))  # type: ignore[arg-type]
    assert cal.height == 14 and cal["boxes"].sum() > 0
    # the at-risk table is the at_risk() rows in the same urgency order
    assert (
        rdata.at_risk_table(rd.risk)["container_number"].to_list()
        == at_risk(warehouse)["container_number"].to_list()
    )


def test_an_as_of_is_recomputed_in_memory_and_matches_a_publish(warehouse: Path) -> None:
    before = warehouse.stat().st_mtime_ns
    rd = load_risk(warehouse, as_of=AS_OF)
    assert rd.source == "computed" and warehouse.stat().st_mtime_ns == before
    published = load_risk(warehouse).risk
    cols = ["container_id", "risk_level", "lfd_date", "projected_demurrage"]
    assert (
        rd.risk.select(cols)
        .sort("container_id")
        .equals(published.select(cols).sort("container_id"))
    )
    later = load_risk(warehouse, as_of=datetime(2026, 11, 24, 12, tzinfo=UTC))
    assert later.today.isoformat() == "2026-11-24"
    assert rdata.summary(later.risk)["overdue"] >= rdata.summary(rd.risk)["overdue"]


def test_filters_and_empty_selections_still_chart(warehouse: Path) -> None:
    rd = load_risk(warehouse)
    fenix = rd.filtered(terminals=["Fenix Marine Services"])
    assert fenix.risk.height and set(fenix.risk["pod_terminal_name"]) == {"Fenix Marine Services"}
    assert rd.filtered(ports=[], carriers=None).risk.height == 500
    nothing = rd.filtered(customers=["no such customer"])
    assert nothing.risk.height == 0
    for chart in charts.all_charts(nothing).values():
        chart.to_dict()  # validates against the Vega-Lite schema; empty data is fine
    with pytest.raises(ValueError, match="unknown filter"):
        rdata.filter_risk(rd.risk, vessel=["x"])


def test_every_chart_has_a_title_and_axis_titles_with_units(warehouse: Path) -> None:
    rd = load_risk(warehouse)
    built = charts.all_charts(rd)
    assert list(built) == CHART_IDS
    for name, chart in built.items():
        spec = chart.to_dict()
        title = spec.get("title")
        assert title and (title if isinstance(title, str) else title["text"]), name
        text = str(spec)
        titles = re.findall(r"'title': '([^']+)'", text)
        assert any("(" in t for t in titles), f"{name}: no axis title with a unit: {titles}"


def test_report_is_self_contained(report: Path, warehouse: Path) -> None:
    page = report.read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>")
    assert "Demurrage risk as of 2026-11-20 12:00 UTC" in page
    # no external resources: every script is inline, no stylesheet or image links
    assert not re.search(r"<script[^>]*\bsrc=", page, re.I)
    assert not re.search(r"<link\b", page, re.I)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?https?:", page, re.I)
    for chart_id in CHART_IDS:
        assert f'id="chart-{chart_id}"' in page
    rows = at_risk(warehouse)
    table = page[page.index('<table id="at-risk">') :]
    table = table[: table.index("</table>")]
    assert table.count("<tr>") == rows.height + 1  # header + one row per at-risk container
    assert rows["container_number"][0] in page


def test_render_report_escapes_text(warehouse: Path) -> None:
    rd = load_risk(warehouse)
    evil = rd.risk.with_columns(
        pl.when(pl.col("risk_level") == "overdue")
        .then(pl.lit("</script><b>x</b>"))
        .otherwise(pl.col("risk_reason"))
        .alias("risk_reason")
    )
    page = render_report(rdata.RiskData(evil, rd.as_of, rd.source, rd.duckdb_path))
    assert "<b>x</b>" not in page and "&lt;/script&gt;&lt;b&gt;x&lt;/b&gt;" in page


def test_cli_writes_the_report(warehouse: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    r = runner.invoke(
        app, ["report", "--duckdb", str(warehouse), "--out", str(out), "--as-of", "2026-11-21"]
    )
    assert r.exit_code == 0, r.output
    assert "Demurrage risk as of 2026-11-21 00:00 UTC" in out.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--as-of", "next tuesday"], "not an ISO 8601"),
        (["--out", "."], "is a directory"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(warehouse: Path, args: list[str], needle: str) -> None:
    r = runner.invoke(app, ["report", "--duckdb", str(warehouse), *args])
    assert r.exit_code == 2 and needle in r.stderr and "Traceback" not in r.output
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_unwritable_out_names_the_path_given(warehouse: Path) -> None:
    out = warehouse / "r.html"  # under a file: its folder cannot be made
    r = runner.invoke(app, ["report", "--duckdb", str(warehouse), "--out", str(out)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.startswith(f"error: cannot write the report to {out}: ")
    assert ".tmp" not in r.stderr


@pytest.mark.fast
def test_cli_missing_warehouse(tmp_path: Path) -> None:
    r = runner.invoke(
        app,
        ["report", "--duckdb", str(tmp_path / "none.duckdb"), "--out", str(tmp_path / "r.html")],
    )
    assert r.exit_code == 2 and "no warehouse" in r.stderr
    assert not (tmp_path / "none.duckdb").exists() and not (tmp_path / "r.html").exists()


def test_exposure_charts_rank_ties_the_same_whatever_the_row_order(warehouse: Path) -> None:
    """Carriers or terminals with equal exposure (often none) are ranked by name: the same
    warehouse gives the same charts and the same top N."""
    risk = load_risk(warehouse).risk.with_columns(projected_demurrage=pl.lit(0.0))  # all tied
    for chart in (charts.exposure_by_carrier_chart, charts.exposure_by_terminal_chart):
        orders = set()
        for seed in range(4):
            spec = chart(risk.sample(fraction=1.0, shuffle=True, seed=seed)).to_dict()
            orders.add(tuple(spec["encoding"]["y"]["sort"]))
        assert len(orders) == 1, orders


@pytest.mark.fast
def test_the_vega_bundle_is_kept_for_the_next_process_and_a_bad_copy_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    vega_bundle.cache_clear()  # as a new process would start
    try:
        built = vega_bundle()  # built for real once
        kept = list((tmp_path / "cache" / "freetime").iterdir())
        assert len(kept) == 1 and kept[0].read_text() == built
        assert "window.vegaEmbed=" in built and "</script" not in built

        builds: list[str] = []  # the other cases count their builds instead of building
        monkeypatch.setattr(report_html, "_build_bundle", lambda: builds.append("built") or built)
        vega_bundle.cache_clear()
        assert vega_bundle() == built and builds == []  # a whole copy is read, not rebuilt

        kept[0].write_text(built[: len(built) // 2])  # cut short: not used, built again
        vega_bundle.cache_clear()
        assert vega_bundle() == built and kept[0].read_text() == built and len(builds) == 1

        (tmp_path / "file").write_text("")  # a cache folder that cannot be made
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))
        vega_bundle.cache_clear()
        assert vega_bundle() == built and len(builds) == 2
    finally:
        vega_bundle.cache_clear()


# ---- a real browser ---------------------------------------------------------------------------


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    profile.mkdir()
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--window-size=1400,2400",
        "--virtual-time-budget=5000",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason=INSTALL_HINT)
def test_report_renders_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    url = report.resolve().as_uri()
    shot = tmp_path / "report.png"
    dom = _chromium(tmp_path, "--dump-dom", f"--screenshot={shot}", url)  # one browser start
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert 'data-charts-pending="0"' in html, "the chart scripts did not finish"
    parts = re.split(r'<div id="chart-', html)[1:]
    drawn = {}
    for part in parts:
        chart_id = part.split('"', 1)[0]
        body = part.split("</figure>", 1)[0]
        assert 'data-rendered="true"' in body, f"{chart_id}: {body[:300]}"
        assert "<svg" in body, f"{chart_id}: no svg"
        marks = re.findall(r'class="mark-(\w+) role-mark[^"]*"', body)
        # every drawn mark group holds shapes: count the path elements vega emitted
        shapes = body.count("<path")
        assert marks and shapes >= 3, f"{chart_id}: marks {marks}, {shapes} shapes"
        drawn[chart_id] = (marks, shapes)
    assert sorted(drawn) == sorted(CHART_IDS)
    assert 'data-rendered="error"' not in html

    assert shot.exists(), dom.stderr[-2000:]
    assert _png_size(shot) == (1400, 2400)
    assert shot.stat().st_size > 50_000  # a blank page compresses to a few kB
