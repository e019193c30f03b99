"""Benchmark: issue 36's figure, webhooks at a sustained rate into a large warehouse's risk.

Run: ``uv run python benchmarks/bench_webhooks_rate.py [--containers 100000] [--rate 20]
[--seconds 60]``.

Set-up (every process real, all on loopback): a sandbox of ``--containers`` containers, loaded
in full (``run_load``, unpaced) and its risk published; then ``freetime webhooks serve`` with
the warehouse and the key, as the README starts it (it applies continuously, republishes risk
after each batch and fetches what a notification does not carry, in the key's budget of 100
requests a minute). The sandbox then delivers ``--rate`` valid signed notifications a second
for ``--seconds`` seconds (its ``blast``: ``--rate / 4`` every quarter second), while this
script samples the receiver's ``/healthz`` every 0.1 s.

Measured, per notification:
- the acknowledgement: the sandbox's time from sending the POST to the receiver's answer;
- delivery to the risk row: from the sandbox sending it to the end of the risk run that
  followed the batch that applied it. The batch is known from the inbox (each batch marks its
  notifications applied with one instant, in order); the end of its risk run is the first
  ``/healthz`` sample whose count of applied batches includes it (the applier counts a batch
  once its risk is published), so the figure is late by at most one sample (0.1 s).
Printed as JSON: counts, p50 / p95 / max of both, against the targets (5 s, 100 ms), the
applier's batches and risk runs, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

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
SAMPLE_S = 0.1
DRAIN_S = 180.0


class HealthSampler(threading.Thread):
    """Polls ``/healthz``: (wall time, batches applied) whenever the count changes."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.samples: list[tuple[float, int]] = []
        self.last: dict[str, Any] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=5) as http:
            while not self.stop.is_set():
                try:
                    body = http.get(self.url).json()
                except httpx.HTTPError:
                    body = {}
                batches = int((body.get("applier") or {}).get("batches", 0))
                if body:
                    self.last = body
                if not self.samples or batches != self.samples[-1][1]:
                    self.samples.append((time.time(), batches))
                self.stop.wait(SAMPLE_S)

    def time_of_batch(self, n: int) -> float | None:
        """When the ``n``-th batch (1-based) was seen done."""
        return next((t for t, b in self.samples if b >= n), None)


def _summary(values: list[float], digits: int = 3) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "max": None}
    return {
        "p50": round(statistics.median(values), digits),
        "p95": round(percentile(values, 0.95), digits),
        "max": round(max(values), digits),
    }


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=20, help="notifications a second")
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    per_tick, tick = max(1, args.rate // 4), 0.25
    with (
        SandboxProcess(containers=args.containers, seed=36, webhook_timeout=5) as sb,
        tempfile.TemporaryDirectory() as tmp,
    ):
        db, inbox = Path(tmp) / "w.duckdb", Path(tmp) / "inbox.sqlite"
        started = time.monotonic()
        run_load(db, ApiSettings(sb.base_url, sb.api_key, rate_limit_per_minute=10**6))
        publish_risk(db)
        setup_s = time.monotonic() - started
        port = free_port()
        hook = sb.register_webhook(f"http://127.0.0.1:{port}{PATH}")
        log = open(Path(tmp) / "receiver.log", "w")  # noqa: SIM115 - closed below
        receiver, url = start_receiver_process(
            hook["attributes"]["secret"],
            inbox,
            port=port,
            duckdb=db,
            env={"TERMINAL49_API_KEY": sb.api_key, "TERMINAL49_BASE_URL": sb.base_url},
            stderr=log,
        )
        sampler = HealthSampler(url.rsplit("/webhooks", 1)[0] + "/healthz")
        sampler.start()
        results: list[dict[str, Any]] = []
        load_before = os.getloadavg()
        try:
            began = time.monotonic()
            ticks = int(args.seconds / tick)
            for k in range(ticks):
                delay = began + k * tick - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                report = sb.blast(count=per_tick, seed=k, webhook_id=hook["id"])
                results += report["results"]
            sent_s = time.monotonic() - began
            deadline = time.monotonic() + DRAIN_S
            while time.monotonic() < deadline:
                body = sampler.last
                if body.get("backlog") == 0 and body.get("stored", 0) >= len(results):
                    break
                time.sleep(0.5)
            time.sleep(2 * SAMPLE_S)
            load_after = os.getloadavg()
        finally:
            sampler.stop.set()
            sampler.join(timeout=10)
            receiver.terminate()
            receiver.wait(timeout=60)
            log.close()
            sb.delete_webhook(hook["id"])
        sent = {r["id"]: r for r in results if r["kind"] == "valid"}
        acks = [r["seconds"] for r in sent.values()]
        with sqlite3.connect(inbox) as con:
            rows = con.execute("SELECT id, applied_at FROM notifications").fetchall()
        batch_of = {a: n for n, a in enumerate(sorted({a for _, a in rows if a}), start=1)}
        to_risk: list[float] = []
        unapplied = 0
        for nid, applied_at in rows:
            done = sampler.time_of_batch(batch_of[applied_at]) if applied_at else None
            if nid not in sent:
                continue
            if done is None:
                unapplied += 1
                continue
            to_risk.append(done - sent[nid]["sent_at"])
        state = sampler.last.get("applier") or {}
        out = {
            "containers": args.containers,
            "setup_s": round(setup_s, 1),
            "rate_per_s": per_tick / tick,
            "sent": len(sent),
            "sent_in_s": round(sent_s, 1),
            "status_codes": dict(
                sorted(
                    {
                        str(c): sum(1 for r in sent.values() if r["status_code"] == c)
                        for c in {r["status_code"] for r in sent.values()}
                    }.items()
                )
            ),
            "ack_s": _summary(acks, 4),
            "ack_p95_target_met": bool(acks) and percentile(acks, 0.95) < TARGET_ACK_P95_S,
            "delivery_to_risk_s": _summary(to_risk, 2),
            "risk_p95_target_met": bool(to_risk) and percentile(to_risk, 0.95) < TARGET_RISK_P95_S,
            "not_applied": unapplied,
            "batches": state.get("batches"),
            "risk_runs": state.get("risk_runs"),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in load_after],
        }
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
