#!/usr/bin/env python3
"""The README's two commands, on a fresh machine with only Python 3.11+ and pip.

    python3 quickstart.py run     # the main job: load the account, compute risk, print it
    python3 quickstart.py test    # the whole test suite

It installs uv with pip when missing, lets uv create `.venv` from `uv.lock`, then runs
`freetime run` or `pytest` inside it. Extra arguments are passed through. Before the tests,
a machine without a PostgreSQL server gets Debian's (`apt-get install postgresql`, as root):
the tests start and stop their own server (tests/pg.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def uv_command() -> list[str]:
    if shutil.which("uv"):
        return ["uv"]
    probe = subprocess.run([sys.executable, "-m", "uv", "--version"], capture_output=True)
    if probe.returncode != 0:
        print("quickstart: installing uv with pip…", file=sys.stderr, flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--user", "uv"], check=False
        )
        probe = subprocess.run([sys.executable, "-m", "uv", "--version"], capture_output=True)
        if probe.returncode != 0:  # e.g. a venv where --user is refused
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "uv"], check=True)
    return [sys.executable, "-m", "uv"]


def ensure_postgres_server() -> None:
    """Install Debian's PostgreSQL server when none is found and this is root with apt-get
    (the tests run it as the ``postgres`` user in a temporary folder: nothing is started
    here). Elsewhere, say that the PostgreSQL tests cannot run."""
    sys.path.insert(0, str(ROOT))
    from tests.pg import server_bin_dir  # stdlib only: runs before the virtualenv exists

    if server_bin_dir() is not None:
        return
    if hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        print("quickstart: installing PostgreSQL for the tests (apt-get)…", file=sys.stderr)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for step in (["update", "-qq"], ["install", "-y", "-qq", "postgresql"]):
            subprocess.run(["apt-get", *step], env=env, stdout=subprocess.DEVNULL, check=False)
    if server_bin_dir() is None:
        print(
            "quickstart: no PostgreSQL server (initdb, pg_ctl) found: the postgres tests "
            "skip (fail under CI=true); install postgresql or set FREETIME_PG_BIN",
            file=sys.stderr,
        )


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"run", "test"}:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    what, rest = argv[0], argv[1:]
    uv = uv_command()
    os.chdir(ROOT)
    if what == "test":
        ensure_postgres_server()
    synced = subprocess.run([*uv, "sync", "--locked", "--quiet", "--compile-bytecode"])
    if synced.returncode != 0:
        return synced.returncode
    cmd = ["freetime", "run", *rest] if what == "run" else ["pytest", *rest]
    return subprocess.run([*uv, "run", "--locked", "--quiet", *cmd]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
