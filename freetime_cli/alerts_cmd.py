"""`freetime alerts test|list|send|digest`: the alert outbox and the morning digest by hand.

The flows call the same functions (:mod:`pipelines.alerts`); see docs/alerts.md. Each command
checks its arguments and settings before it imports the delivery side (duckdb, polars), so a
refusal stays cheap.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from freetime_cli._common import (
    DuckDbOption,
    WarehouseOption,
    console,
    fail,
    out,
    parse_as_of,
    quiet_logging,
    warehouse_given,
)
from pipelines.config import ConfigError
from pipelines.warehouse import WarehouseError

if TYPE_CHECKING:
    from pipelines.alerts import AlertSettings, Destination

app = typer.Typer(no_args_is_help=True, help="Alerts on changes of risk, and the digest.")

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", help="Alerts table (env FREETIME_ALERTS_CONFIG; default data/alerts.toml)."
    ),
]
StateOption = Annotated[
    Path | None,
    typer.Option(
        "--state",
        help="Delivery state file of a DuckDB warehouse (env FREETIME_ALERTS_STATE; default "
        "alerts.sqlite beside it). A PostgreSQL warehouse keeps the state in the database.",
    ),
]


def _settings(config: Path | None) -> AlertSettings:
    from pipelines.alerts import load_settings

    try:
        return load_settings(config)
    except ConfigError as exc:
        fail(str(exc))


@app.command("test")
def test(
    destination: Annotated[
        str, typer.Argument(help="A destination's name from the alerts table, or an Apprise URL.")
    ],
    config: ConfigOption = None,
) -> None:
    """Send a sample alert to DESTINATION; exit 1 if the channel refuses it."""
    from pipelines.alerts.config import destination_from

    quiet_logging()
    settings = _settings(config)
    dest = settings.destination(destination)
    if dest is None:
        if "://" not in destination:
            names = ", ".join(d.name for d in settings.destinations) or "none configured"
            fail(f"no destination named {destination!r} (known: {names}); or give an Apprise URL")
        dest = destination_from({"url": destination, "name": "test"}, "test", None, "UTC")
    if dest.error:
        fail(f"{dest.label}: {dest.error}")
    from pipelines.alerts.messages import alert_body, alert_title, json_fields
    from pipelines.alerts.sender import deliver

    sample = {
        "alert_key": "freetime-test",
        "container_number": "TEST1234567",
        "container_id": "test",
        "kind": "level",
        "value": "test",
        "detail": "a test alert from `freetime alerts test`",
        "risk_level": "imminent",
        "lfd_date": datetime.now(UTC).date(),
        "lfd_source": "terminal",
        "days_to_lfd": 2,
        "blocking_holds": ["customs"],
        "projected_demurrage": 450.0,
        "currency": "USD",
        "pod_terminal_name": "Sample Terminal",
        "port_of_discharge_locode": "USLAX",
        "shipping_line_scac": "TEST",
        "risk_reason": "sample",
    }
    why = deliver(
        dest,
        "[test] " + alert_title(sample),
        alert_body(sample),
        "markdown",
        json_fields(sample) if dest.is_json else None,
    )
    if why:
        fail(f"{dest.label}: {why}", code=1)
    out.print(f"sent a test alert to {escape(dest.label)}", highlight=False)


@app.command("list")
def list_(
    duckdb: DuckDbOption = None,
    warehouse: WarehouseOption = None,
    config: ConfigOption = None,
    state: StateOption = None,
    limit: Annotated[int, typer.Option(min=1, help="How many recent alerts.")] = 50,
    status: Annotated[
        str | None, typer.Option(help="Only alerts with this status: pending, sent or failed.")
    ] = None,
) -> None:
    """The most recent alerts, newest first, with each destination's status and reason."""
    if status not in (None, "pending", "sent", "failed"):
        fail(f"unknown status {status!r}; use pending, sent or failed")
    target = warehouse_given(duckdb, warehouse)
    settings = _settings(config)
    from pipelines.alerts.listing import alert_statuses

    try:
        rows = alert_statuses(target, settings, state_path=state, limit=limit)
    except (ConfigError, WarehouseError) as exc:
        fail(str(exc))
    shown = [r for r in rows if status is None or r.status == status]
    if not shown:
        out.print("no alerts" + (f" with status {status}" if status else ""))
        return
    for r in shown:
        out.print(escape(r.line()), highlight=False, soft_wrap=True)


@app.command("send")
def send(
    duckdb: DuckDbOption = None,
    warehouse: WarehouseOption = None,
    config: ConfigOption = None,
    state: StateOption = None,
) -> None:
    """Deliver the pending alerts now (destinations in back-off are tried too).

    Exit 1 when a destination failed (its alerts stay pending for the next pass)."""
    quiet_logging()
    target = warehouse_given(duckdb, warehouse)
    settings = _settings(config)
    if not settings.destinations:
        fail("no destination: set FREETIME_ALERT_URLS or add [[alerts.destinations]]")
    from pipelines.alerts import send_pending

    try:
        summary = send_pending(target, settings, state_path=state, ignore_backoff=True)
    except (ConfigError, WarehouseError) as exc:
        fail(str(exc))
    for r in summary.results:
        (console if r.error else out).print(escape(r.line()), highlight=False, soft_wrap=True)
    if summary.failed:
        raise typer.Exit(1)


@app.command("digest")
def digest(
    duckdb: DuckDbOption = None,
    warehouse: WarehouseOption = None,
    config: ConfigOption = None,
    state: StateOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the digests instead of sending them.")
    ] = False,
    destination: Annotated[
        str | None, typer.Option(help="Only this destination (by name).")
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Send now, even if not due or already sent today.")
    ] = False,
    as_of: Annotated[
        str | None, typer.Option("--as-of", help="ISO instant the digest is for (default now).")
    ] = None,
) -> None:
    """Send the morning digest of each destination that is due (or print it: --dry-run)."""
    quiet_logging()
    target = warehouse_given(duckdb, warehouse)
    try:
        when = parse_as_of(as_of) or datetime.now(UTC)
    except ValueError as exc:
        fail(str(exc))
    settings = _settings(config)
    if destination and settings.destination(destination) is None:
        fail(f"no destination named {destination!r}")
    from pipelines.alerts.digest import read_at_risk, render_digest, send_digests
    from pipelines.alerts.state import last_snapshots

    try:
        if dry_run:
            rows = read_at_risk(target)
            dests = [d for d in settings.destinations if destination in (None, d.name)]
            # a dry run writes nothing, not even an empty state
            last = last_snapshots(target, state, [d.key for d in dests])
            shown: list[Destination | None] = list(dests) or [None]
            for dest in shown:
                previous = last.get(dest.key) if dest else None
                dg = render_digest(dest, rows, previous, when, "text")
                who = dest.label if dest else "all boxes (no destination configured)"
                out.print(f"=== {escape(who)}: {escape(dg.title)}", highlight=False)
                out.print(escape(dg.body), highlight=False, soft_wrap=True)
            return
        results = send_digests(
            target, settings, state_path=state, now=when, force=force, only=destination
        )
    except (ConfigError, WarehouseError) as exc:
        fail(str(exc))
    if not results:
        out.print("no digest due")
    for r in results:
        (console if r.error else out).print(escape(r.line()), highlight=False, soft_wrap=True)
    if any(r.error for r in results):
        raise typer.Exit(1)
