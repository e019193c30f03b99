"""Load benchmark against the sandbox: speed and memory guards, full against incremental.

Run: uv run python benchmarks/bench_load.py [--only speed|sync|paced] [--sizes 100000]
[--repeat 2] [--sync-containers 100000] [--paced-containers 10000]

- ``speed``: per account size, the best of ``--repeat`` full loads against the best bare httpx
  download of the same pages (same paging, same concurrency), alternately against one sandbox,
  and the loader's peak RSS. Guards: 100,000 containers at most 2.5 x the bare download; peak
  RSS under 600 MB at 1,000,000 (``--sizes 1000000``). Where a load's time goes: the load's
  own scan with nothing written (``scan_alone_s``), and per load the extraction (the scan
  feeding dlt, ``extract_s``) and everything after it (``write_s``: dlt's load into the
  incoming dataset, the publishing transaction).
- ``sync``: an account of which 10% of containers are active (``--active-share 0.1``), the rest
  settled. A full load (requests against the floor ``ceil(N/50) + ceil(S/100)``), an hour of
  the clock, then an incremental load (requests against the full load's), the warehouse
  compared with the ground truth after each; then the same requests projected for the captured
  live account (292,863 containers, 170,470 shipments) at 100 requests a minute. Targets: full
  within 2% of the floor, incremental at most 15% of full, an hourly sync of the captured
  account under 12 minutes of API budget.
- ``paced``: the same full and incremental loads with the sandbox limited to 100 requests a
  minute (a smaller account, for time): minutes taken, requests, answers 429.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb
import httpx

from pipelines.config import ApiSettings
from pipelines.load import full_lists
from pipelines.terminal49.client import Terminal49Client
from pipelines.terminal49.pages import Claims
from pipelines.terminal49.scan import ListScan
from pipelines.terminal49.settings import CONTAINER_INCLUDE, SHIPMENT_INCLUDE
from sandbox.process import SandboxProcess

CLOCK = "2026-11-20T12:00:00Z"
CONCURRENCY = 4
LIVE_CONTAINERS, LIVE_SHIPMENTS = 292_863, 170_470

#: One load in its own process, so that its peak RSS is its own.
LOADER = """
import json, re, sys, time
from pipelines.config import ApiSettings
from pipelines.load import run_load
base_url, key, db, rate, full = sys.argv[1:6]
rate = float(rate)
t = time.monotonic()
s = run_load(db, ApiSettings(base_url=base_url, api_key=key, rate_limit_per_minute=rate),
             full=True if full == "full" else None)
print(json.dumps({"seconds": time.monotonic() - t, "extract_seconds": s.extract_seconds,
                  "kind": s.kind, "rows": s.rows,
                  "requests": s.requests, "rate_limited": s.rate_limited,
                  "window_from": str(s.window_from), "warnings": s.warnings,
                  # VmHWM, not ru_maxrss: that one keeps the forking parent's size across exec
                  "peak_rss_mb": int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status")
                                               .read()).group(1)) / 1024}))
