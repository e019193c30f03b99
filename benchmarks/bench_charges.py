"""Benchmark: what the charge engine adds to a risk run, on synthetic containers.

Run: ``uv run python benchmarks/bench_charges.py [N]`` (default 1,000,000, the input of
``bench_risk.py``). Prints the wall and CPU time of ``compute_risk`` alone and of
``compute_charges(...).collect()`` (what ``publish_risk`` adds), the rows of both engine tables
and the peak memory of the process (inputs included). No target: a figure to watch.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_risk import AS_OF, generate  # noqa: E402

from pipelines.analytics import compute_risk, load_tariffs  # noqa: E402
from pipelines.analytics.charges import compute_charges  # noqa: E402


def main(n: int) -> None:
    tariffs = load_tariffs()
    frames = {k: v.collect().lazy() for k, v in generate(n).items()}
    compute_risk(generate(1000), AS_OF, tariffs).collect()  # warm caches
    wall, cpu = time.perf_counter(), time.process_time()
    compute_risk(frames, AS_OF, tariffs).collect(engine="in-memory")
    risk_wall, risk_cpu = time.perf_counter() - wall, time.process_time() - cpu
    wall, cpu = time.perf_counter(), time.process_time()
    parties, days = compute_charges(frames, AS_OF, tariffs).collect()
    charges_wall, charges_cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    load = os.getloadavg()[0]
    print(
        f"containers: {n:,}  risk: {risk_wall:.2f} s (cpu {risk_cpu:.2f} s)  "
        f"charges: {charges_wall:.2f} s (cpu {charges_cpu:.2f} s)  "
        f"party rows: {parties.height:,}  day rows: {days.height:,} "
        f"({days.estimated_size('mb'):.0f} MB)  peak RSS: {peak:.0f} MB  load avg: {load:.2f}"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
