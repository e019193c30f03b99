"""A container's life walked through the sandbox, loads and webhooks taking turns (shared by
``tests/test_history*.py`` and ``tests/test_evidence*.py``).

The sandbox (seed 43, 120 containers, clock 2030-01-07 12:00 UTC) plans container index 85
(:data:`CONTAINER`) as: vessel arrival at +1h20, discharge at +7h36, available at +14h12 under a
blocking hold (on since before arrival, cleared at +170h06), terminal LFD posted at +16h32 and
moved one day earlier at +78h03, pickup appointment at +222h10 (shown from +174h10), full out at
+224h05, empty return at +456h11. Its clock starts in 2030 so that every webhook's
``created_at`` lies after the machine's clock (a webhook row is then stamped when received,
and real order decides between a webhook and a load, as in production).

The book is served without ``import_deadlines.pod`` (the walk follows the terminal's LFD; the
POD deadline has tests of its own). :class:`ApiClock` (the client's injectable transport, a seam
we own) sets each answer's ``Date`` to the walked clock, as the live API's own clock would read,
so that a load's ``observed_at`` follows it.
"""

from __future__ import annotations

import datetime as dt
import email.utils
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import httpx
import orjson

from pipelines.config import ApiSettings
from pipelines.load import run_load
from pipelines.terminal49.client import Terminal49Client
from pipelines.webhooks.apply import apply_inbox
from pipelines.webhooks.inbox import Inbox, notification_from_doc
from sandbox.process import SandboxProcess
from sandbox.receiver import WebhookReceiver

SEED, CONTAINERS = 43, 120
START = dt.datetime(2030, 1, 7, 12, tzinfo=dt.UTC)
CONTAINER = "4d5f4933-b3d3-4ef6-b931-52ca62197389"
STEP_HOURS = 12
STEPS = 40  # to +480h: past the empty return


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


def walk(
    tmp: Path,
    after_step: Callable[[Walk, dt.datetime], None] | None = None,
    steps: int = STEPS,
) -> Walk:
    """Full load at the start; then every 12 hours an incremental load (even steps) or the
    webhooks delivered since (odd steps), applied from an inbox. ``after_step(walk, clock)``
    runs after each step (the full load included), the warehouse free."""
    path = tmp / "walk.duckdb"
    inbox_path = tmp / "inbox.sqlite"
    out = Walk(path)
    clock = ApiClock(START)
    with (
        SandboxProcess(
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
        if after_step:
            after_step(out, START)
        with Terminal49Client(api.base_url, api.api_key or "", rate_limit_per_minute=None) as c:
            for k in range(1, steps + 1):
                sb.advance(hours=STEP_HOURS)
                now = START + dt.timedelta(hours=STEP_HOURS * k)
                clock.now = now
                sb.deliver_pending(timeout=60)
                bodies = [r.body for r in rx.requests]
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
                if after_step:
                    after_step(out, now)
    return out
