"""Benchmark: ``freetime invoices audit`` of 10,000 invoice lines (target < 5 s).

Run: ``uv run python benchmarks/bench_invoice_audit.py [--containers N] [--lines L]``
(default 5,000 containers, 10,000 lines; ``--keep PATH`` builds the warehouse there, or
imports into the one already there). Loads a sandbox of N containers unpaced, publishes
risk, then makes L invoice lines from the engine's own charge days (one invoice of up to ten
lines per issuer, each line a box's chargeable run, every third with a day more, every fifth
at another rate; boxes are billed again by later invoices once every box was billed, so
overlaps are audited too), imports them and audits them. Prints the import and audit times and
the audit's findings.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import tempfile
import time
from pathlib import Path

import duckdb

CLOCK = "2026-11-20T12:00:00Z"


def build(n: int, path: Path) -> None:
    from pipelines.analytics import publish_risk
    from pipelines.config import ApiSettings
    from pipelines.load import run_load
    from sandbox.process import SandboxProcess

    with SandboxProcess(containers=n, seed=49, clock=CLOCK, rate_limit=0) as sb:
        run_load(
            path,
            ApiSettings(base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=10**6),
        )
    publish_risk(path, as_of=dt.datetime.fromisoformat(CLOCK.replace("Z", "+00:00")))


def invoices(path: Path, lines: int) -> list[object]:
    from pipelines.invoices.schema import Invoice, InvoiceLine

    with duckdb.connect(str(path), read_only=True) as con:
        runs = con.execute(
            "SELECT container_number, party, charge, min(day), max(day), count(*), "
            "sum(coalesce(rate, 100)), any_value(coalesce(rate, 100)) "
            "FROM analytics.charge_days GROUP BY ALL ORDER BY container_number, party, charge"
        ).fetchall()
    kinds = {"terminal": ("terminal", "demurrage"), "line": ("line", "demurrage")}
    kinds |= {"rail": ("rail", "storage")}
    today = dt.date(2026, 11, 20)
    out: list[Invoice] = []
    k = 0
    while k < lines:
        for number, party, charge, first, last, days, amount, rate in runs:
            if k >= lines:
                break
            kind, ctype = ("line", "detention") if charge == "detention" else kinds[party]
            if k % 10 == 0:
                inv = Invoice(f"B-{k // 10}", f"{kind} co {k % 7}", kind, today, "USD")
                inv.source = "bench"
                out.append(inv)
            if k % 3 == 0 and last < today:  # a day more than the engine counts
                last, days, amount = last + dt.timedelta(days=1), days + 1, amount + rate
            billed_rate = rate * 1.2 if k % 5 == 0 else None
            if billed_rate is not None:
                amount = billed_rate * days
            out[-1].lines.append(
                InvoiceLine(
                    number,
                    ctype,
                    first,
                    last,
                    days,
                    round(amount, 2),
                    billed_rate,
                    None,
                    where=f"line {k}",
                )
            )
            k += 1
    return out  # type: ignore[return-value]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--containers", type=int, default=5000)
    ap.add_argument("--lines", type=int, default=10_000)
    ap.add_argument("--keep", type=Path, help="build the warehouse here (or reuse it) and keep it")
    args = ap.parse_args()
    from pipelines.invoices.audit import run_audit
    from pipelines.invoices.store import import_invoices

    now = dt.datetime.fromisoformat(CLOCK.replace("Z", "+00:00"))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.duckdb"
        if args.keep is not None:
            path = args.keep
        started = time.perf_counter()
        if not path.exists():
            build(args.containers, path)
        built = time.perf_counter() - started
        made = invoices(path, args.lines)
        started = time.perf_counter()
        summary = import_invoices(path, made, today=now.date(), now=now)  # type: ignore[arg-type]
        imported = time.perf_counter() - started
        timings = []
        for _ in range(3):
            started, cpu = time.perf_counter(), time.process_time()
            audit = run_audit(path, now)
            timings.append((time.perf_counter() - started, time.process_time() - cpu))
        with duckdb.connect(str(path), read_only=True) as con:
            codes = con.execute(
                "SELECT f.code, count(*) FROM (SELECT unnest(findings) AS f "
                "FROM analytics.invoice_audit) GROUP BY ALL ORDER BY 2 DESC"
            ).fetchall()
    wall, cpu = min(timings)
    every = ", ".join(f"{w:.2f}" for w, _ in timings)
    print(
        f"containers: {args.containers:,} (load + risk {built:.1f} s)  invoices: "
        f"{len(summary.new):,}  lines: {audit.lines:,}  import: {imported:.2f} s  "
        f"audit: best of 3 {wall:.2f} s (cpu {cpu:.2f} s; all {every} s)  "
        f"target < 5 s: {'met' if wall < 5 else 'NOT met'}  load avg: {os.getloadavg()[0]:.2f}"
    )
    print(
        f"lines with findings: {audit.with_findings:,}; in dispute {audit.disputed}; findings: "
        + ", ".join(f"{c} {n:,}" for c, n in codes)
    )


if __name__ == "__main__":
    main()
