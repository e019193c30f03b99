"""One alert as a message: a title and a short Markdown body, the same words on every channel
(Apprise turns the Markdown into the channel's format: HTML with a plain-text part for email,
Slack's mrkdwn, a Teams card, the JSON webhook's ``message``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

KIND_TITLES = {
    "level": "now {risk_level}",
    "lfd_earlier": "LFD moved earlier",
    "lfd_moved": "LFD changed",
    "hold": "hold on a box at risk",
    "hold_released": "hold released",
    "available": "available for pickup",
    "cost": "demurrage over {value}",
    "stale": "data stale",
}


def money(amount: float | None, currency: str | None) -> str:
    if amount is None:
        return "uncosted"
    return f"{amount:,.0f} {currency or ''}".strip()


def days_left(days: int | None) -> str:
    if days is None:
        return "no LFD"
    if days < 0:
        return f"{-days} day{'s' if days != -1 else ''} overdue"
    return f"{days} day{'s' if days != 1 else ''} left"


def holds_text(holds: Any) -> str:
    return ", ".join(holds) if holds else "none"


def alert_title(a: Mapping[str, Any]) -> str:
    what = KIND_TITLES.get(a["kind"], a["kind"]).format(**a)
    return f"{a['container_number'] or a['container_id']} {a['risk_level']}: {what}"


def alert_body(a: Mapping[str, Any]) -> str:
    """Markdown: what happened, then the box as the at-risk table shows it."""
    lfd = f"{a['lfd_date']} ({a['lfd_source']})" if a.get("lfd_date") else "none"
    where = " · ".join(
        x
        for x in (
            a.get("pod_terminal_name"),
            a.get("port_of_discharge_locode"),
            a.get("shipping_line_scac"),
            f"B/L {a['bill_of_lading_number']}" if a.get("bill_of_lading_number") else None,
        )
        if x
    )
    lines = [
        f"**{a['container_number']}**: {a['detail']}",
        "",
        f"- Level: {a['risk_level']}, {days_left(a.get('days_to_lfd'))}",
        f"- Binding LFD: {lfd}",
        f"- Holds: {holds_text(a.get('blocking_holds'))}",
        f"- Projected demurrage: {money(a.get('projected_demurrage'), a.get('currency'))}",
    ]
    if where:
        lines.append(f"- Where: {where}")
    if a.get("risk_reason"):
        lines.append(f"- Reason: {a['risk_reason']}")
    return "\n".join(lines)


def json_fields(a: Mapping[str, Any]) -> dict[str, str]:
    """Extra fields of the generic JSON webhook: the idempotency key and the alert's facts."""
    return {
        "idempotency_key": str(a["alert_key"]),
        "container": str(a["container_number"] or ""),
        "kind": str(a["kind"]),
        "value": str(a["value"]),
        "level": str(a["risk_level"] or ""),
        "lfd": str(a.get("lfd_date") or ""),
    }
