"""PostgreSQL and DuckDB side by side, in one run (issue 30's figures).

Run: ``uv run python benchmarks/bench_postgres.py [--containers 100000] [--risk-containers
1000000] [--readers 20]``. Starts its own PostgreSQL server the way the tests do
(``tests/pg.py``: ``initdb`` and ``pg_ctl`` on a free loopback port) and one sandbox, and prints
one JSON object:

- ``full_load``: a full load of ``--containers`` from the sandbox into a DuckDB file and into
  PostgreSQL (each in its own process, so its peak memory is its own): seconds, ratio (target
  PostgreSQL within 2x DuckDB), loader peak RSS (target < 600 MB);
- ``incremental_load``: an hour of the sandbox's clock later, an incremental load into each
  (target within 1.5x);
- ``readers``: ``--readers`` processes, each with its own connection, alternately run the
  tool server's ``get_container`` (the container by number, its risk row, holds and fees, in
  one read-only transaction) and a BI-style aggregate over ``analytics.demurrage_risk``,
  while a full load and then a risk run (``--risk-runs`` of them, one after the other) write
  the PostgreSQL warehouse: latency
  p50/p95/max per phase and failures (target p95 < 100 ms, no failure). Two models, each
  over its own full load and risk run: ``paced``, readers as the tool server's users and
  dashboards are (a call, then ``--think`` seconds on average: 20 readers make about 20
  calls a second), and ``hammer``, every reader calling back to back (a saturation test:
  on 2 cores shared with the loader and the server, p95 is the queue, about 10 times the
  CPU cost of one call);
- ``risk``: risk over ``--risk-containers`` generated as ``benchmarks/bench_risk.py`` does,
  written into each warehouse (DuckDB from Arrow; PostgreSQL by ADBC's bulk COPY), then
  ``publish_risk`` end to end (read, compute, publish) on each (target PostgreSQL within 3x).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import duckdb  # noqa: E402
import psycopg2  # noqa: E402
from bench_load import LOADER  # noqa: E402
from bench_risk import AS_OF, generate  # noqa: E402

from sandbox.process import SandboxProcess  # noqa: E402
from tests.pg import running_server, server_bin_dir  # noqa: E402

CLOCK = "2026-11-20T12:00:00Z"

#: ``publish_risk`` in its own process: seconds and peak RSS of the whole run.
RISK = """
import json, re, sys, time
from datetime import datetime
from pipelines.analytics import publish_risk
t = time.monotonic()
s = publish_risk(sys.argv[1], as_of=datetime.fromisoformat(sys.argv[2]))
print(json.dumps({"seconds": time.monotonic() - t, "rows": s.rows,
                  "peak_rss_mb": int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status")
                                               .read()).group(1)) / 1024}))
