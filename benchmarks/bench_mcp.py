"""Benchmark: the tool server over HTTP with the official mcp client, on a loaded warehouse.

Run: ``uv run python benchmarks/bench_mcp.py [--containers 100000] [--duckdb PATH]``. Builds
the warehouse from the sandbox (and publishes risk) unless ``--duckdb`` names one, starts
``freetime mcp serve`` on loopback and warms it (one snapshot), then prints:

* p50/p95 latency of ``get_container`` (a different container each call, drawn from the whole
  warehouse) and of ``containers_at_risk`` (limit 50), one client, calls in turn;
* calls/s with ``--clients`` concurrent clients (asyncio tasks, each its own session, half
  ``get_container`` and half ``containers_at_risk``), counted over ``--seconds`` once every
  client has initialized;
* the CPU seconds per call of the server and of this client process meanwhile, the server's
  peak memory, and the load average, since the machine may be shared.

Targets (issue 24): p95 under 50 ms for both, at least 200 calls/s with 20 clients.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import anyio
import duckdb
from mcp import Client

from freetime_cli.mcp_cmd import serving

REPO = Path(__file__).resolve().parents[1]
CLOCK = "2026-11-20T12:00:00Z"


def build(n: int, path: Path) -> None:
    sys.path.insert(0, str(REPO))
    from pipelines.analytics import publish_risk
    from pipelines.config import ApiSettings
    from pipelines.load import run_load
    from sandbox.process import SandboxProcess

    with SandboxProcess(containers=n, seed=49, clock=CLOCK, rate_limit=0) as sb:
        run_load(
            path, ApiSettings(base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=1e9)
        )
    publish_risk(path, as_of=datetime.fromisoformat(CLOCK.replace("Z", "+00:00")))


@contextlib.contextmanager
def server(db: Path) -> Iterator[tuple[str, int]]:
    """``freetime mcp serve`` on a free loopback port: its endpoint URL and process id."""
    with serving(db) as (base, proc):
        yield base + "/mcp", proc.pid


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of process ``pid`` so far; NaN where /proc cannot tell."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def peak_rss_mb(pid: int) -> float:
    """Peak resident memory of process ``pid`` (VmHWM) in MB; NaN where /proc cannot tell."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return float("nan")


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1000


async def latency(url: str, numbers: list[str], calls: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"get_container": [], "containers_at_risk": []}
    async with Client(url) as c:
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


async def throughput(url: str, numbers: list[str], clients: int, seconds: float) -> int:
    """Calls answered in ``seconds`` by ``clients`` sessions, all initialized beforehand."""
    done = 0
    ready = anyio.Event()
    waiting = clients
    stop = 0.0

    async def one(k: int) -> None:
        nonlocal done, waiting, stop
        async with Client(url) as c:
            waiting -= 1
            if waiting == 0:
                stop = time.perf_counter() + seconds
                ready.set()
            await ready.wait()
            i = k * 7919
            while time.perf_counter() < stop:
                if i % 2:
                    r = await c.call_tool("get_container", {"container": numbers[i % len(numbers)]})
                else:
                    r = await c.call_tool("containers_at_risk", {"limit": 50})
                assert not r.is_error, r.content
                if time.perf_counter() <= stop:
                    done += 1
                i += 1

    async with anyio.create_task_group() as tg:
        for k in range(clients):
            tg.start_soon(one, k)
    return done


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
        numbers = [
            r[0]
            for r in con.execute(
                "SELECT number FROM terminal49.containers USING SAMPLE 20000 ROWS"
            ).fetchall()
        ]
        con.close()
        random.Random(1).shuffle(numbers)
        with server(db) as (url, pid):
            anyio.run(latency, url, numbers[-20:], 10)  # warm: the snapshot is taken
            lat = anyio.run(latency, url, numbers, a.calls)
            cpu0, own0, t0 = cpu_seconds(pid), time.process_time(), time.perf_counter()
            calls = anyio.run(throughput, url, numbers[a.calls :], a.clients, a.seconds)
            cpu1, own1, t1 = cpu_seconds(pid), time.process_time(), time.perf_counter()
            rss = peak_rss_mb(pid)
    print(
        f"warehouse: {n[0] if n else 0} containers; load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} cores"
    )
    for name, xs in lat.items():
        print(
            f"{name}: p50 {statistics.median(xs) * 1000:.1f} ms, p95 {pct(xs, 0.95):.1f} ms "
            f"({len(xs)} calls, one client)"
        )
    print(
        f"throughput: {calls / a.seconds:.0f} calls/s with {a.clients} concurrent clients "
        f"over {a.seconds:g} s (half get_container, half containers_at_risk limit 50); "
        f"CPU per call: server {(cpu1 - cpu0) / calls * 1000:.1f} ms, clients "
        f"{(own1 - own0) / calls * 1000:.1f} ms; {(t1 - t0) - a.seconds:.1f} s to open the "
        "sessions and finish"
    )
    print(f"server peak memory: {rss:.0f} MB")


if __name__ == "__main__":
    main()
