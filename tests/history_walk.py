"""A container's life walked through the sandbox, loads and webhooks taking turns (shared by
``tests/test_history*.py`` and ``tests/test_evidence*.py``).

The sandbox (seed 43, 120 containers, clock 2030-01-07 12:00 UTC) plans container index 85
(:data:`CONTAINER`) as: vessel arrival at +1h20, discharge at +7h36, available at +14h12 under a
blocking hold (on since before arrival, cleared at +170h06), terminal LFD posted at +16h32 and
moved one day earlier at +78h03, pickup appointment at +222h10 (shown from +174h10), full out at
+224h05, dropped (seen at +240h), empty return at +456h11. Its clock starts in 2030 so that
every webhook's ``created_at`` lies after the machine's clock (a webhook row is then stamped
when received, and real order decides between a webhook and a load, as in production).

The book is served without ``import_deadlines.pod`` (the walk follows the terminal's LFD; the
POD deadline has tests of its own). :class:`ApiClock` (the client's injectable transport, a seam
we own) sets each answer's ``Date`` to the walked clock, as the live API's own clock would read,
so that a load's ``observed_at`` follows it.

The walk also serves ``tests/test_alerts_walk.py`` (one walk instead of two): over its first
:data:`ALERT_STEPS` steps a desk (:class:`AlertsDesk`) publishes risk after every step and sends
the alerts of the container to a real SMTP server and a real JSON webhook, with the sender
killed once (:data:`KILL_AT`); what they received is kept in :attr:`Walk.alerts`. Risk runs
write ``analytics``, the charge views and the binding LFD's history rows (``how = 'risk'``);
:attr:`Walk.views_after_load` keeps the views of the warehouse after the first load, before
any risk run.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import os
import shutil
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import httpx
import orjson
from alerts_servers import Hooks, Received, Smtp, start_hooks, start_smtp

from pipelines.alerts import load_settings, send_pending
from pipelines.analytics import publish_risk
from pipelines.config import ApiSettings
from pipelines.load import run_load
from pipelines.terminal49.client import Terminal49Client
from pipelines.webhooks.apply import apply_inbox
from pipelines.webhooks.inbox import Inbox, notification_from_doc
from sandbox.receiver import WebhookReceiver
from sandbox.thread import SandboxThread

SEED, CONTAINERS = 43, 120
START = dt.datetime(2030, 1, 7, 12, tzinfo=dt.UTC)
CONTAINER = "4d5f4933-b3d3-4ef6-b931-52ca62197389"
STEP_HOURS = 12
ALERT_STEPS = 20  # to +240h: past the pickup at +224h
#: the clock of the last alert step
ALERT_END = START + dt.timedelta(hours=STEP_HOURS * ALERT_STEPS)
#: The clock of each step after the full load, in hours after :data:`START`: every
#: :data:`STEP_HOURS` over the alert steps; then, nothing of the container changing between its
#: drop (seen at +240h) and its empty return at +456h11, one stride to a webhook apply past the
#: empty return and a last load, so that the steps still alternate and end past it (two writes
#: where twelve-hour steps took twenty).
HOURS = [STEP_HOURS * k for k in range(1, ALERT_STEPS + 1)] + [468, 480]
#: The step at which the alert sender is killed: the first alert of the LFD's move is received
#: by the webhook, and the sender dies before it learns that it was accepted.
KILL_AT = dt.datetime(2030, 1, 11, 0, tzinfo=dt.UTC)
REPO = Path(__file__).resolve().parents[1]


class ApiClock(httpx.BaseTransport):
    """Real HTTP, with the ``Date`` header of every answer set to :attr:`now`."""

    def __init__(self, now: dt.datetime) -> None:
        self.now = now
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        response.headers["date"] = email.utils.format_datetime(self.now, usegmt=True)
        return response

    def close(self) -> None:
        self.inner.close()


@dataclass
class Walk:
    """What the walk did: the warehouse, and per step its clock, how it was written and the
    tracked values of :data:`CONTAINER` the warehouse held afterwards."""

    duckdb_path: Path
    steps: list[tuple[dt.datetime, str]] = field(default_factory=list)
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    #: the webhook bodies applied during the walk, per step with when they were received
    bodies: list[tuple[str, list[bytes]]] = field(default_factory=list)
    #: the warehouse's views after the first load, before any risk run
    views_after_load: set[str] = field(default_factory=set)
    #: what the alert destinations received over the first :data:`ALERT_STEPS` steps
    alerts: AlertsRun | None = None


@dataclass
class AlertsRun:
    """What :class:`AlertsDesk` did: each step's failures (none expected), the sender's kill,
    what the JSON webhook and the SMTP server received, and copies of the warehouse and the
    sender's state as they were after the last alert step."""

    number: str = ""
    errors: list[str] = field(default_factory=list)
    #: how many requests the webhook had received when the sender was killed
    killed: list[int] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    subjects: list[str] = field(default_factory=list)
    #: each email's MIME parts' content types
    mail_parts: list[list[str]] = field(default_factory=list)
    duckdb_path: Path | None = None
    state_path: Path | None = None

    def bodies(self, prefix: str = "") -> list[Any]:
        return [r.body for r in self.received if r.path.startswith(prefix)]


