"""Webhook benchmark: acknowledgements per second, and change-to-row latency.

1. ``freetime webhooks serve`` runs as a subprocess (uvicorn, SQLite inbox); a separate client
   process posts N signed notifications over loopback with C connections; we report the
   notifications per second the receiver acknowledged (each committed before its 200).
2. The sandbox serves an account, a full load fills the warehouse, a webhook points at the
   receiver; ``POST /admin/advance`` changes containers; we time from the advance until the
   changed rows are in DuckDB (sandbox delivery + receiver + ``apply_inbox``).

Usage: ``uv run python benchmarks/bench_webhooks.py [--count 3000] [--concurrency 32]``
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from freetime_cli.webhooks_cmd import start_receiver_process

REPO = Path(__file__).resolve().parents[1]

SECRET = "bench-secret"

CLIENT = r"""
import asyncio, sys, time, copy, orjson, httpx
from pipelines.webhooks.signing import sign
url, n, conc, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
template = orjson.loads(open(path, "rb").read())
bodies = []
for k in range(n):
    template["data"]["id"] = f"bench-{k}"
    b = orjson.dumps(template)
    bodies.append((b, sign(b, sys.argv[5])))
async def main():
    ok = 0
    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    async with httpx.AsyncClient(limits=limits, timeout=30) as c:
        sem = asyncio.Semaphore(conc)
        async def one(b, s):
            nonlocal ok
            async with sem:
                r = await c.post(url, content=b, headers={"X-T49-Webhook-Signature": s,
                                                          "Content-Type": "application/json"})
                ok += r.status_code == 200
        t = time.perf_counter()
        await asyncio.gather(*(one(b, s) for b, s in bodies))
        dt = time.perf_counter() - t
    print(ok, dt)
asyncio.run(main())
"""


def bench_throughput(tmp: Path, count: int, concurrency: int) -> float:
    proc, url = start_receiver_process(SECRET, tmp / "inbox-rate.sqlite")
    try:
        example = REPO / "tests/fixtures/terminal49/webhooks/container.updated.json"
        out = subprocess.run(
            [sys.executable, "-c", CLIENT, url, str(count), str(concurrency), str(example), SECRET],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        ok, seconds = int(out[0]), float(out[1])
        assert ok == count, f"only {ok} of {count} acknowledged"
        return ok / seconds
    finally:
        proc.terminate()
        proc.wait(10)


def bench_latency(tmp: Path, containers: int) -> tuple[float, dict[str, float], int]:
    from pipelines.config import ApiSettings
    from pipelines.load import run_load
    from pipelines.terminal49.client import Terminal49Client
    from pipelines.warehouse import reading
    from pipelines.webhooks.apply import apply_inbox
    from sandbox.testing import SandboxProcess

    duckdb_path, inbox = tmp / "w.duckdb", tmp / "inbox-latency.sqlite"
    with SandboxProcess(containers=containers, webhook_backoff=0.2) as sb:
        api = ApiSettings.resolve(
            base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100_000
        )
        run_load(duckdb_path, api)
        # the receiver needs the secret the sandbox generates: register, then start on the port
        import socket

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        hook = sb.register_webhook(f"http://127.0.0.1:{port}/webhooks/terminal49")
        secret = hook["attributes"]["secret"]
        proc, _ = start_receiver_process(secret, inbox, port=port)
        try:
            t0 = time.perf_counter()
            sb.advance(hours=24)
            sb.deliver_pending(timeout=120)
            t1 = time.perf_counter()
            with Terminal49Client(api.base_url, api.api_key or "", rate_limit_per_minute=None) as c:
                summary = apply_inbox(duckdb_path, inbox, c)
            t2 = time.perf_counter()
        finally:
            proc.terminate()
            proc.wait(10)
        truth = {
            c["id"]: c["attributes"]["current_status"] for c in sb.ground_truth()["containers"]
        }
        with reading(duckdb_path) as con:
            got = dict(
                con.execute("select id, current_status from terminal49.containers").fetchall()
            )
        wrong = sum(1 for cid, st in truth.items() if got.get(cid) != st)
    return (
        t2 - t0,
        {"deliver": t1 - t0, "apply": t2 - t1, "notifications": summary.notifications},
        wrong,
    )


def main() -> None:
    from freetime_cli._common import quiet_logging

    quiet_logging()
    p = argparse.ArgumentParser()
    p.add_argument("--count", type=int, default=3000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--containers", type=int, default=500)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rate = bench_throughput(tmp, a.count, a.concurrency)
        print(
            f"receiver: {rate:.0f} notifications/s acknowledged "
            f"({a.count} signed posts, {a.concurrency} concurrent, separate client process)"
        )
        total, split, wrong = bench_latency(tmp, a.containers)
        print(
            f"change to row: {total:.2f}s from POST /admin/advance to the rows in DuckDB "
            f"(delivery {split['deliver']:.2f}s, apply {split['apply']:.2f}s, "
            f"{split['notifications']:.0f} notifications; containers differing from the "
            f"sandbox afterwards: {wrong})"
        )


if __name__ == "__main__":
    main()