"""

#: The tool server's get_container, in SQL: the container by number, its risk row, its holds
#: and fees.
GET_CONTAINER = [
    "SELECT * FROM terminal49.containers WHERE number = %s",
    "SELECT * FROM analytics.demurrage_risk WHERE container_id = %s",
    "SELECT name, status, description FROM terminal49.container_holds WHERE container_id = %s",
    "SELECT type, amount, currency_code FROM terminal49.container_fees WHERE container_id = %s",
]
AGGREGATE = (
    "SELECT pod_terminal_name, risk_level, count(*), sum(projected_demurrage), "
    "min(days_to_lfd) FROM analytics.demurrage_risk GROUP BY 1, 2 ORDER BY 1, 2"
)


def _child(code: str, *args: str, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        raise SystemExit(f"child failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def load(sb: SandboxProcess, target: str, env: dict[str, str], full: bool) -> dict[str, Any]:
    """One load in its own process (bench_load's loader): seconds, requests, peak RSS."""
    args = (sb.base_url, sb.api_key, target, "1e9", "full" if full else "auto")
    return _child(LOADER, *args, env=env)


def risk(target: str, env: dict[str, str]) -> dict[str, Any]:
    return _child(RISK, target, AS_OF.isoformat(), env=env)


#: the phases the readers' calls are counted under, in order
PHASES = ("idle", "full load", "risk run", "after")


def _reader(
    url: str,
    numbers: list[tuple[str, str]],
    k: int,
    think: float,
    phase: Any,
    stop: Any,
    ready: Any,
    out: Any,
) -> None:
    """One reader process: its own connection, one call after another (alternately
    get_container and the aggregate, each in one read-only transaction), then a think time
    drawn uniformly from [think/2, 3*think/2] (none when ``think`` is 0); every call's
    ``(phase, kind, seconds, error)`` goes to ``out`` at the end."""
    rnd = random.Random(k)
    con = psycopg2.connect(url, application_name="bench reader")
    con.set_session(readonly=True, autocommit=False)
    with con.cursor() as cur:
        cur.execute("SET statement_timeout = '5s'")
    con.commit()
    ready.release()
    calls: list[tuple[int, str, float, str | None]] = []
    i = k  # half the readers start with the aggregate
    if think:
        time.sleep(rnd.uniform(0, think))  # the readers do not start in step
    while not stop.is_set():
        kind = "aggregate" if i % 2 else "get_container"
        i += 1
        started = time.perf_counter()
        error = None
        try:
            with con.cursor() as cur:
                if kind == "aggregate":
                    cur.execute(AGGREGATE)
                    cur.fetchall()
                else:
                    number, cid = rnd.choice(numbers)
                    cur.execute(GET_CONTAINER[0], [number])
                    cur.fetchall()
                    for sql in GET_CONTAINER[1:]:
                        cur.execute(sql, [cid])
                        cur.fetchall()
            con.commit()
        except psycopg2.Error as exc:
            con.rollback()
            error = str(exc).strip().splitlines()[0]
        calls.append((phase.value, kind, time.perf_counter() - started, error))
        if think:
            stop.wait(rnd.uniform(think / 2, think * 3 / 2))
    con.close()
    out.put(calls)


class Readers:
    """``n`` reader processes on PostgreSQL (each its own interpreter and connection, so
    they do not queue on one GIL), each thinking ``think`` seconds on average between two
    calls (0: back to back, the saturation hammer); every call timed, counted under the
    phase it ended in."""

    def __init__(self, url: str, numbers: list[tuple[str, str]], n: int, think: float) -> None:
        ctx = multiprocessing.get_context("fork")  # no interpreter to start: a reader is ready
        self.n, self.think = n, think
        self._phase = ctx.Value("i", 0)
        self._stop = ctx.Event()
        self._ready = ctx.Semaphore(0)
        self._out: Any = ctx.Queue()
        self._procs = [
            ctx.Process(
                target=_reader,
                args=(url, numbers, k, think, self._phase, self._stop, self._ready, self._out),
                daemon=True,
            )
            for k in range(n)
        ]
        self.calls: list[tuple[int, str, float, str | None]] = []

    @property
    def phase(self) -> str:
        return PHASES[self._phase.value]

    @phase.setter
    def phase(self, name: str) -> None:
        self._phase.value = PHASES.index(name)

    def __enter__(self) -> Readers:
        for p in self._procs:
            p.start()
        for _ in self._procs:  # every reader connected before the first phase starts
            self._ready.acquire(timeout=120)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for _ in self._procs:
            self.calls.extend(self._out.get(timeout=120))
        for p in self._procs:
            p.join(timeout=30)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for index, phase in enumerate(PHASES):
            mine = [c for c in self.calls if c[0] == index]
            if not mine:
                continue
            out[phase] = {}
            for kind in ("get_container", "aggregate"):
                ms = sorted(c[2] * 1000 for c in mine if c[1] == kind and c[3] is None)
                if not ms:
                    continue
                out[phase][kind] = {
                    "calls": len(ms),
                    "p50_ms": round(statistics.median(ms), 1),
                    "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 1),
                    "max_ms": round(ms[-1], 1),
                }
            failed = [f"{c[1]}: {c[3]}" for c in mine if c[3] is not None]
            out[phase]["failures"] = len(failed)
            out[phase]["first_failures"] = failed[:3]
        return out


def generated_warehouses(n: int, duck: Path, pg_url: str) -> dict[str, float]:
    """``bench_risk.generate(n)`` written into a DuckDB file and into PostgreSQL (ADBC bulk
    ingest: COPY); the seconds each took."""
    import adbc_driver_postgresql.dbapi as adbc

    frames = {name: lf.collect().to_arrow() for name, lf in generate(n).items()}
    t = time.perf_counter()
    with duckdb.connect(str(duck)) as con:
        con.execute("CREATE SCHEMA terminal49")
        for name, table in frames.items():
            con.register("_src", table)
            con.execute(f"CREATE TABLE terminal49.{name} AS SELECT * FROM _src")
            con.unregister("_src")
    duck_s = time.perf_counter() - t
    t = time.perf_counter()
    with adbc.connect(pg_url) as con:
        with con.cursor() as cur:
            cur.execute("CREATE SCHEMA terminal49")
            for name, table in frames.items():
                cur.adbc_ingest(name, table, mode="create", db_schema_name="terminal49")
        con.commit()
    return {"duckdb_s": round(duck_s, 2), "postgres_s": round(time.perf_counter() - t, 2)}


def risk_side_by_side(n: int, server: Any, tmp: Path, env: dict[str, str]) -> dict[str, Any]:
    """Risk end to end over ``n`` generated containers in a DuckDB file and in PostgreSQL."""
    duck = str(tmp / "risk.duckdb")
    pg = server.url(server.create_database())
    out: dict[str, Any] = {"containers": n, "written": generated_warehouses(n, Path(duck), pg)}
    d, p = risk(duck, env), risk(pg, env)
    out.update(
        duckdb_s=round(d["seconds"], 2),
        postgres_s=round(p["seconds"], 2),
        ratio=round(p["seconds"] / d["seconds"], 2),
        peak_rss_mb={"duckdb": round(d["peak_rss_mb"]), "postgres": round(p["peak_rss_mb"])},
    )
    return out


def _show(result: dict[str, Any], key: str) -> None:
    """Each figure on stderr as soon as it is measured (a long run shows its progress)."""
    print(json.dumps({key: result[key], "load_average": _load_average()}), file=sys.stderr)


def _load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--containers", type=int, default=100_000)
    parser.add_argument(
        "--risk-containers", type=int, default=1_000_000, help="0 leaves the risk figure out"
    )
    parser.add_argument("--readers", type=int, default=20)
    parser.add_argument(
        "--risk-runs",
        type=int,
        default=1,
        help="risk runs, one after the other, in the readers' risk phase (a steadier p95)",
    )
    parser.add_argument(
        "--think",
        type=float,
        default=1.0,
        help="the paced readers' mean think time between two calls, seconds",
    )
    parser.add_argument(
        "--reader-models",
        default="paced,hammer",
        help="which reader models run (paced: with --think; hammer: back to back; none)",
    )
    args = parser.parse_args()
    bin_dir = server_bin_dir()
    if bin_dir is None:
        raise SystemExit("no PostgreSQL server here (initdb, pg_ctl): see docs/postgres.md")
    result: dict[str, Any] = {"load_average_start": _load_average()}
    with (
        running_server(bin_dir) as server,
        tempfile.TemporaryDirectory() as tmp,
        SandboxProcess(containers=args.containers, seed=21, clock=CLOCK, active_share=0.1) as sb,
    ):
        env = dict(os.environ, FREETIME_WORKDIR=str(Path(tmp) / "work"))
        duck = str(Path(tmp) / "w.duckdb")
        pg = server.url(server.create_database())

        d, p = load(sb, duck, env, full=True), load(sb, pg, env, full=True)
        result["full_load"] = {
            "duckdb_s": round(d["seconds"], 2),
            "postgres_s": round(p["seconds"], 2),
            "ratio": round(p["seconds"] / d["seconds"], 2),
            "peak_rss_mb": {"duckdb": round(d["peak_rss_mb"]), "postgres": round(p["peak_rss_mb"])},
            "requests": p["requests"],
        }
        _show(result, "full_load")
        d_risk, p_risk = risk(duck, env), risk(pg, env)
        result["risk_100k"] = {
            "duckdb_s": round(d_risk["seconds"], 2),
            "postgres_s": round(p_risk["seconds"], 2),
        }
        _show(result, "risk_100k")
        moved = sb.advance(hours=1)
        d, p = load(sb, duck, env, full=False), load(sb, pg, env, full=False)
        result["incremental_load"] = {
            "changed_containers": moved.get("changed_containers"),
            "duckdb_s": round(d["seconds"], 2),
            "postgres_s": round(p["seconds"], 2),
            "ratio": round(p["seconds"] / d["seconds"], 2),
            "requests": p["requests"],
        }
        _show(result, "incremental_load")

        with psycopg2.connect(pg) as con, con.cursor() as cur:
            cur.execute("SELECT number, id FROM terminal49.containers")
            numbers = [(str(a), str(b)) for a, b in cur.fetchall()]
        # the same writes under each reader model: first readers as people and dashboards
        # use the warehouse (a call, then a think time), then the zero-think-time hammer
        result["readers"] = {}
        for model, think in (("paced", args.think), ("hammer", 0.0)):
            if model not in args.reader_models:
                continue
            with Readers(pg, numbers, args.readers, think) as readers:
                time.sleep(10)
                readers.phase = "full load"
                started = time.perf_counter()
                load(sb, pg, env, full=True)
                load_s = time.perf_counter() - started
                readers.phase = "risk run"
                started = time.perf_counter()
                for _ in range(args.risk_runs):
                    risk(pg, env)
                risk_s = time.perf_counter() - started
                readers.phase = "after"
                time.sleep(5)
            result["readers"][model] = {
                "readers": args.readers,
                "think_s": think,
                "full_load_s": round(load_s, 2),
                "risk_runs": args.risk_runs,
                "risk_run_s": round(risk_s, 2),
                **readers.summary(),
            }
        _show(result, "readers")

        if args.risk_containers:
            result["risk"] = risk_side_by_side(args.risk_containers, server, Path(tmp), env)
    result["load_average_end"] = _load_average()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
