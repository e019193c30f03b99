"""Sandbox benchmark: serving throughput and generation memory.

Run: ``uv run python benchmarks/bench_sandbox.py [--serve-containers N] [--gen-containers N]``

1. Serving: a 100,000-container sandbox in its own process (``SandboxProcess``); this process
   pages ``/v2/containers?include=shipment&page[size]=100`` (the sandbox caps it at 50, as live)
   to the end with one httpx client and reports pages/s and containers/s. Target: >= 3,000
   containers/s. It then pages the same list filtered by ``filter[updated_at]=>=1.days.ago``
   and reports that scan the same way.
2. Generation: a fresh subprocess generates 1,000,000 containers and reports the wall time and
   its peak RSS (``resource.getrusage``). Target: within 2 GB.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx

from sandbox.process import SandboxProcess

SERVE_TARGET = 3000.0
RSS_TARGET_MB = 2048.0

_GEN_SCRIPT = """
import json, resource, sys, time
t0 = time.perf_counter()
from sandbox.model import Account
acct = Account.generate(int(sys.argv[1]), 49, 1795176000)
secs = time.perf_counter() - t0
rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": secs, "peak_rss_mb": rss_mb, "containers": len(acct.container_ids),
                  "shipments": len(acct.shipment_ids),
                  "column_mb": (acct.containers.nbytes() + acct.shipments.nbytes()) / 2**20}))
"""


def bench_serving(n: int) -> None:
    """Page every container with include=shipment and print the rates."""
    t0 = time.perf_counter()
    with SandboxProcess(containers=n, seed=49, clock="2026-11-20T12:00:00Z") as sb:
        startup = time.perf_counter() - t0
        headers = {"Authorization": f"Token {sb.api_key}"}
        with httpx.Client(headers=headers, timeout=60) as client:
            pages, containers, secs = _scan(
                client, f"{sb.base_url}/containers?include=shipment&page[size]=100"
            )
            fpages, fcontainers, fsecs = _scan(
                client,
                f"{sb.base_url}/containers?include=shipment&page[size]=100"
                "&filter[updated_at]=%3E%3D1.days.ago",
            )
    cps = containers / secs
    print(f"serve: {n:,}-container account, startup {startup:.1f} s")
    print(f"serve: {pages:,} pages, {containers:,} containers in {secs:.1f} s")
    print(
        f"serve: {pages / secs:,.1f} pages/s, {cps:,.0f} containers/s "
        f"(target >= {SERVE_TARGET:,.0f}) {'OK' if cps >= SERVE_TARGET else 'BELOW TARGET'}"
    )
    print(
        f"serve filtered (updated_at >= 1.days.ago): {fpages:,} pages, {fcontainers:,} "
        f"containers in {fsecs:.1f} s, {fcontainers / fsecs:,.0f} containers/s"
    )


def _scan(client: httpx.Client, url: str | None) -> tuple[int, int, float]:
    """Follow ``links.next`` from ``url``; returns (pages, containers, seconds)."""
    pages = containers = 0
    t0 = time.perf_counter()
    while url:
        resp = client.get(url)
        resp.raise_for_status()
        body = resp.json()
        pages += 1
        containers += len(body["data"])
        url = body["links"].get("next")
    return pages, containers, time.perf_counter() - t0


def bench_generation(n: int) -> None:
    """Generate ``n`` containers in a subprocess and print time and peak RSS."""
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", _GEN_SCRIPT, str(n)],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    )
    r = json.loads(out.stdout)
    ok = r["peak_rss_mb"] <= RSS_TARGET_MB
    print(
        f"generate: {r['containers']:,} containers / {r['shipments']:,} shipments "
        f"in {r['seconds']:.1f} s"
    )
    print(
        f"generate: peak RSS {r['peak_rss_mb']:,.0f} MB (target <= {RSS_TARGET_MB:,.0f} MB) "
        f"{'OK' if ok else 'ABOVE TARGET'}; columns {r['column_mb']:,.0f} MB"
    )


def main() -> None:
    """Parse options and run both benchmarks."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--serve-containers", type=int, default=100_000)
    p.add_argument("--gen-containers", type=int, default=1_000_000)
    args = p.parse_args()
    bench_serving(args.serve_containers)
    bench_generation(args.gen_containers)


if __name__ == "__main__":
    main()
