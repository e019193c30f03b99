"""Writers side by side during a paced full load (issues 35 and 36).

Run: uv run python benchmarks/bench_side_by_side.py [--containers 10000] [--every 5]

A sandbox of ``--containers`` containers limited to 100 requests a minute, like the live API.
After a first full load, an incremental sync is timed alone. Then a paced full load (a
``freetime load --full`` process) runs while the webhook receiver (applying, as documented)
takes the notifications the sandbox delivers each time its clock moves (every ``--every``
seconds), and an incremental sync is timed again in the middle of it. Prints, as JSON: the
full load's time, the incremental sync's time alone and during the scan, the delay from each
notification's receipt to its publish in the warehouse (p50, p95, max), the acknowledgements'
delivery status, and the warehouse's differences from the ground truth at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import httpx

from freetime_cli.webhooks_cmd import start_receiver_process
from pipelines.webhooks.receiver import PATH
from sandbox.process import SandboxProcess

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str, key: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERMINAL49_")}
    env["TERMINAL49_API_KEY"] = key
    return subprocess.Popen(
        [sys.executable, "-m", "freetime_cli.main", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _timed(*args: str, key: str) -> float:
    return _timed_load(*args, key=key)[0]


def _timed_load(*args: str, key: str) -> tuple[float, dict[str, float]]:
    """Seconds a ``freetime`` command took, the requests it made and the seconds it waited
    for the key's budget (from a load's summary line), and whether it waited for the lock."""
    started = time.monotonic()
    proc = _cli(*args, key=key)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{args} failed:\n{err[-3000:]}")
    said = r"(\d+)\s+requests\s.*?([\d.]+)s\s+waited\s+for\s+the\s+key's\s+budget"
    found = re.search(said, out, re.S)
    budget = {"requests": int(found[1]), "budget_wait_s": float(found[2])} if found else {}
    budget["waited_for_writer"] = err.count("waiting for ")  # the lock held by another writer
    return time.monotonic() - started, budget


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def differences(db: Path, truth: dict[str, Any]) -> dict[str, int]:
    """Containers and shipments missing or extra, and containers whose status differs."""
    found: dict[str, int] = {}
    with duckdb.connect(str(db), read_only=True) as con:
        for table in ("containers", "shipments"):
            ids = {r[0] for r in con.execute(f"SELECT id FROM terminal49.{table}").fetchall()}
            want = {r["id"] for r in truth[table]}
            found[f"{table} missing"] = len(want - ids)
            found[f"{table} extra"] = len(ids - want)
        status = dict(
            con.execute("SELECT id, current_status FROM terminal49.containers").fetchall()
        )
    found["containers stale"] = sum(
        1
        for c in truth["containers"]
        if status.get(c["id"], c["attributes"]["current_status"])
        != c["attributes"]["current_status"]
    )
    return {k: v for k, v in found.items() if v}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--containers", type=int, default=10_000)
    parser.add_argument("--every", type=float, default=5.0)
    args = parser.parse_args()
    with (
        SandboxProcess(
            containers=args.containers,
            seed=35,
            rate_limit=100,
            active_share=0.1,
            webhook_backoff=0.5,
            webhook_timeout=5,
        ) as sb,
        tempfile.TemporaryDirectory() as tmp,
    ):
        db, inbox = Path(tmp) / "w.duckdb", Path(tmp) / "inbox.sqlite"
        target = ("--duckdb", str(db), "--base-url", sb.base_url)
        first_full = _timed("load", "--full", *target, key=sb.api_key)
        sb.advance(hours=1)
        incremental_alone, alone = _timed_load("load", *target, key=sb.api_key)
        port = _free_port()
        hook = sb.register_webhook(f"http://127.0.0.1:{port}{PATH}")
        receiver, url = start_receiver_process(
            hook["attributes"]["secret"],
            inbox,
            port=port,
            duckdb=db,
            env={"TERMINAL49_API_KEY": sb.api_key, "TERMINAL49_BASE_URL": sb.base_url},
        )
        try:
            started = time.monotonic()
            full = _cli("load", "--full", *target, key=sb.api_key)
            incremental_during: float | None = None
            during: dict[str, float] = {}
            while full.poll() is None:
                time.sleep(args.every)
                sb.advance(minutes=10)
                sb.deliver_pending(timeout=30)
                elapsed = time.monotonic() - started
                if incremental_during is None and elapsed > 30:
                    incremental_during, during = _timed_load("load", *target, key=sb.api_key)
            full_seconds = time.monotonic() - started
            _, err = full.communicate()
            if full.returncode != 0:
                raise SystemExit(f"the full load failed:\n{err[-3000:]}")
            sb.deliver_pending(timeout=60)
            deadline = time.monotonic() + 120
            health = url.rsplit("/webhooks", 1)[0] + "/healthz"
            while httpx.get(health).json()["backlog"] and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            receiver.terminate()
            receiver.wait(timeout=30)
            sb.delete_webhook(hook["id"])
        statuses: dict[str, int] = {}
        for n in sb.deliveries():
            if n["webhook_id"] == hook["id"]:
                code = str((n.get("meta") or {}).get("last_status_code"))
                statuses[code] = statuses.get(code, 0) + 1
        with duckdb.connect(str(db), read_only=True) as con:
            delays = [
                float(r[0])
                for r in con.execute(
                    "SELECT epoch(l.published_at) - epoch(w.received_at) "
                    "FROM terminal49.webhook_notifications w JOIN terminal49.freetime_loads l "
                    "ON w._dlt_load_id = l.load_id"
                ).fetchall()
            ]
        print(
            json.dumps(
                {
                    "containers": args.containers,
                    "first_full_load_s": round(first_full, 1),
                    "paced_full_load_s": round(full_seconds, 1),
                    "incremental_alone_s": round(incremental_alone, 1),
                    "incremental_during_s": round(incremental_during or float("nan"), 1),
                    "incremental_alone": alone,
                    "incremental_during": during,
                    "notifications": len(delays),
                    "receipt_to_publish_s": {
                        "p50": round(statistics.median(delays), 2) if delays else None,
                        "p95": round(_percentile(delays, 0.95), 2),
                        "max": round(max(delays), 2) if delays else None,
                    },
                    "delivery_status_codes": statuses,
                    "differences_from_ground_truth": differences(db, sb.ground_truth()),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
