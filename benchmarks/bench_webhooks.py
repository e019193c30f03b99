"""Webhook benchmark: acknowledgements per second, and change-to-row latency.

1. ``freetime webhooks serve`` runs as a subprocess (uvicorn, SQLite inbox); a separate client
   process posts N signed notifications over loopback with C connections; we report the
   notifications per second the receiver acknowledged (each committed before its 200).
2. The sandbox serves an account, a full load fills the warehouse, a webhook points at the
   receiver; ``POST /admin/advance`` changes containers; we time from the advance until the
   changed rows are in DuckDB (sandbox delivery + receiver + ``apply_inbox``).
3. Hostile senders against the receiver process as ``serve`` runs it by default: a separate
   process opens ``--trickle`` connections (3,000) that each send a well-formed but wrong
   signature and then a chunked body one byte a second; meanwhile this process posts a signed
   delivery every 100 ms. We report the receiver's peak open files and memory, how the
   trickling connections ended and when, and the valid deliveries' answers and latency.
   Then one sender streams 1 GiB chunked without a signature, another with a wrong one: we
   report what the receiver answered, after how many bytes, and its memory before and after.

Usage: ``uv run python benchmarks/bench_webhooks.py [--count 3000] [--concurrency 32]
[--trickle 3000] [--only throughput|latency|hostile]``
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

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
    from sandbox.process import SandboxProcess

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


TRICKLER = r"""
import asyncio, json, sys, time
port, n, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
head = (b"POST /webhooks/terminal49 HTTP/1.1\r\nHost: rx\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Type: application/json\r\nX-T49-Webhook-Signature: " + b"ab" * 32 + b"\r\n\r\n")
ends = []
async def trickle(reader, writer, start):
    t0 = time.monotonic()
    how = "never cut"
    try:
        while time.monotonic() - start < seconds:
            writer.write(b"1\r\nx\r\n")
            try:
                got = await asyncio.wait_for(reader.read(100), 1.0)
            except asyncio.TimeoutError:
                continue
            how = got[9:12].decode() if got.startswith(b"HTTP/1.1 ") else "closed"
            break
    except OSError:
        how = "reset"
    ends.append((how, time.monotonic() - t0))
    writer.close()
async def main():
    conns = []
    for i in range(0, n, 200):  # batches: the listen backlog is finite
        batch = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", port)
                                       for _ in range(min(200, n - i))), return_exceptions=True)
        for c in batch:
            if isinstance(c, BaseException):
                ends.append(("connect failed", 0.0))
            else:
                c[1].write(head)
                conns.append(c)
    print("ready", len(conns), flush=True)
    start = time.monotonic()
    await asyncio.gather(*(trickle(r, w, start) for r, w in conns))
    print(json.dumps(ends), flush=True)