"""


def run_loader(sb: SandboxProcess, db: Path, rate: float = 1e9, full: bool = False) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            LOADER,
            sb.base_url,
            sb.api_key,
            str(db),
            str(rate),
            "full" if full else "auto",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"loader failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def bare_download(base_url: str, key: str) -> tuple[float, int]:
    """Download every page of both lists the way a full load pages them (the size the API
    answers, CONCURRENCY at a time); return (seconds, pages)."""
    headers = {"Authorization": f"Token {key}"}
    started, pages = time.monotonic(), 0
    with httpx.Client(base_url=base_url, headers=headers, timeout=60) as client:
        for path, include in (("/containers", CONTAINER_INCLUDE), ("/shipments", SHIPMENT_INCLUDE)):
            params: dict[str, Any] = {"page[size]": 100, "include": include}
            first = client.get(path, params={**params, "page[number]": 1}).json()
            size = max(1, len(first["data"]))
            n = max(1, math.ceil(first["meta"]["total"] / size))

            def get(number: int, path: str = path, params: dict = params) -> int:
                return len(client.get(path, params={**params, "page[number]": number}).content)

            with ThreadPoolExecutor(CONCURRENCY) as pool:
                list(pool.map(get, range(2, n + 1)))
            pages += n
    return time.monotonic() - started, pages


def scan_alone(base_url: str, key: str) -> float:
    """A full load's scan (paging, parsing and flattening in the client's threads) with nothing
    written: seconds."""
    client = Terminal49Client.for_api(
        ApiSettings(base_url=base_url, api_key=key, rate_limit_per_minute=1e9)
    )
    claims, started = Claims(), time.monotonic()
    try:
        for spec in full_lists():
            for _ in ListScan(client, spec.kind, spec.path, spec.include, claims=claims):
                pass
    finally:
        client.close()
    return time.monotonic() - started


def differences(db: Path, truth: dict[str, Any]) -> Counter[str]:
    """What the warehouse holds that the ground truth does not, and the other way round."""
    found: Counter[str] = Counter()
    with duckdb.connect(str(db), read_only=True) as con:
        for table, key in (("containers", "containers"), ("shipments", "shipments")):
            ids = {r[0] for r in con.execute(f"SELECT id FROM terminal49.{table}").fetchall()}
            want = {r["id"] for r in truth[key]}
            found[f"{table} missing"] = len(want - ids)
            found[f"{table} extra"] = len(ids - want)
        holds = Counter(
            con.execute(
                "SELECT container_id, name, status FROM terminal49.container_holds"
            ).fetchall()
        )
        status = dict(
            con.execute("SELECT id, current_status FROM terminal49.containers").fetchall()
        )
    want_holds: Counter[tuple[Any, ...]] = Counter()
    for c in truth["containers"]:
        for h in c["attributes"].get("holds_at_pod_terminal") or []:
            want_holds[(c["id"], h["name"], h["status"])] += 1
        want = c["attributes"]["current_status"]
        if status.get(c["id"], want) != want:
            found["containers stale"] += 1
    found["holds differing"] = sum(((holds - want_holds) + (want_holds - holds)).values())
    return +found


def bench_speed(n: int, repeat: int) -> dict:
    with (
        SandboxProcess(containers=n, seed=7, clock=CLOCK) as sb,
        tempfile.TemporaryDirectory() as tmp,
    ):
        bare, scans, loads = [], [], []
        for k in range(repeat):
            bare.append(bare_download(sb.base_url, sb.api_key)[0])
            scans.append(scan_alone(sb.base_url, sb.api_key))
            loads.append(run_loader(sb, Path(tmp) / f"w{k}.duckdb", full=True))
        best = min(loads, key=lambda r: r["seconds"])
        return {
            "containers": n,
            "bare_s": round(min(bare), 2),
            "scan_alone_s": round(min(scans), 2),
            "load_s": round(best["seconds"], 2),
            "ratio": round(best["seconds"] / min(bare), 2),
            "extract_s": round(best["extract_seconds"], 2),
            "write_s": round(best["seconds"] - best["extract_seconds"], 2),
            "requests": best["requests"],
            "peak_rss_mb": round(max(r["peak_rss_mb"] for r in loads)),
            "runs (bare, scan alone, load)": [
                (round(b, 2), round(c, 2), round(r["seconds"], 2))
                for b, c, r in zip(bare, scans, loads, strict=True)
            ],
        }


def bench_sync(n: int, rate: float = 1e9) -> dict:
    """A full load, an hour of the clock, an incremental load: requests, time, correctness."""
    with (
        SandboxProcess(
            containers=n,
            seed=21,
            clock=CLOCK,
            active_share=0.1,
            rate_limit=int(rate) if rate < 1e9 else 0,
        ) as sb,
        tempfile.TemporaryDirectory() as tmp,
    ):
        db = Path(tmp) / "w.duckdb"
        truth = sb.ground_truth()
        shipments = len(truth["shipments"])
        floor = math.ceil(n / 50) + math.ceil(shipments / 100)
        full = run_loader(sb, db, rate)
        full_diff = differences(db, truth)
        moved = sb.advance(hours=1)
        incremental = run_loader(sb, db, rate)
        inc_diff = differences(db, sb.ground_truth())
    share = incremental["requests"] / full["requests"]
    live_full = math.ceil(LIVE_CONTAINERS / 50) + math.ceil(LIVE_SHIPMENTS / 100)
    return {
        "containers": n,
        "shipments": shipments,
        "floor": floor,
        "full": {k: full[k] for k in ("requests", "seconds", "rate_limited", "peak_rss_mb")},
        "full_over_floor": round(full["requests"] / floor - 1, 4),
        "full_differences": dict(full_diff),
        "changed_in_the_hour": moved.get("changed_containers"),
        "incremental": {
            k: incremental[k]
            for k in ("requests", "seconds", "rate_limited", "window_from", "kind")
        },
        "incremental_share": round(share, 3),
        "incremental_differences": dict(inc_diff),
        "projection_live": {
            "full_requests": live_full,
            "full_minutes_at_100_per_min": round(live_full / 100, 1),
            "incremental_requests": math.ceil(live_full * share),
            "incremental_minutes_at_100_per_min": round(live_full * share / 100, 1),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["speed", "sync", "paced"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--sync-containers", type=int, default=100_000)
    parser.add_argument("--paced-containers", type=int, default=10_000)
    args = parser.parse_args()
    if args.only in (None, "speed"):
        for n in args.sizes:
            print(json.dumps({"speed": bench_speed(n, args.repeat)}), flush=True)
    if args.only in (None, "sync"):
        print(json.dumps({"sync": bench_sync(args.sync_containers)}), flush=True)
    if args.only in (None, "paced"):
        print(json.dumps({"paced": bench_sync(args.paced_containers, rate=100)}), flush=True)


if __name__ == "__main__":
    main()
