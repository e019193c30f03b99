"""Benchmark: issue 36's figure, webhooks at a sustained rate into a large warehouse's risk.

Run: ``uv run python benchmarks/bench_webhooks_rate.py [--containers 100000] [--rate 20]
[--seconds 60] [--poll 0.5]``.

Set-up (every process real, all on loopback): a sandbox of ``--containers`` containers whose
clock starts half an hour ahead of the wall clock (so that what it announces is newer than
what the load fetched, as a live account's notifications are), loaded in full (``run_load``,
unpaced) and its risk published; then ``freetime webhooks serve`` with the warehouse and the
key, as the README starts it (it applies continuously, republishes risk after each batch and
fetches what a notification does not carry, in the key's budget of 100 requests a minute).

The traffic is the live API's: the sandbox's clock moves a minute at a time and the sandbox
delivers what changed (transport events, LFD moves, holds released, availability, pickup
appointments, new shipments), each advance's notifications spaced so that ``--rate`` reach the
receiver each second, for ``--seconds`` seconds.

Measured, per notification:
- the acknowledgement: the sandbox's time from starting the POST to the receiver's answer;
- delivery to applied: from that start to the instant the applier stamped its batch
  (``applied_at`` in the inbox);
- delivery to the risk row: from that start to the first look (every ``--poll`` seconds, a
  short read-only DuckDB connection) at which the ``analytics.demurrage_risk`` row of each
  container the notification names (or, naming none, of its shipment's containers) was
  computed after the notification was applied (the row's ``as_of`` is the start of the risk
  run that wrote it, later than its batch's ``applied_at``). Late by at most one look.
Printed as JSON: counts, p50 / p95 / max, against the targets (5 s, 100 ms), the applier's
batches and risk runs (partial and full), and the load average.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_alert_latency import percentile  # noqa: E402

from freetime_cli.webhooks_cmd import start_receiver_process  # noqa: E402
from pipelines.analytics import publish_risk  # noqa: E402
from pipelines.config import ApiSettings  # noqa: E402
from pipelines.load import run_load  # noqa: E402
from pipelines.webhooks.receiver import PATH  # noqa: E402
from sandbox.process import SandboxProcess  # noqa: E402
from tests.alerts_servers import free_port  # noqa: E402

TARGET_RISK_P95_S = 5.0
TARGET_ACK_P95_S = 0.1
DRAIN_S = 180.0
#: Sandbox seconds per advance: its change points fall on whole minutes.
STEP_S = 60


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def named(body: bytes) -> tuple[set[str], set[str]]:
    """(container ids, shipment ids) a notification body carries."""
    doc = orjson.loads(body)
    containers: set[str] = set()
    shipments: set[str] = set()
    for r in doc.get("included") or []:
        if r.get("type") == "container":
            containers.add(str(r["id"]))
        elif r.get("type") == "shipment":
            shipments.add(str(r["id"]))
        rel = ((r.get("relationships") or {}).get("container") or {}).get("data")
        if isinstance(rel, dict) and rel.get("id"):
            containers.add(str(rel["id"]))
    return containers, shipments


class RiskWatcher(threading.Thread):
    """Every ``poll`` seconds: notifications applied since the last look (from the inbox), then
    the risk rows of the containers they name (a short read-only connection); records when
    each notification's rows all have ``as_of`` later than its ``applied_at``."""

    def __init__(self, inbox: Path, db: Path, poll: float) -> None:
        super().__init__(daemon=True)
        self.inbox, self.db, self.poll = inbox, db, poll
        self.applied: dict[str, float] = {}  # notification -> applied_at (epoch)
        self.reflected: dict[str, float] = {}  # notification -> first look that saw its rows
        self.waiting: dict[str, tuple[set[str], set[str]]] = {}
        self.no_risk_input: set[str] = set()
        self.looks = self.locked = 0
        self.stop = threading.Event()
        self._last_applied = ""

    def run(self) -> None:
        while not self.stop.is_set():
            self.look()
            self.stop.wait(self.poll)

    def look(self) -> None:
        self._read_inbox()
        if not self.waiting:
            return
        containers = set().union(*(c for c, _ in self.waiting.values()))
        shipments = set().union(*(s for c, s in self.waiting.values() if not c))
        try:
            with duckdb.connect(str(self.db), read_only=True) as con:
                by_ship: dict[str, set[str]] = {}
                if shipments:
                    for cid, sid in con.execute(
                        "SELECT id, shipment_id FROM terminal49.containers "
                        "WHERE shipment_id IN (SELECT unnest(?))",
                        [sorted(shipments)],
                    ).fetchall():
                        by_ship.setdefault(sid, set()).add(cid)
                        containers.add(cid)
                rows = con.execute(
                    "SELECT container_id, epoch(as_of) FROM analytics.demurrage_risk "
                    "WHERE container_id IN (SELECT unnest(?))",
                    [sorted(containers)],
                ).fetchall()
        except (duckdb.IOException, duckdb.CatalogException):  # a writer has the file
            self.locked += 1
            return
        now = time.time()
        self.looks += 1
        as_of = dict(rows)
        for nid, (cids, sids) in list(self.waiting.items()):
            ids = cids or set().union(*(by_ship.get(s, set()) for s in sids))
            at = self.applied[nid]
            if ids and all(as_of.get(c, 0.0) >= at for c in ids):
                self.reflected[nid] = now
                del self.waiting[nid]

    def _read_inbox(self) -> None:
        try:
            with sqlite3.connect(f"file:{self.inbox}?mode=ro", uri=True) as con:
                rows = con.execute(
                    "SELECT id, applied_at, body FROM notifications "
                    "WHERE applied_at IS NOT NULL AND applied_at >= ? ORDER BY applied_at",
                    [self._last_applied],
                ).fetchall()
        except sqlite3.Error:
            return
        for nid, applied_at, body in rows:
            self._last_applied = max(self._last_applied, applied_at)
            if nid not in self.applied:
                self.applied[nid] = _epoch(applied_at)
                containers, shipments = named(body)
                if containers or shipments:
                    self.waiting[nid] = (containers, shipments)
                else:  # a document event: no risk input
                    self.no_risk_input.add(nid)