def _send_cli(duckdb_path: Path, config: Path, state: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "FREETIME_ALERT_URLS"}
    return subprocess.Popen(
        [sys.executable, "-m", "freetime_cli.main", "alerts", "send"]
        + ["--duckdb", str(duckdb_path), "--config", str(config), "--state", str(state)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


class AlertsDesk:
    """The walk's ``after_step`` for the alerts: over the first :data:`ALERT_STEPS` steps,
    risk published as of the step's clock, then the alerts of :data:`CONTAINER` sent to a
    real SMTP server (STARTTLS) and a real JSON webhook; at :data:`KILL_AT` by the
    ``freetime alerts send`` command, SIGKILLed when the webhook receives its first request,
    then run again. A failure is recorded in :attr:`AlertsRun.errors` (the alerts test fails
    on it) and ends the desk's work, never the walk."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.config = folder / "alerts.toml"
        self.state = folder / "alerts.sqlite"
        self.run = AlertsRun()
        self.smtp: Smtp = start_smtp(folder, "starttls")
        self.hooks: Hooks = start_hooks()
        self.sender: subprocess.Popen[bytes] | None = None

    def __call__(self, w: Walk, now: dt.datetime) -> None:
        if self.run.errors or now > ALERT_END:
            return
        try:
            self.step(w, now)
        except Exception:  # recorded for the alerts test; the history tests go on
            self.run.errors.append(f"{now}: {traceback.format_exc()}")

    def step(self, w: Walk, now: dt.datetime) -> None:
        if not self.config.exists():  # the container's number is known after the first load
            self.run.number = w.snapshots[0]["number"]
            self.config.write_text(desk_config(self.smtp, self.hooks, self.run.number))
        publish_risk(w.duckdb_path, as_of=now)
        if now == KILL_AT:
            self.hooks.on_receive = self.kill_on_first
            self.sender = _send_cli(w.duckdb_path, self.config, self.state)
            self.sender.wait(timeout=120)
            self.hooks.on_receive = None
            if self.sender.returncode != -signal.SIGKILL:
                self.run.errors.append(f"{now}: the sender ended {self.sender.returncode}")
            restarted = _send_cli(w.duckdb_path, self.config, self.state)
            _, err = restarted.communicate(timeout=120)
            if restarted.returncode != 0:
                self.run.errors.append(f"{now}: the restarted sender: {err.decode()}")
        else:
            settings = load_settings(self.config, env={})
            summary = send_pending(w.duckdb_path, settings, state_path=self.state)
            self.run.errors += [f"{now}: {r.line()}" for r in summary.failed]
        if now == ALERT_END:
            self.keep(w.duckdb_path)

    def kill_on_first(self, rec: Received) -> None:
        if self.sender is not None and not self.run.killed:
            os.kill(self.sender.pid, signal.SIGKILL)
            self.run.killed.append(len(self.hooks.received))

    def keep(self, duckdb_path: Path) -> None:
        kept = self.folder / "alerts-end"
        kept.mkdir()
        for name, source in (("walk.duckdb", duckdb_path), ("alerts.sqlite", self.state)):
            shutil.copyfile(source, kept / name)
        self.run.duckdb_path = kept / "walk.duckdb"
        self.run.state_path = kept / "alerts.sqlite"

    def close(self) -> AlertsRun:
        self.smtp.controller.stop()
        self.hooks.close()
        self.run.received = list(self.hooks.received)
        self.run.subjects = self.smtp.subjects()
        self.run.mail_parts = [[p.get_content_type() for p in m.walk()] for m in self.smtp.messages]
        if self.run.duckdb_path is None and not self.run.errors:
            self.run.errors.append("the walk ended before the last alert step")
        return self.run


def desk_config(smtp: Smtp, hooks: Hooks, number: str) -> str:
    """The alerts configuration of the desk: mail and a JSON webhook, for ``number`` only."""
    return (
        "[alerts]\n"
        f'[[alerts.destinations]]\nname = "desk-mail"\nurl = "{smtp.url()}"\n'
        f'references = ["{number}"]\n'
        f'[[alerts.destinations]]\nname = "desk-hook"\n'
        f'url = "json://{hooks.netloc}/hook"\nreferences = ["{number}"]\n'
    )


def views(path: Path) -> set[str]:
    with duckdb.connect(str(path), read_only=True) as con:
        return {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}


def snapshot(path: Path, cid: str) -> dict[str, Any]:
    with duckdb.connect(str(path), read_only=True) as con:
        cur = con.execute("SELECT * FROM terminal49.containers WHERE id = ?", [cid])
        names = [d[0] for d in cur.description or []]
        row = cur.fetchone()
        holds = con.execute(
            "SELECT name, status FROM terminal49.container_holds WHERE container_id = ? "
            "ORDER BY position",
            [cid],
        ).fetchall()
    out = dict(zip(names, row, strict=True)) if row else {}
    out["holds"] = holds
    return out


def walk(tmp: Path) -> Walk:
    """The walk of this module with the alerts desk (:class:`AlertsDesk`) as its
    ``after_step``: what ``tests/conftest.py``'s ``walked`` fixture builds once per run."""
    desk = AlertsDesk(tmp)
    try:
        out = walk_life(tmp, desk)
    finally:
        run = desk.close()
    out.alerts = run
    return out


def walk_life(tmp: Path, after_step: Callable[[Walk, dt.datetime], None]) -> Walk:
    """Full load at the start; then at each clock of :data:`HOURS` an incremental load (even
    steps) or the webhooks the sandbox delivered since the previous step (odd steps), applied
    from an inbox. ``after_step(walk, clock)`` runs after each step (the full load included), the
    warehouse free."""
    path = tmp / "walk.duckdb"
    inbox_path = tmp / "inbox.sqlite"
    out = Walk(path)
    clock = ApiClock(START)
    with (
        SandboxThread(
            containers=CONTAINERS,
            seed=SEED,
            clock=START.isoformat(),
            extra_args=["--no-pod-deadlines"],
        ) as sb,
        WebhookReceiver() as rx,
    ):
        api = ApiSettings.resolve(
            base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100_000
        )
        sb.register_webhook(rx.url())
        run_load(path, api, full=True, transport=clock)
        out.steps.append((START, "full"))
        out.snapshots.append(snapshot(path, CONTAINER))
        out.views_after_load = views(path)
        after_step(out, START)
        with Terminal49Client(api.base_url, api.api_key or "", rate_limit_per_minute=None) as c:
            for k, hours in enumerate(HOURS, start=1):
                now = START + dt.timedelta(hours=hours)
                bodies: list[bytes] = []
                # the sandbox moves STEP_HOURS at a time whatever the stride: its account (the
                # shipments it creates on each advance) evolves as under 12-hour steps
                while clock.now < now:
                    sb.advance(hours=STEP_HOURS)
                    clock.now += dt.timedelta(hours=STEP_HOURS)
                    sb.deliver_pending(timeout=60)
                    bodies += [r.body for r in rx.requests]
                    rx.requests.clear()
                if k % 2 == 0:
                    run_load(path, api, transport=clock)
                    out.steps.append((now, "incremental"))
                else:
                    received = dt.datetime.now(dt.UTC).isoformat()
                    with Inbox(inbox_path) as inbox:
                        inbox.add_many(
                            [notification_from_doc(orjson.loads(b), b) for b in bodies],
                            received_at=received,
                        )
                    apply_inbox(path, inbox_path, c)
                    out.bodies.append((received, bodies))
                    out.steps.append((now, "webhook"))
                out.snapshots.append(snapshot(path, CONTAINER))
                after_step(out, now)
    return out