asyncio.run(main())
"""


def _proc_status(pid: int) -> tuple[int, float]:
    """(open files, resident MB) of process ``pid``, from /proc."""
    files = len(os.listdir(f"/proc/{pid}/fd"))
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return files, int(line.split()[1]) / 1024
    return files, 0.0


def _notification(nid: str) -> bytes:
    attributes = {"event": "container.updated", "created_at": "2026-11-24T10:00:00Z"}
    data = {"id": nid, "type": "webhook_notification", "attributes": attributes}
    return orjson.dumps({"data": data, "included": []})


def bench_trickle(tmp: Path, connections: int, seconds: float = 20.0) -> None:
    """Trickling senders against the default receiver while signed deliveries keep coming."""
    from pipelines.webhooks.signing import HEADER, sign

    proc, url = start_receiver_process(SECRET, tmp / "inbox-trickle.sqlite")
    port = int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    try:
        files0, rss0 = _proc_status(proc.pid)
        attacker = subprocess.Popen(
            [sys.executable, "-c", TRICKLER, str(port), str(connections), str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert attacker.stdout is not None
        ready = attacker.stdout.readline().split()
        peak_files, peak_rss = files0, rss0
        latencies: list[float] = []
        answers: dict[int | str, int] = {}
        t_start = time.perf_counter()
        t_end = time.monotonic() + seconds
        offsets: list[float] = []
        n = 0
        while time.monotonic() < t_end:
            body = _notification(f"trickle-valid-{n}")
            t = time.perf_counter()
            try:
                code: int | str = httpx.post(
                    url, content=body, headers={HEADER: sign(body, SECRET)}, timeout=10
                ).status_code
            except httpx.TransportError as exc:
                code = type(exc).__name__
            latencies.append(time.perf_counter() - t)
            offsets.append(t - t_start)
            answers[code] = answers.get(code, 0) + 1
            n += 1
            files, rss = _proc_status(proc.pid)
            peak_files, peak_rss = max(peak_files, files), max(peak_rss, rss)
            time.sleep(0.1)
        ends = orjson.loads(attacker.stdout.readline())
        attacker.wait(30)
        files1, rss1 = _proc_status(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)
    # the first second: the receiver is still taking in the 3,000 request heads
    settled = [lat for lat, off in zip(latencies, offsets, strict=True) if off >= 1.0]
    how: dict[str, int] = {}
    for kind, _ in ends:
        how[kind] = how.get(kind, 0) + 1
    cut_after = [t for kind, t in ends if kind != "never cut"]
    print(
        f"trickle: {ready[1]} of {connections} connections opened, each trickling a byte a "
        f"second with a wrong signature; ended: {dict(sorted(how.items()))}"
        + (f", the last cut after {max(cut_after):.1f}s" if cut_after else "")
    )
    print(
        f"trickle: receiver open files {files0} before, peak {peak_files}, {files1} after; "
        f"resident {rss0:.0f} MB before, peak {peak_rss:.0f} MB"
    )
    print(
        f"trickle: {n} signed deliveries meanwhile (one per 100 ms): answers {answers}, "
        f"latency median {statistics.median(latencies) * 1000:.0f} ms, "
        f"worst {max(latencies) * 1000:.0f} ms "
        f"(sent {offsets[latencies.index(max(latencies))]:.1f}s into the attack), "
        f"worst after the first second {max(settled, default=0.0) * 1000:.0f} ms"
    )


def _stream(port: int, signature: str | None, total: int) -> tuple[bytes, int]:
    """Send a chunked body of up to ``total`` bytes; stop once the receiver answers or closes.
    Returns (the start of its answer, bytes of body sent)."""
    import selectors

    head = "POST /webhooks/terminal49 HTTP/1.1\r\nHost: rx\r\nTransfer-Encoding: chunked\r\n"
    if signature is not None:
        head += f"X-T49-Webhook-Signature: {signature}\r\n"
    piece = 1 << 20
    chunk = b"%x\r\n" % piece + b"x" * piece + b"\r\n"
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall((head + "\r\n").encode())
        sel = selectors.DefaultSelector()
        sel.register(sock, selectors.EVENT_READ)
        try:
            while sent < total and not sel.select(0):
                sock.sendall(chunk)
                sent += piece
            if sent >= total:
                sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass
        sel.close()
        try:
            answer = sock.recv(200)
        except OSError:
            answer = b""
    return answer.split(b"\r\n", 1)[0], sent


def bench_big_bodies(tmp: Path, total: int = 1 << 30) -> None:
    """1 GiB chunked bodies, unsigned and wrongly signed: what the receiver answers, when."""
    proc, url = start_receiver_process(SECRET, tmp / "inbox-big.sqlite")
    port = int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    try:
        for label, signature in (("no signature", None), ("a wrong signature", "ab" * 32)):
            _, rss0 = _proc_status(proc.pid)
            t = time.perf_counter()
            status, sent = _stream(port, signature, total)
            seconds = time.perf_counter() - t
            _, rss1 = _proc_status(proc.pid)
            print(
                f"1 GiB chunked, {label}: {status.decode(errors='replace')!r} after "
                f"{sent / (1 << 20):.0f} MiB sent, {seconds:.2f}s; receiver resident "
                f"{rss0:.0f} MB before, {rss1:.0f} MB after"
            )
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    from freetime_cli._common import quiet_logging

    quiet_logging()
    p = argparse.ArgumentParser()
    p.add_argument("--count", type=int, default=3000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--containers", type=int, default=500)
    p.add_argument("--trickle", type=int, default=3000, help="trickling connections")
    p.add_argument("--only", choices=["throughput", "latency", "hostile"])
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if a.only in (None, "throughput"):
            rate = bench_throughput(tmp, a.count, a.concurrency)
            print(
                f"receiver: {rate:.0f} notifications/s acknowledged "
                f"({a.count} signed posts, {a.concurrency} concurrent, separate client process)"
            )
        if a.only in (None, "latency"):
            total, split, wrong = bench_latency(tmp, a.containers)
            print(
                f"change to row: {total:.2f}s from POST /admin/advance to the rows in DuckDB "
                f"(delivery {split['deliver']:.2f}s, apply {split['apply']:.2f}s, "
                f"{split['notifications']:.0f} notifications; containers differing from the "
                f"sandbox afterwards: {wrong})"
            )
        if a.only in (None, "hostile"):
            bench_trickle(tmp, a.trickle)
            bench_big_bodies(tmp)


if __name__ == "__main__":
    main()
