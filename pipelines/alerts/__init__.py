"""Alerts and the morning digest: tell the people who move boxes, where they already read.

- :mod:`~pipelines.alerts.rules`: the alert rules, run inside each risk publish's transaction,
  appending to ``analytics.alert_outbox`` (once per container, kind and value).
- :mod:`~pipelines.alerts.sender`: delivers the outbox through Apprise, each destination on its
  own, marking each alert sent only after its channel accepted it.
- :mod:`~pipelines.alerts.digest`: the morning digest per destination.
- :mod:`~pipelines.alerts.state`: the delivery state, a file beside a DuckDB warehouse or
  tables in a PostgreSQL one (:mod:`~pipelines.alerts.pgstate`, shared by every machine).
- :mod:`~pipelines.alerts.config`: thresholds, destinations and filters (``data/alerts.toml``,
  ``FREETIME_ALERT_URLS``).

See ``docs/alerts.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pipelines.alerts.config import (
    AlertConfigError,
    AlertSettings,
    Destination,
    Filter,
    load_settings,
    mask,
)

if TYPE_CHECKING:
    from pipelines.alerts.digest import render_digest, send_digests
    from pipelines.alerts.rules import KINDS, raise_alerts
    from pipelines.alerts.sender import SendSummary, deliver, send_pending

#: Names of the delivery side (duckdb, polars, Apprise), imported when first used: a command
#: that only reads the settings (and refuses them) stays light.
_LAZY = {
    "render_digest": "digest",
    "send_digests": "digest",
    "KINDS": "rules",
    "raise_alerts": "rules",
    "SendSummary": "sender",
    "deliver": "sender",
    "send_pending": "sender",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "KINDS",
    "AlertConfigError",
    "AlertSettings",
    "Destination",
    "Filter",
    "SendSummary",
    "deliver",
    "load_settings",
    "mask",
    "raise_alerts",
    "render_digest",
    "send_digests",
    "send_pending",
]
