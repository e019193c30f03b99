"""Benchmark: the tool server over HTTP with the official mcp client, on a loaded warehouse.

Run: ``uv run python benchmarks/bench_mcp.py [--containers 100000] [--duckdb PATH]``. Builds
the warehouse from the sandbox (and publishes risk) unless ``--duckdb`` names one, starts
``freetime mcp serve`` on loopback, then prints p50/p95 latency of ``get_container`` and of
``containers_at_risk`` (limit 50) from one client, and calls/s with 20 concurrent clients
(targets: p95 under 50 ms, 200 calls/s).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import anyio
import duckdb
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.mcp_helpers import mcp_server  # noqa: E402

CLOCK = "2026-11-20T12:00:00Z"


def build(n: int, path: Path) -> None:
    from pipelines.analytics import publish_risk
    from pipelines.config import ApiSettings
    from pipelines.load import run_load
    from sandbox.testing import SandboxProcess

    with SandboxProcess(containers=n, seed=49, clock=CLOCK, rate_limit=0) as sb:
        run_load(path, ApiSettings(base_url=sb.base_url, api_key=sb.api_key,
                                   rate_limit_per_minute=1e9))
    publish_risk(path, as_of=datetime.fromisoformat(CLOCK.replace("Z", "+00:00")))


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1000


async def latency(url: str, numbers: list[str], calls: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"get_container": [], "containers_at_risk": []}
    async with Client(url) as c:
        await c.call_tool("containers_at_risk", {"limit": 50})  # warm
        for i in range(calls):
            t = time.perf_counter()
            r = await c.call_tool("get_container", {"container": numbers[i % len(numbers)]})
            out["get_container"].append(time.perf_counter() - t)
            assert not r.is_error, r.content
            t = time.perf_counter()
            r = await c.call_tool("containers_at_risk", {"limit": 50})
            out["containers_at_risk"].append(time.perf_counter() - t)
            assert not r.is_error
    return out


async def throughput(url: str, numbers: list[str], clients: int, seconds: float) -> float:
    done = 0
    end = time.perf_counter() + seconds

    async def one(k: int) -> None:
        nonlocal done
        async with Client(url) as c:
            i = k
            while time.perf_counter() < end:
                if i % 2:
                    await c.call_tool("get_container", {"container": numbers[i % len(numbers)]})
                else:
                    await c.call_tool("containers_at_risk", {"limit": 50})
                i += 1
                done += 1

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for k in range(clients):
            tg.start_soon(one, k)
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=100_000)
    parser.add_argument("--duckdb", type=Path)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=15.0)
    a = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = a.duckdb or Path(tmp) / "bench.duckdb"
        if not db.exists():
            build(a.containers, db)
        con = duckdb.connect(str(db), read_only=True)
        n = con.execute("SELECT count(*) FROM terminal49.containers").fetchone()
        numbers = [r[0] for r in con.execute(
            "SELECT number FROM terminal49.containers USING SAMPLE 500 ROWS").fetchall()]
        con.close()
        random.Random(1).shuffle(numbers)
        with mcp_server(db) as base:
            url = base + "/mcp"
            lat = anyio.run(latency, url, numbers, a.calls)
            rate = anyio.run(throughput, url, numbers, a.clients, a.seconds)
    print(f"warehouse: {n[0] if n else 0} containers")
    for name, xs in lat.items():
        print(f"{name}: p50 {statistics.median(xs) * 1000:.1f} ms, p95 {pct(xs, 0.95):.1f} ms "
              f"({len(xs)} calls, one client)")
    print(f"throughput: {rate:.0f} calls/s with {a.clients} concurrent clients "
          f"(half get_container, half containers_at_risk limit 50)")


if __name__ == "__main__":
    main()