def _summary(values: list[float], digits: int = 3) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "max": None}
    return {
        "p50": round(statistics.median(values), digits),
        "p95": round(percentile(values, 0.95), digits),
        "max": round(max(values), digits),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=20.0, help="notifications a second")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--poll", type=float, default=0.5, help="seconds between looks")
    args = parser.parse_args()
    ahead = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=30)
    with (
        SandboxProcess(
            containers=args.containers,
            seed=36,
            webhook_timeout=5,
            clock=ahead.isoformat().replace("+00:00", "Z"),
        ) as sb,
        tempfile.TemporaryDirectory() as tmp,
    ):
        db, inbox = Path(tmp) / "w.duckdb", Path(tmp) / "inbox.sqlite"
        started = time.monotonic()
        run_load(db, ApiSettings(sb.base_url, sb.api_key, rate_limit_per_minute=10**6))
        publish_risk(db)
        setup_s = time.monotonic() - started
        port = free_port()
        hook = sb.register_webhook(f"http://127.0.0.1:{port}{PATH}")
        log_path = Path(tmp) / "receiver.log"
        log = log_path.open("w")
        receiver, url = start_receiver_process(
            hook["attributes"]["secret"],
            inbox,
            port=port,
            duckdb=db,
            env={"TERMINAL49_API_KEY": sb.api_key, "TERMINAL49_BASE_URL": sb.base_url},
            stderr=log,
        )
        watcher = RiskWatcher(inbox, db, args.poll)
        watcher.start()
        load_before = os.getloadavg()
        advances = 0
        try:
            began = time.monotonic()
            due = began
            spread = 2.5
            while time.monotonic() - began < args.seconds:
                moved = sb.advance(minutes=STEP_S / 60, spread=spread)
                advances += 1
                count = int(moved["notifications"])
                # the next advance when this one's notifications are all due: --rate a second
                due += count / args.rate
                spread = max(0.5, count / args.rate)
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            sent_s = time.monotonic() - began
            sb.deliver_pending(timeout=60)
            acked = sum(
                1
                for n in sb.deliveries()
                if n["webhook_id"] == hook["id"]
                and n["attributes"]["delivery_status"] == "succeeded"
            )
            deadline = time.monotonic() + DRAIN_S
            while (
                time.monotonic() < deadline
                and len(watcher.reflected) + len(watcher.no_risk_input) < acked
            ):
                time.sleep(0.5)
            time.sleep(args.poll * 2)
            load_after = os.getloadavg()
        finally:
            watcher.stop.set()
            watcher.join(timeout=30)
            state: dict[str, int] = {}
            with contextlib.suppress(httpx.HTTPError, KeyError):
                state = httpx.get(url.rsplit("/webhooks", 1)[0] + "/healthz").json()["applier"]
            receiver.terminate()
            receiver.wait(timeout=60)
            log.close()
            delivered = [n for n in sb.deliveries() if n["webhook_id"] == hook["id"]]
            sb.delete_webhook(hook["id"])
        sent = {n["id"]: n for n in delivered if n["sent_at"] is not None}
        acks = [n["seconds"] for n in sent.values()]
        to_applied = [
            watcher.applied[i] - n["sent_at"] for i, n in sent.items() if i in watcher.applied
        ]
        to_risk = [
            watcher.reflected[i] - n["sent_at"] for i, n in sent.items() if i in watcher.reflected
        ]
        events: dict[str, int] = {}
        for n in sent.values():
            events[n["attributes"]["event"]] = events.get(n["attributes"]["event"], 0) + 1
        codes: dict[str, int] = {}
        for n in sent.values():
            key = str((n.get("meta") or {}).get("last_status_code"))
            codes[key] = codes.get(key, 0) + 1
        lines = log_path.read_text().splitlines() if log_path.exists() else []
        out = {
            "containers": args.containers,
            "setup_s": round(setup_s, 1),
            "advances": advances,
            "sent": len(sent),
            "sent_in_s": round(sent_s, 1),
            "rate_per_s": round(len(sent) / sent_s, 1) if sent_s else None,
            "events": dict(sorted(events.items(), key=lambda kv: -kv[1])),
            "status_codes": codes,
            "ack_s": _summary(acks, 4),
            "ack_p95_target_met": bool(acks) and percentile(acks, 0.95) < TARGET_ACK_P95_S,
            "delivery_to_applied_s": _summary(to_applied, 2),
            "delivery_to_risk_row_s": _summary(to_risk, 2),
            "risk_p95_target_met": bool(to_risk)
            and len(to_risk) + len(watcher.no_risk_input) == len(sent)
            and percentile(to_risk, 0.95) < TARGET_RISK_P95_S,
            "no_risk_input": len(watcher.no_risk_input),
            "not_reflected": len(sent) - len(to_risk) - len(watcher.no_risk_input),
            "looks": watcher.looks,
            "looks_locked_out": watcher.locked,
            "batches": state.get("batches"),
            "risk_runs": state.get("risk_runs"),
            "partial_risk_runs": state.get("partial_risk_runs"),
            "last_applier_lines": [ln for ln in lines if "notifications:" in ln][-3:],
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in load_after],
        }
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
