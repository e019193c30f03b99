"""Soak: loads, webhook deliveries and applies together, with faults on and kills, then the
warehouse against the ground truth.

Run: uv run python benchmarks/soak.py [--minutes 4] [--containers 3000]

For ``--minutes``, in a loop: the sandbox's clock moves (containers change, notifications go out
to a real receiver process), a `freetime load` runs as a process and every third one is killed
with SIGKILL at a random moment, a `freetime webhooks apply` runs beside the load. The sandbox
serves 5% 5xx, 5% 429, 1% truncated bodies and 1% dropped connections throughout. At the end
one more load and apply with the world still, then the warehouse is compared with the ground
truth. Prints the counts: deliveries, applies, loads, kills survived, retries, differences.
Bounded: every process has a timeout and the loop stops at ``--minutes``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb

from freetime_cli.webhooks_cmd import start_receiver_process
from pipelines.webhooks.receiver import PATH
from sandbox.process import SandboxProcess

FAULTS = "5xx=0.05,429=0.05,truncate=0.01,drop=0.01"
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


def differences(db: Path, truth: dict[str, Any]) -> dict[str, int]:
    """Records and values in the warehouse that differ from the ground truth."""
    found: Counter[str] = Counter()
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "SELECT id, current_status, available_for_pickup FROM terminal49.containers"
        ).fetchall()
        holds = Counter(
            con.execute(
                "SELECT container_id, name, status FROM terminal49.container_holds"
            ).fetchall()
        )
    got = {r[0]: r[1:] for r in rows}
    want_holds: Counter[tuple[Any, ...]] = Counter()
    for c in truth["containers"]:
        a = c["attributes"]
        if c["id"] not in got:
            found["containers missing"] += 1
        elif got[c["id"]] != (a["current_status"], a["available_for_pickup"]):
            found["containers stale"] += 1
        for h in a.get("holds_at_pod_terminal") or []:
            want_holds[(c["id"], h["name"], h["status"])] += 1
    found["containers extra"] = len(set(got) - {c["id"] for c in truth["containers"]})
    found["holds differing"] = sum(((holds - want_holds) + (want_holds - holds)).values())
    return dict(+found)


def soak(minutes: float, containers: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    with (
        SandboxProcess(
            containers=containers, seed=seed, faults=FAULTS, webhook_backoff=0.2, webhook_timeout=5
        ) as sb,
        tempfile.TemporaryDirectory() as tmp,
    ):
        db, inbox = Path(tmp) / "w.duckdb", Path(tmp) / "inbox.sqlite"
        with socket.socket() as probe:  # a free port for the receiver, known before it starts
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        hook = sb.register_webhook(f"http://127.0.0.1:{port}{PATH}")
        receiver, _ = start_receiver_process(hook["attributes"]["secret"], inbox, port=port)
        args = ("--duckdb", str(db))
        base = ("--base-url", sb.base_url)
        deadline = time.monotonic() + minutes * 60
        try:
            while time.monotonic() < deadline:
                counts["advances"] += 1
                sb.advance(hours=rng.choice([1, 3, 6]))
                load = _cli("load", *args, *base, key=sb.api_key)
                time.sleep(rng.uniform(0.5, 2.0))
                apply = _cli(
                    "webhooks", "apply", *args, "--inbox", str(inbox), *base, key=sb.api_key
                )
                if counts["loads"] % 3 == 2:
                    time.sleep(rng.uniform(0.0, 4.0))
                    if load.poll() is None:
                        load.send_signal(signal.SIGKILL)
                        counts["kills"] += 1
                for name, proc in (("loads", load), ("applies", apply)):
                    out, err = proc.communicate(timeout=600)
                    counts[name] += 1
                    if proc.returncode not in (0, -signal.SIGKILL):
                        counts[f"{name} failed"] += 1
                        print(
                            f"{name} failed ({proc.returncode}): {err.strip()[-400:]}",
                            file=sys.stderr,
                        )
            sb.deliver_pending(timeout=120)
            for final in (
                ("load", *args, *base),
                ("webhooks", "apply", *args, "--inbox", str(inbox), *base),
            ):
                proc = _cli(*final, key=sb.api_key)
                _, err = proc.communicate(timeout=900)
                if proc.returncode != 0:
                    raise SystemExit(f"final {final[0]} failed: {err[-2000:]}")
            truth = sb.ground_truth()
            with duckdb.connect(str(db), read_only=True) as con:
                applied = con.execute(
                    "SELECT count(*) FROM terminal49.webhook_notifications"
                ).fetchone()
            counts["notifications applied"] = applied[0] if applied else 0
            counts["deliveries"] = len(sb.deliveries())
            faults = sb.stats().get("faults", {})
            diff = differences(db, truth)
        finally:
            receiver.terminate()
            receiver.wait(10)
    return {
        "minutes": minutes,
        "containers": containers,
        "faults_served": faults,
        "retries": sum(faults.values()),  # every fault served is a request tried again
        **dict(counts),
        "differences": diff,
        "equal_to_ground_truth": not diff,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=4.0)
    parser.add_argument("--containers", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(soak(args.minutes, args.containers, args.seed), indent=1))


if __name__ == "__main__":
    main()
