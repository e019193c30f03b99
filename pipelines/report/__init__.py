"""The risk picture for people: altair charts (notebooks and report) and the HTML report.

Public API: :func:`write_report`, :func:`render_report`, :func:`load_risk`, :class:`RiskData`,
and the chart builders in :mod:`pipelines.report.charts`. Reads only through
:func:`pipelines.warehouse.reading` (brief, read-only connections).
"""

from pipelines.report.data import RiskData, load_risk, published_as_of, query
from pipelines.report.html import DEFAULT_REPORT_PATH, render_report, write_report

__all__ = [
    "DEFAULT_REPORT_PATH",
    "RiskData",
    "load_risk",
    "published_as_of",
    "query",
    "render_report",
    "write_report",
]
