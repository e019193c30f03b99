"""What history costs: an hourly incremental load with and without it, and a year of history.

Run: uv run python benchmarks/bench_history.py [--containers 100000] [--repeat 2] [--hours 1]

One sandbox account of ``--containers`` is fully loaded once (with history: its first versions)
and the file kept. The sandbox clock then advances ``--hours``; the same incremental load runs
``--repeat`` times with history and as many without (alternately, each into a fresh copy of the
full-loaded file), against the same sandbox state. "Without" replaces the history hooks of
:mod:`pipelines.write` by no-ops in this process. Prints, per variant, the best wall time of the
load and of its publishing transaction, the file size after it, and the history rows it added;
then the size of a year of history projected from this hour's change rate (rows per hour x
8,760, at the bytes per row of a DuckDB file holding only the history table).
Target: history adds at most 15% to a load's time.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

import pipelines.publish.transaction as transaction_module
import pipelines.write as write_module
from freetime_cli._common import quiet_logging
from pipelines import history
from pipelines.config import ApiSettings
from pipelines.load import run_load
from sandbox.process import SandboxProcess

CLOCK = "2026-11-20T12:00:00Z"
_publish = write_module.publish
_record_rows, _record_children = history.record_rows, history.record_children
_views = transaction_module.create_history_views  # type: ignore[attr-defined]
publish_seconds: list[float] = []


def timed_publish(*args: Any, **kwargs: Any) -> Any:
    started = time.monotonic()
    try:
        return _publish(*args, **kwargs)
    finally:
        publish_seconds.append(time.monotonic() - started)


def set_history(on: bool) -> None:
    noop: Callable[..., int] = lambda *a, **k: 0  # noqa: E731
    history.record_rows = _record_rows if on else noop  # type: ignore[assignment]
    history.record_children = _record_children if on else noop  # type: ignore[assignment]
    transaction_module.create_history_views = _views if on else noop  # type: ignore[attr-defined,assignment]


def history_rows(path: Path) -> int:
    with duckdb.connect(str(path), read_only=True) as con:
        try:
            row = con.execute("SELECT count(*) FROM terminal49.history").fetchone()
        except duckdb.CatalogException:
            return 0
    return int(row[0]) if row else 0


def bytes_per_history_row(path: Path, tmp: Path) -> float:
    """File bytes per row of a DuckDB file that holds only a copy of the history table."""
    only = tmp / "history-only.duckdb"
    with duckdb.connect(str(only)) as con:
        con.execute(f"ATTACH '{path}' AS w (READ_ONLY)")
        con.execute("CREATE TABLE h AS SELECT * FROM w.terminal49.history")
        n = con.execute("SELECT count(*) FROM h").fetchone()
        con.execute("DETACH w")
        con.execute("CHECKPOINT")
    rows = int(n[0]) if n else 0
    return only.stat().st_size / max(rows, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--containers", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--hours", type=float, default=1.0)
    args = ap.parse_args()
    quiet_logging()
    write_module.publish = timed_publish  # type: ignore[assignment]
    tmp = Path(tempfile.mkdtemp(prefix="bench-history-"))
    try:
        with SandboxProcess(
            containers=args.containers, seed=49, clock=CLOCK, startup_timeout=900
        ) as sb:
            api = ApiSettings(
                base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=1_000_000
            )
            base = tmp / "base.duckdb"
            t = time.monotonic()
            run_load(base, api, full=True)
            full_s = time.monotonic() - t
            first = history_rows(base)
            print(
                f"full load of {args.containers:,} containers: {full_s:.1f}s, "
                f"{first:,} history rows (first versions), "
                f"{base.stat().st_size / 1e6:.1f} MB"
            )
            changed = sb.advance(hours=args.hours)["changed_containers"]
            print(f"advanced {args.hours:g}h: {changed:,} containers changed")
            results: dict[bool, list[tuple[float, float, int, int]]] = {True: [], False: []}
            for r in range(args.repeat):
                for on in (True, False) if r % 2 == 0 else (False, True):
                    path = tmp / f"run-{r}-{int(on)}.duckdb"
                    shutil.copy(base, path)
                    set_history(on)
                    publish_seconds.clear()
                    t = time.monotonic()
                    run_load(path, api)
                    seconds = time.monotonic() - t
                    results[on].append(
                        (
                            seconds,
                            sum(publish_seconds),
                            path.stat().st_size,
                            history_rows(path) - first,
                        )
                    )
                    if r < args.repeat - 1:
                        path.unlink()
        set_history(True)
        best = {on: min(rs) for on, rs in results.items()}
        for on in (False, True):
            s, p, size, added = best[on]
            print(
                f"incremental load, history {'on ' if on else 'off'}: {s:.2f}s "
                f"(publish {p:.2f}s), file {size / 1e6:.1f} MB, history rows added {added:,}"
            )
        (s_on, p_on, size_on, added), (s_off, p_off, size_off, _) = best[True], best[False]
        print(
            f"history adds {100 * (s_on / s_off - 1):+.1f}% to the load "
            f"({100 * (p_on / p_off - 1):+.1f}% to its publish), "
            f"{(size_on - size_off) / 1e6:+.1f} MB to the file"
        )
        last = max(tmp.glob(f"run-{args.repeat - 1}-1.duckdb"))
        per_row = bytes_per_history_row(last, tmp)
        per_hour = added / args.hours
        year_rows = per_hour * 8760
        print(
            f"history: {per_row:.1f} bytes per row in DuckDB; {per_hour:,.0f} rows per hour "
            f"-> {year_rows / 1e6:,.1f} M rows, {year_rows * per_row / 1e9:.2f} GB a year "
            f"(plus {first * per_row / 1e6:.0f} MB of first versions)"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
