"""Benchmark: issue 33's figure, a webhook notification that moves an LFD to the desk's inbox.

Run: ``uv run python benchmarks/bench_alert_latency.py [--containers 2000] [--rounds 5]``.

Set-up (as ``tests/test_receiver_apply.py`` does, every process real, all on loopback): a
sandbox at the API's pace (100 requests a minute), a full ``run_load`` and ``publish_risk``,
a real SMTP server (``tests.alerts_servers.start_smtp``, plain, with AUTH) and
``freetime webhooks serve`` with the warehouse and ``FREETIME_ALERT_URLS`` set to that server's
``mailto://`` URL: nothing else runs, the receiver applies, republishes risk and sends the
alerts that run raised, as it does by default. Its log lines go to a temp file.

Each round moves the sandbox clock 6 hours (``advance(hours=6)``), lets it deliver its
notifications (``deliver_pending``), then waits (at most 120 s) until as many emails as new
``analytics.alert_outbox`` rows have arrived and nothing new came for 5 s.

What is measured, per email: its arrival in the SMTP server (wall clock when the server took
the message) minus the earliest delivery attempt (the sandbox's ``last_attempt_at``) of any
notification of that round, i.e. from the round's first notification leaving the sandbox. It
is not correlated per container, so it is an upper bound of the per-container latency (an
email about a box whose notification went out later in the round counts from the first one).
Printed: per round the notifications, alerts raised, emails and their latencies; then p50 /
p95 / max over all emails against the 60 s target.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import duckdb  # noqa: E402

from freetime_cli.webhooks_cmd import start_receiver_process  # noqa: E402
from pipelines.analytics import publish_risk  # noqa: E402
from pipelines.config import ApiSettings  # noqa: E402
from pipelines.load import run_load  # noqa: E402
from pipelines.webhooks.receiver import PATH  # noqa: E402
from sandbox.process import SandboxProcess  # noqa: E402
from tests.alerts_servers import free_port, start_smtp  # noqa: E402

TARGET_P95_S = 60.0
ROUND_WAIT_S = 120.0
QUIET_S = 5.0


def alert_keys(db: Path) -> set[str] | None:
    """The alert keys in the outbox, or None while the receiver holds the file."""
    try:
        with duckdb.connect(str(db), read_only=True) as con:
            return {
                r[0] for r in con.execute("SELECT alert_key FROM analytics.alert_outbox").fetchall()
            }
    except (duckdb.IOException, duckdb.CatalogException):
        return None


def wall(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hours", type=float, default=6.0)
    args = parser.parse_args()

    logging.getLogger("mail.log").setLevel(logging.ERROR)  # aiosmtpd's deprecation notes
    tmp = Path(tempfile.mkdtemp(prefix="bench_alert_latency_"))
    db, inbox = tmp / "w.duckdb", tmp / "inbox.sqlite"
    log_path = tmp / "receiver.log"
    smtp = start_smtp(tmp, mode="insecure")
    arrivals: list[float] = []
    handler: Any = smtp.inbox
    original = handler.handle_DATA

    async def timed(server: Any, session: Any, envelope: Any) -> str:
        out: str = await original(server, session, envelope)
        arrivals.append(time.time())
        return out

    handler.handle_DATA = timed
    latencies: list[float] = []
    proc = None
    log = log_path.open("wb")
    try:
        with SandboxProcess(
            containers=args.containers, seed=33, rate_limit=100, webhook_backoff=0.2
        ) as sb:
            t0 = time.perf_counter()
            run_load(db, ApiSettings(base_url=sb.base_url, api_key=sb.api_key))
            publish_risk(db)
            print(
                f"set-up: {args.containers:,} containers loaded and risk published in "
                f"{time.perf_counter() - t0:.1f} s; receiver log {log_path}"
            )
            port = free_port()
            hook = sb.register_webhook(f"http://127.0.0.1:{port}{PATH}")
            proc, _ = start_receiver_process(
                hook["attributes"]["secret"],
                inbox,
                port=port,
                duckdb=db,
                env={
                    "TERMINAL49_API_KEY": sb.api_key,
                    "TERMINAL49_BASE_URL": sb.base_url,
                    "FREETIME_ALERT_URLS": smtp.url(),
                },
                stderr=log,
            )
            seen_notes = {n["id"] for n in sb.deliveries()}
            keys = alert_keys(db) or set()
            for r in range(1, args.rounds + 1):
                mails_before = len(arrivals)
                sb.advance(hours=args.hours)
                sb.deliver_pending(timeout=60)
                settled = time.time()
                notes = [
                    n
                    for n in sb.deliveries()
                    if n["id"] not in seen_notes and n["webhook_id"] == hook["id"]
                ]
                seen_notes |= {n["id"] for n in notes}
                sent = [
                    wall(n["meta"]["last_attempt_at"])
                    for n in notes
                    if n["meta"].get("last_attempt_at")
                ]
                first = min(sent) if sent else settled
                new_keys: set[str] = set()
                last_change, seen = time.time(), (0, 0)
                while time.time() - settled < ROUND_WAIT_S:
                    now_keys = alert_keys(db)
                    if now_keys is not None:
                        new_keys = now_keys - keys
                    state = (len(new_keys), len(arrivals) - mails_before)
                    if state != seen:
                        seen, last_change = state, time.time()
                    done = state[1] >= state[0] and (state[0] > 0 or notes == [])
                    if time.time() - last_change >= QUIET_S and (
                        done or time.time() - settled > 30
                    ):
                        break
                    time.sleep(0.25)
                keys |= new_keys
                got = [a - first for a in arrivals[mails_before:]]
                latencies += got
                shown = (
                    f"min {min(got):.1f} s, median {statistics.median(got):.1f} s, "
                    f"max {max(got):.1f} s"
                    if got
                    else "-"
                )
                print(
                    f"round {r}: {len(notes)} notifications (sent over "
                    f"{(max(sent) - first) if sent else 0:.1f} s, settled "
                    f"{settled - first:.1f} s after the first), {len(new_keys)} alerts "
                    f"raised, {len(got)} emails received; latency {shown}"
                )
            sb.delete_webhook(hook["id"])
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except Exception:
                proc.kill()
                proc.wait(timeout=10)
        smtp.controller.stop()
        log.close()
    if not latencies:
        print("no email received: no figure")
        sys.exit(1)
    p95 = percentile(latencies, 0.95)
    print(
        f"all {len(latencies)} emails: p50 {percentile(latencies, 0.5):.1f} s, p95 "
        f"{p95:.1f} s, max {max(latencies):.1f} s (target p95 < {TARGET_P95_S:.0f} s: "
        f"{'met' if p95 < TARGET_P95_S else 'NOT met'}); load average "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    lines = log_path.read_text().splitlines()
    if any("Traceback" in line for line in lines):
        print(f"the receiver's log has a traceback: {log_path}")


if __name__ == "__main__":
    main()
