"""A self-contained HTML page of the risk picture: opens offline, no Python needed to read it.

The Vega, Vega-Lite and vega-embed JavaScript comes from ``vl-convert-python`` (it bundles
them) and is inlined in the page with every chart spec, so the file needs no network: no CDN,
no web fonts, no external script or style.
"""

from __future__ import annotations

import contextlib
import functools
import html
import importlib.metadata
import json
import os
import tempfile
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import polars as pl

from pipelines.report import charts as ch
from pipelines.report import data as d

DEFAULT_REPORT_PATH = Path("data") / "report.html"
MAX_TABLE_ROWS = 1000
VEGA_LITE_VERSION = "6.4"  # the schema altair 6 writes; vl-convert bundles the same library


#: The bundle's last statements: they define what the page calls.
_BUNDLE_SNIPPET = "window.vegaEmbed = vegaEmbed; window.vega = vega; window.vegaLite = vegaLite;"
#: What the end of a whole bundle holds (the snippet as the bundler minifies it).
_BUNDLE_END = "window.vegaEmbed="


def bundle_cache_dir() -> Path:
    """Where :func:`vega_bundle` keeps its file: ``$XDG_CACHE_HOME/freetime``, else
    ``~/.cache/freetime``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "freetime"


@functools.lru_cache(maxsize=1)
def vega_bundle() -> str:
    """vega + vega-lite + vega-embed as one script that defines ``window.vegaEmbed``.

    vl-convert builds it in over a second of CPU, and every report would pay that (each
    scheduled sync runs in a new process): it is kept in :func:`bundle_cache_dir`, one file per
    vl-convert and Vega-Lite version, written whole or not at all. A cache that cannot be read
    or written only costs the build."""
    version = importlib.metadata.version("vl-convert-python")
    cached = bundle_cache_dir() / f"vega-{version}-vl{VEGA_LITE_VERSION}.js"
    with contextlib.suppress(OSError, UnicodeDecodeError):
        js = cached.read_text(encoding="utf-8")
        if _BUNDLE_END in js[-4096:]:  # else not a bundle of ours: built again
            return js
    js = _build_bundle()
    with contextlib.suppress(OSError):
        cached.parent.mkdir(parents=True, exist_ok=True)
        part = cached.with_name(f"{cached.name}.{os.getpid()}.partial")
        try:
            part.write_text(js, encoding="utf-8")
            os.replace(part, cached)
        finally:
            part.unlink(missing_ok=True)
    return js


def _build_bundle() -> str:
    """The bundle as vl-convert builds it, safe to inline in a page."""
    import vl_convert as vlc

    built: str = vlc.javascript_bundle(_BUNDLE_SNIPPET, vl_version=VEGA_LITE_VERSION)
    return built.replace("</script", "<\\/script")  # never close the inline <script> early


def _json_for_script(value: Any) -> str:
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/")


def _money(value: float | None, currency: str) -> str:
    return "uncosted" if value is None else f"{value:,.0f} {currency}"


def _cell(column: str, value: Any, currency: str) -> str:
    if value is None or value == "":
        text = "uncosted" if column.endswith("_demurrage") else ""
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif column.endswith("_demurrage"):
        text = _money(float(value), currency)
    elif isinstance(value, datetime):
        text = value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    elif isinstance(value, date):
        text = value.isoformat()
    else:
        text = str(value)
    css = f' class="level {html.escape(text)}"' if column == "risk_level" else ""
    num = " num" if isinstance(value, int | float) and not isinstance(value, bool) else ""
    if num:
        css = ' class="num"'
    return f"<td{css}>{html.escape(text)}</td>"


TABLE_HEADERS = {
    "risk_level": "Level",
    "container_number": "Container",
    "lfd_date": "LFD",
    "lfd_source": "LFD source",
    "days_to_lfd": "Days to LFD",
    "working_days_to_lfd": "Working days",
    "ready_for_pickup": "Ready",
    "blocking_holds": "Blocking holds",
    "pending_holds": "Pending holds",
    "pickup_appointment_at": "Appointment",
    "accrued_demurrage": "Accrued",
    "projected_demurrage": "Projected",
    "pod_terminal_name": "Terminal",
    "port_of_discharge_locode": "Port",
    "shipping_line_scac": "Carrier",
    "customer_name": "Customer",
    "risk_reason": "Why",
}


def _table(rows: pl.DataFrame, currency: str) -> str:
    if rows.height == 0:
        return '<p class="empty">No container is overdue, due today or due in 1-3 days.</p>'
    shown = rows.head(MAX_TABLE_ROWS)
    head = "".join(f"<th>{html.escape(TABLE_HEADERS.get(c, c))}</th>" for c in shown.columns)
    body = "\n".join(
        "<tr>" + "".join(_cell(c, r[c], currency) for c in shown.columns) + "</tr>"
        for r in shown.iter_rows(named=True)
    )
    more = (
        f'<p class="note">Showing the {MAX_TABLE_ROWS} most urgent of {rows.height}.</p>'
        if rows.height > MAX_TABLE_ROWS
        else ""
    )
    return (
        f'<table id="at-risk"><thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>'
        f"</table>{more}"
    )


def _kpis(s: dict[str, float | int], currency: str) -> str:
    items = [
        ("Active containers", f"{s['active']:,}", ""),
        ("Overdue", f"{s['overdue']:,}", "overdue"),
        ("Due today", f"{s['due_today']:,}", "due_today"),
        ("Imminent (1-3 days)", f"{s['imminent']:,}", "imminent"),
        ("No LFD after discharge", f"{s['unknown']:,}", "unknown"),
        ("Accrued demurrage", _money(float(s["accrued_demurrage"]), currency), ""),
        ("Projected demurrage", _money(float(s["projected_demurrage"]), currency), ""),
        ("Uncosted active containers", f"{s['uncosted']:,}", ""),
    ]
    return "\n".join(
        f'<div class="kpi {cls}"><div class="v">{html.escape(v)}</div>'
        f'<div class="k">{html.escape(k)}</div></div>'
        for k, v, cls in items
    )


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
  margin:24px;color:#212121;background:#fff}
h1{margin:0 0 4px;font-size:26px} h2{margin:28px 0 8px;font-size:20px}
.meta{color:#616161;font-size:13px}
.kpis{display:flex;flex-wrap:wrap;gap:10px;margin:18px 0}
.kpi{border:1px solid #e0e0e0;border-radius:6px;padding:8px 14px;min-width:130px}
.kpi .v{font-size:22px;font-weight:600} .kpi .k{font-size:12px;color:#616161}
.kpi.overdue .v{color:#c62828} .kpi.due_today .v{color:#ef6c00}
.kpi.imminent .v{color:#b28704} .kpi.unknown .v{color:#616161}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(680px,1fr));gap:18px}
figure{margin:0;border:1px solid #eeeeee;border-radius:6px;padding:10px;overflow-x:auto}
.chart-error{color:#c62828;font-weight:600}
table{border-collapse:collapse;font-size:12px;width:100%}
th,td{border-bottom:1px solid #eeeeee;padding:4px 6px;text-align:left;vertical-align:top}
th{position:sticky;top:0;background:#fafafa} td.num{text-align:right}
td.level{font-weight:600} td.overdue{color:#c62828} td.due_today{color:#ef6c00}
td.imminent{color:#b28704}
.note,.empty{color:#616161;font-size:13px}
"""

