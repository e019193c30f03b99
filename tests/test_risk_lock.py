"""`freetime risk` publishes under the warehouse's writer lock, like every other writer.

Over real processes: while another writer holds the warehouse, `freetime risk` says once whom
it waits for and publishes after it; past its `--wait` it exits 2 with one line, having
published nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from risk_fixtures import make_warehouse
from test_risk import DATA

from pipelines.write import writer_lock

REPO = Path(__file__).resolve().parents[1]
AS_OF = "2025-11-14T16:00:00Z"


def _risk(db: Path, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FREETIME_WRITER_WAIT")}
    return subprocess.Popen(
        [sys.executable, "-m", "freetime_cli.main", "risk", "--duckdb", str(db)]
        + ["--as-of", AS_OF, "--format", "csv", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _published(db: Path) -> bool:
    with duckdb.connect(str(db), read_only=True) as con:
        found = con.execute(
            "SELECT count(*) FROM duckdb_tables() "
            "WHERE schema_name = 'analytics' AND table_name = 'demurrage_risk'"
        ).fetchone()
    return bool(found and found[0])


def test_risk_waits_for_the_writer_holding_the_warehouse(tmp_path: Path) -> None:
    db = make_warehouse(tmp_path / "w.duckdb", DATA)
    with writer_lock(db, "full load"):
        busy = _risk(db, "--wait", "1")
        out, err = busy.communicate(timeout=120)
        assert busy.returncode == 2, err
        assert "Traceback" not in err
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines[0].startswith("waiting for the full load (pid "), err
        assert lines[-1].startswith("error: the warehouse is being written by the full load"), err
        assert not _published(db)

        waiting = _risk(db, "--wait", "120")
        assert waiting.stderr is not None
        said = waiting.stderr.readline()  # once it has reached the lock
        assert said.startswith("waiting for the full load (pid "), said
        time.sleep(1)
        assert waiting.poll() is None  # still waiting: nothing published under the load
        assert not _published(db)
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err
    assert "waiting for" not in err, err  # said once
    assert _published(db)
    assert out.splitlines()[0].startswith("risk_level,container_number")


@pytest.mark.fast
def test_a_bad_wait_is_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from freetime_cli.main import app

    db = make_warehouse(tmp_path / "w.duckdb", DATA)
    r = CliRunner().invoke(app, ["risk", "--duckdb", str(db), "--wait", "-1"])
    assert r.exit_code == 2
    assert "writer wait must be a number of seconds >= 0" in r.output
