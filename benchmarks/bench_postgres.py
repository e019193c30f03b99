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
- ``readers``: ``--readers`` threads, each with its own connection, alternately run the tool
  server's ``get_container`` (the container by number, its risk row, holds and fees, in one
  read-only transaction) and a BI-style aggregate over ``analytics.demurrage_risk``, while
  a full load and then a risk run write the PostgreSQL warehouse: latency p50/p95/max per
  phase and failures (target p95 < 100 ms, no failure);
- ``risk``: risk over ``--risk-containers`` generated as ``benchmarks/bench_risk.py`` does,
  written into each warehouse (DuckDB from Arrow; PostgreSQL by ADBC's bulk COPY), then
  ``publish_risk`` end to end (read, compute, publish) on each (target PostgreSQL within 3x).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
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


class Readers:
    """``n`` reader threads on PostgreSQL, each on its own connection, timing every call."""

    def __init__(self, url: str, numbers: list[tuple[str, str]], n: int) -> None:
        self.url, self.numbers, self.n = url, numbers, n
        self.phase = "idle"
        self.samples: dict[str, dict[str, list[float]]] = {}
        self.failures: dict[str, list[str]] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(k,)) for k in range(n)]

    def __enter__(self) -> Readers:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()

    def _record(self, kind: str, seconds: float | None, error: str | None = None) -> None:
        with self._lock:
            phase = self.phase
            if error is not None:
                self.failures.setdefault(phase, []).append(f"{kind}: {error}")
            else:
                assert seconds is not None
                self.samples.setdefault(phase, {}).setdefault(kind, []).append(seconds)

    def _run(self, k: int) -> None:
        rnd = random.Random(k)
        con = psycopg2.connect(self.url, application_name="bench reader")
        con.set_session(readonly=True, autocommit=False)
        with con.cursor() as cur:
            cur.execute("SET statement_timeout = '5s'")
        con.commit()
        i = 0
        while not self._stop.is_set():
            kind = "aggregate" if i % 2 else "get_container"
            i += 1
            started = time.perf_counter()
            try:
                with con.cursor() as cur:
                    if kind == "aggregate":
                        cur.execute(AGGREGATE)
                        cur.fetchall()
                    else:
                        number, cid = rnd.choice(self.numbers)
                        cur.execute(GET_CONTAINER[0], [number])
                        cur.fetchall()
                        for sql in GET_CONTAINER[1:]:
                            cur.execute(sql, [cid])
                            cur.fetchall()
                con.commit()
                self._record(kind, time.perf_counter() - started)
            except psycopg2.Error as exc:
                con.rollback()
                self._record(kind, None, str(exc).strip().splitlines()[0])
        con.close()

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for phase, kinds in self.samples.items():
            out[phase] = {}
            for kind, values in kinds.items():
                ms = sorted(v * 1000 for v in values)
                out[phase][kind] = {
                    "calls": len(ms),
                    "p50_ms": round(statistics.median(ms), 1),
                    "p95_ms": round(ms[int(0.95 * (len(ms) - 1))], 1),
                    "max_ms": round(ms[-1], 1),
                }
            out[phase]["failures"] = len(self.failures.get(phase, []))
            out[phase]["first_failures"] = self.failures.get(phase, [])[:3]
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


def _show(result: dict[str, Any], key: str) -> None:
    """Each figure on stderr as soon as it is measured (a long run shows its progress)."""
    print(json.dumps({key: result[key], "load_average": _load_average()}), file=sys.stderr)


def _load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--containers", type=int, default=100_000)
    parser.add_argument("--risk-containers", type=int, default=1_000_000)
    parser.add_argument("--readers", type=int, default=20)
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
        with Readers(pg, numbers, args.readers) as readers:
            time.sleep(2)
            readers.phase = "full load"
            started = time.perf_counter()
            load(sb, pg, env, full=True)
            load_s = time.perf_counter() - started
            readers.phase = "risk run"
            started = time.perf_counter()
            risk(pg, env)
            risk_s = time.perf_counter() - started
            readers.phase = "after"
            time.sleep(2)
        result["readers"] = {
            "readers": args.readers,
            "full_load_s": round(load_s, 2),
            "risk_run_s": round(risk_s, 2),
            **readers.summary(),
        }
        _show(result, "readers")

        duck_1m = str(Path(tmp) / "risk.duckdb")
        pg_1m = server.url(server.create_database())
        n = args.risk_containers
        result["risk"] = {"containers": n, "written": generated_warehouses(n, Path(duck_1m), pg_1m)}
        d, p = risk(duck_1m, env), risk(pg_1m, env)
        result["risk"].update(
            duckdb_s=round(d["seconds"], 2),
            postgres_s=round(p["seconds"], 2),
            ratio=round(p["seconds"] / d["seconds"], 2),
            peak_rss_mb={"duckdb": round(d["peak_rss_mb"]), "postgres": round(p["peak_rss_mb"])},
        )
    result["load_average_end"] = _load_average()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