_EMBED = """
(function () {
  var specs = %s;
  var pending = Object.keys(specs).length;
  document.body.setAttribute("data-charts-pending", String(pending));
  Object.keys(specs).forEach(function (id) {
    var el = document.getElementById("chart-" + id);
    vegaEmbed(el, specs[id], {renderer: "svg", actions: false})
      .then(function () { el.setAttribute("data-rendered", "true"); })
      .catch(function (err) {
        el.setAttribute("data-rendered", "error");
        el.innerHTML = '<p class="chart-error">This chart could not be drawn: ' +
          String(err).replace(/[<>&]/g, "") + "</p>";
      })
      .finally(function () {
        pending -= 1;
        document.body.setAttribute("data-charts-pending", String(pending));
      });
  });
})();
"""


def render_report(rd: d.RiskData, generated_at: datetime | None = None) -> str:
    """The report page for one risk picture, as a string."""
    generated_at = generated_at or datetime.now(UTC)
    currency = rd.currency
    charts = ch.all_charts(rd)
    specs = {key: chart.to_dict() for key, chart in charts.items()}
    figures = "\n".join(
        f'<figure><div id="chart-{key}" class="chart" data-chart="{key}"></div></figure>'
        for key in specs
    )
    source = (
        "the published risk run (analytics.demurrage_risk)"
        if rd.source == "published"
        else "risk recomputed in memory at this as-of from the terminal49 tables"
    )
    rows = d.at_risk_table(rd.risk)
    title = f"Demurrage risk as of {rd.as_of:%Y-%m-%d %H:%M} UTC"
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{_CSS}</style>
<script>{vega_bundle()}</script>
</head>
<body>
<header>
<h1>{html.escape(title)}</h1>
<div class="meta">Local date at the ports: {rd.today:%A %Y-%m-%d}. Source: {html.escape(source)},
warehouse {html.escape(str(rd.duckdb_path))}. Generated {generated_at:%Y-%m-%d %H:%M} UTC by
<code>freetime report</code>. Money in {html.escape(currency)}; projected demurrage assumes
pickup at the earliest plausible day (a floor, not a forecast); uncosted containers (no tariff
or no LFD) are counted, never priced at zero.</div>
</header>
<section class="kpis">
{_kpis(d.summary(rd.risk), currency)}
</section>
<noscript><p class="chart-error">The charts need JavaScript (no network needed).</p></noscript>
<section class="charts">
{figures}
</section>
<h2>At-risk containers ({rows.height}): overdue, due today, due in 1-3 days</h2>
<p class="note">Most urgent first. "Why" lists the LFD, holds, availability and appointment.</p>
{_table(rows, currency)}
<script>{_EMBED % _json_for_script(specs)}</script>
</body>
</html>
"""


def write_report(
    duckdb_path: str | Path | None,
    out_path: str | Path | None = None,
    as_of: datetime | None = None,
) -> Path:
    """Write the self-contained HTML report; returns its path (default ``data/report.html``).

    ``as_of=None`` reports the published risk run; an instant recomputes the risk in memory
    (read-only: the warehouse is not changed). Reads through short read-only connections.
    Raises ``WarehouseMissing`` or ``WarehouseLocked``. The file is replaced atomically.
    """
    rd = d.load_risk(duckdb_path, as_of=as_of)
    page = render_report(rd)
    out = Path(out_path) if out_path else DEFAULT_REPORT_PATH
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    except OSError as exc:  # the user's path, not our temporary file's, in the message
        raise OSError(f"cannot write the report to {out}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(page)
        # a report is meant to be shared: the mode a new file gets (mkstemp's is 0600)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
