"""Each recent alert with its status per destination: sent, pending, or failed (with why)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.alerts.config import AlertSettings
from pipelines.alerts.messages import alert_title
from pipelines.alerts.outbox import WarehouseArg, recent_alerts
from pipelines.alerts.state import open_state
from pipelines.config import resolve_warehouse


@dataclass
class AlertStatus:
    """One (alert, destination): ``status`` is sent, pending (not tried yet, or waiting behind
    an earlier alert) or failed (the destination's last attempt failed: ``reason``; retried)."""

    seq: int
    title: str
    raised_at: Any
    destination: str
    status: str
    reason: str | None = None
    sent_at: str | None = None

    def line(self) -> str:
        extra = f" at {self.sent_at}" if self.sent_at else ""
        why = f": {self.reason}" if self.reason else ""
        return f"#{self.seq} {self.title} -> {self.destination}: {self.status}{extra}{why}"


def alert_statuses(
    warehouse: WarehouseArg,
    settings: AlertSettings,
    *,
    state_path: str | Path | None = None,
    limit: int = 50,
) -> list[AlertStatus]:
    """The ``limit`` most recent alerts (newest first) times the destinations that want them
    (an alert no destination wants is listed once, ``not routed``)."""
    wh = resolve_warehouse(warehouse)
    alerts = recent_alerts(wh, limit)
    with open_state(wh, state_path, create=False) as st:
        known = st.destinations()
        sent = st.deliveries([int(a["seq"]) for a in alerts])
    out: list[AlertStatus] = []
    for a in alerts:
        seq = int(a["seq"])
        wanted = [d for d in settings.destinations if d.filter.matches(a)]
        title = alert_title(a)
        if not wanted:
            out.append(AlertStatus(seq, title, a["raised_at"], "-", "not routed"))
        for d in wanted:
            at = sent.get(seq, {}).get(d.key)
            row = known.get(d.key)
            if at:
                out.append(AlertStatus(seq, title, a["raised_at"], d.label, "sent", sent_at=at))
            elif row and row["cursor"] >= seq:
                out.append(
                    AlertStatus(
                        seq,
                        title,
                        a["raised_at"],
                        d.label,
                        "skipped",
                        reason="raised before the destination was added",
                    )
                )
            elif d.error or (row and row["failures"]):
                reason = d.error or row["last_error"] if row else d.error
                out.append(
                    AlertStatus(seq, title, a["raised_at"], d.label, "failed", reason=reason)
                )
            else:
                out.append(AlertStatus(seq, title, a["raised_at"], d.label, "pending"))
    return out
