"""Benchmark: what a refused command costs, one subprocess per run.

Run: ``uv run python benchmarks/bench_cli.py [--runs 3] [--root DIR] [--only TEXT]``. For each
refusal (bad input that ends in one ``error:`` line and exit code 2, or nothing to do) runs
``python -m freetime_cli.main ...`` ``--runs`` times and prints its exit code and the least CPU
seconds (user + sys) of the child. ``--root`` runs another tree's code with this interpreter
(e.g. main's: ``git archive main | tar -x -C /tmp/cli_main``), to compare before and after.

The commands run in a scratch folder with no ``TERMINAL49_*`` or ``FREETIME_*`` variables; a
server that must not answer is 127.0.0.1:9 (discard). The machine may be shared: compare runs
made one after the other, and read the load average printed last.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

REPO = Path(__file__).resolve().parents[1]
NOWHERE = "127.0.0.1:9"


def refusals(tmp: Path) -> list[tuple[str, list[str]]]:
    """(label, arguments) of each command measured, with the files they name made in ``tmp``."""
    folder = tmp / "folder"
    folder.mkdir()
    missing = str(tmp / "missing.duckdb")
    fresh = str(tmp / "fresh" / "freetime.duckdb")
    (tmp / "empty.duckdb").touch()  # there, for the checks after the warehouse's
    there = str(tmp / "empty.duckdb")
    loaded = str(tmp / "loaded.duckdb")  # a warehouse with (no) containers
    with duckdb.connect(loaded) as con:
        con.execute(
            "CREATE SCHEMA terminal49; "
            "CREATE TABLE terminal49.containers (id VARCHAR, number VARCHAR)"
        )
    (tmp / "bad.toml").write_text("alerts = [not toml\n")
    bad_toml = str(tmp / "bad.toml")
    (tmp / "plain.toml").write_text("[alerts]\nretry_seconds = 60\n")  # names no level
    plain = str(tmp / "plain.toml")
    (tmp / "invoice.csv").write_text("invoice_number\n1\n")
    (tmp / "doc.pdf").write_bytes(b"%PDF-1.4 a document\n")
    twice = ["--duckdb", missing, "--warehouse", missing]
    return [
        ("--help", ["--help"]),
        ("webhooks apply: warehouse twice", ["webhooks", "apply", *twice]),
        ("webhooks apply: warehouse a folder", ["webhooks", "apply", "--duckdb", str(folder)]),
        ("webhooks apply: bad URL", ["webhooks", "apply", "--warehouse", "postgresql://nohost"]),
        (
            "webhooks apply: inbox a folder",
            ["webhooks", "apply", "--duckdb", missing, "--inbox", str(folder)],
        ),
        ("webhooks apply: nothing to apply (exit 0)", ["webhooks", "apply", "--duckdb", fresh]),
        (
            "webhooks apply --reconcile: no key",
            ["webhooks", "apply", "--duckdb", fresh, "--reconcile"],
        ),
        ("evidence: no warehouse", ["evidence", "MSCU1234567", "--duckdb", missing]),
        ("evidence: warehouse twice", ["evidence", "MSCU1234567", *twice]),
        ("evidence: --out a folder", ["evidence", "X", "--duckdb", there, "--out", str(folder)]),
        ("alerts list --status lost", ["alerts", "list", "--status", "lost"]),
        ("alerts list: warehouse twice", ["alerts", "list", *twice]),
        ("alerts list: bad config", ["alerts", "list", "--config", bad_toml]),
        ("alerts send: bad config", ["alerts", "send", "--config", bad_toml]),
        ("alerts send: no destination", ["alerts", "send", "--duckdb", missing]),
        ("alerts send: none, plain config", ["alerts", "send", "--config", plain]),
        ("alerts test: unknown name", ["alerts", "test", "nobody"]),
        ("alerts digest --as-of bad", ["alerts", "digest", "--as-of", "soon"]),
        ("alerts digest: unknown dest", ["alerts", "digest", "--destination", "nobody"]),
        ("invoices import: twice", ["invoices", "import", str(tmp / "invoice.csv"), *twice]),
        (
            "invoices import: no file",
            ["invoices", "import", str(tmp / "nope.csv"), "--duckdb", loaded],
        ),
        ("invoices import --as-of bad", ["invoices", "import", "x.csv", "--as-of", "soon"]),
        ("invoices audit: twice", ["invoices", "audit", *twice]),
        ("invoices audit --as-of bad", ["invoices", "audit", "--as-of", "soon"]),
        (
            "invoices dispute: --out a folder",
            ["invoices", "dispute", "1", "--out", str(folder), "--duckdb", there],
        ),
        ("invoices dispute: twice", ["invoices", "dispute", "1", "--out", "x.html", *twice]),
        ("documents upload: no file", ["documents", "upload", str(tmp / "nope.pdf")]),
        ("documents upload: a folder", ["documents", "upload", str(folder)]),
        ("documents upload: no key", ["documents", "upload", str(tmp / "doc.pdf")]),
        ("documents sync: warehouse a folder", ["documents", "sync", "--duckdb", str(folder)]),
        ("documents sync: warehouse twice", ["documents", "sync", *twice]),
        ("documents sync: no key", ["documents", "sync", "--duckdb", fresh]),
        ("risk: no warehouse", ["risk", "--duckdb", missing]),
        ("risk --format xml", ["risk", "--format", "xml", "--duckdb", missing]),
        ("risk --level lost", ["risk", "--level", "lost", "--duckdb", there]),
        ("risk: warehouse twice", ["risk", *twice]),
        ("risk --wait -1", ["risk", "--wait", "-1", "--duckdb", missing]),
        (
            "warehouse grant-reader: DuckDB",
            ["warehouse", "grant-reader", "r", "--warehouse", fresh],
        ),
        ("run --limit x", ["run", "--limit", "x"]),
        ("serve --prefect-file missing", ["serve", "--prefect-file", str(tmp / "nope.yaml")]),
        ("load: warehouse a folder", ["load", "--duckdb", str(folder)]),
        ("report: no warehouse", ["report", "--duckdb", missing]),
        ("mcp serve: twice", ["mcp", "serve", *twice]),
        ("load: unreachable PostgreSQL", ["load", "--warehouse", f"postgresql://u@{NOWHERE}/db"]),
    ]


def cpu_of(args: list[str], root: Path, cwd: Path, env: dict[str, str]) -> tuple[int, float, str]:
    """Exit code, CPU seconds (user + sys) and the last stderr line of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-m", "freetime_cli.main", *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [""])[-1]
    return done.returncode, cpu, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="Runs per command (the least counts).")
    parser.add_argument("--root", type=Path, default=REPO, help="The code tree to run.")
    parser.add_argument("--only", default="", help="Only the commands whose label has this.")
    parser.add_argument("--messages", action="store_true", help="Print each last stderr line.")
    opts = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TERMINAL49_", "FREETIME_"))}
    env["COLUMNS"] = "300"  # one message, one line
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as scratch:
        tmp = Path(scratch)
        print(f"code: {opts.root.resolve()}; least of {opts.runs} runs; CPU-s = user + sys")
        for label, args in refusals(tmp):
            if opts.only not in label:
                continue
            runs = [cpu_of(args, opts.root.resolve(), tmp, env) for _ in range(opts.runs)]
            code, _, last = runs[-1]
            best = min(cpu for _, cpu, _ in runs)
            print(f"{label:45} exit {code}  {best:5.2f} CPU-s", flush=True)
            if opts.messages:
                print(f"    {last}")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
