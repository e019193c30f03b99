"""The warehouse under kills and concurrent writers, over real processes.

- a SIGKILL at any moment of the write leaves every table before or after the load, all
  together, and the next load completes;
- two loads of one warehouse at once serialise (the second says whom it waits for), and past
  the wait limit the second exits 2 with one line, having written nothing;
- a webhook apply of notifications older than a running load never writes them over it.
"""

from __future__ import annotations

import copy
import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest

from pipelines.config import ApiSettings
from pipelines.load import TABLES, run_load
from pipelines.webhooks.inbox import Inbox, parse_notification
from pipelines.write import writer_lock
from sandbox.process import SandboxProcess
from sandbox.thread import SandboxThread
from tests.conftest import T49

pytestmark = pytest.mark.sandbox

CLOCK = "2026-11-20T12:00:00Z"
REPO = Path(__file__).resolve().parents[1]


def _api(sb: Any) -> ApiSettings:
    return ApiSettings(base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100_000)


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TERMINAL49_")}
    full_env.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-m", "freetime_cli.main", *args],
        cwd=REPO,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _dump(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows, without the columns that differ between two loads of one state."""
    out = {}
    with duckdb.connect(str(db), read_only=True) as con:
        for table in TABLES:
            cols = [
                r[0]
                for r in con.execute(
                    "SELECT column_name FROM duckdb_columns() WHERE schema_name = 'terminal49' "
                    "AND table_name = ? AND column_name NOT IN "
                    "('fetched_at', '_dlt_load_id', '_dlt_id') ORDER BY column_name",
                    [table],
                ).fetchall()
            ]
            rows = con.execute(f"SELECT {', '.join(cols)} FROM terminal49.{table}").fetchall()
            out[table] = sorted(rows, key=repr)
    return out


def _fresh_copy(src: Path, folder: Path) -> Path:
    """The warehouse file alone in a new folder (no working folder, no pending package)."""
    folder.mkdir()
    shutil.copy(src, folder / "w.duckdb")
    return folder / "w.duckdb"


def _wait_for_write(db: Path, proc: subprocess.Popen[str]) -> None:
    """Until the load starts writing: DuckDB's write-ahead log appears beside the file (reading
    creates none)."""
    wal = db.with_name(db.name + ".wal")
    deadline = time.monotonic() + 120
    while not wal.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the load did not start writing"
        time.sleep(0.002)


def test_a_kill_at_any_moment_of_the_write_leaves_old_or_new_tables(tmp_path: Path) -> None:
    # A process: this process times the write and kills it at a share of it, polling every few
    # milliseconds; a server on a thread would compete with that polling for the GIL.
    with SandboxProcess(containers=1000, seed=5, clock=CLOCK) as sb:
        old_db = tmp_path / "old.duckdb"
        run_load(old_db, _api(sb))
        old = _dump(old_db)
        sb.advance(hours=36)  # holds clear and appear, LFDs move, containers are picked up
        # the sandbox sets no limit: unpaced, each load reaches its write in seconds
        env = {"TERMINAL49_API_KEY": sb.api_key, "TERMINAL49_RATE_LIMIT": "100000"}
        # the new tables, and how long the write takes after the last request, in this process
        db = _fresh_copy(old_db, tmp_path / "timing")
        proc = _cli("load", "--full", "--duckdb", str(db), "--base-url", sb.base_url, env=env)
        _wait_for_write(db, proc)
        writing = time.monotonic()
        assert proc.wait(timeout=120) == 0, proc.communicate()
        window = time.monotonic() - writing
        new = _dump(db)
        assert old["container_holds"] != new["container_holds"]
        assert old["containers"] != new["containers"]
        outcomes = []
        for n, share in enumerate((0.0, 0.2, 0.4, 0.6, 0.8)):
            db = _fresh_copy(old_db, tmp_path / f"kill{n}")
            proc = _cli("load", "--full", "--duckdb", str(db), "--base-url", sb.base_url, env=env)
            _wait_for_write(db, proc)
            time.sleep(share * window)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            got = _dump(db)
            assert got in (old, new), (
                f"kill {share:.0%} into the write: "
                + ", ".join(t for t in TABLES if got[t] not in (old[t], new[t]))
                + " hold neither the old nor the new rows; mixed: "
                + ", ".join(t for t in TABLES if got[t] == old[t])
                + " old"
            )
            outcomes.append("old" if got == old else "new")
            run_load(db, _api(sb))  # the next load completes (and publishes what is pending)
            assert _dump(db) == new
        assert "old" in outcomes, outcomes  # the kills did land inside the write


def test_two_loads_at_once_publish_in_turn_and_never_report_what_they_did_not_write(
    tmp_path: Path,
) -> None:
    with SandboxThread(containers=600, seed=9, clock=CLOCK) as sb:
        db = tmp_path / "w.duckdb"
        env = {"TERMINAL49_API_KEY": sb.api_key}
        args = ("load", "--full", "--duckdb", str(db), "--base-url", sb.base_url)
        # the other writer holds the warehouse: a load with a short wait gives up, writing nothing
        with writer_lock(db, "load"):
            proc = _cli(*args, env={**env, "FREETIME_WRITER_WAIT": "2"})
            out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, err
        assert "Traceback" not in err
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines[0].startswith("waiting for the load (pid "), err
        assert lines[-1].startswith("error: the warehouse is being written by the load (pid "), err
        assert "was not free after 2s" in lines[-1]
        assert not db.exists() or "containers" not in _dump(db) or not _dump(db)["containers"]
        # two real loads at once: they scan side by side and publish in turn
        first = _cli(*args, env=env)
        second = _cli(*args, env=env)
        results = [p.communicate(timeout=300) for p in (first, second)]
        assert [p.returncode for p in (first, second)] == [0, 0], results
        truth = sb.ground_truth()
        with duckdb.connect(str(db), read_only=True) as con:
            ids = [r[0] for r in con.execute("SELECT id FROM terminal49.containers").fetchall()]
            loads = con.execute(
                "SELECT rows_written FROM terminal49.freetime_loads ORDER BY load_id"
            ).fetchall()
        assert sorted(ids) == sorted(c["id"] for c in truth["containers"])
        assert len(loads) == 2
        # the first to publish wrote every container; the other only those it fetched later
        written = [_containers_written(out) for out, _ in results]
        assert max(written) == len(truth["containers"]), written


def _containers_written(out: str) -> int:
    found = re.search(r"containers\s+│\s+(\d+)\s", out)
    assert found, out
    return int(found.group(1))


#: the vendor's ``container.updated`` example, read once (thousands of notifications use it)
_UPDATED = (T49 / "webhooks" / "container.updated.json").read_bytes()


def _older_notification(nid: str, container: dict[str, Any], created: str) -> bytes:
    """A ``container.updated`` notification carrying ``container`` with availability flipped."""
    doc = orjson.loads(_UPDATED)
    doc["data"]["id"] = nid
    doc["data"]["attributes"]["created_at"] = created
    changed = copy.deepcopy(container)
    flipped = not bool(changed["attributes"].get("available_for_pickup"))
    changed["attributes"]["available_for_pickup"] = flipped
    doc["data"]["relationships"]["reference_object"]["data"]["id"] = container["id"]
    included = []
    for inc in doc["included"]:
        if inc["type"] == "container":
            included.append(changed)
        elif inc["type"] == "container_updated_event":
            inc["attributes"]["changeset"] = {"available_for_pickup": [not flipped, flipped]}
            inc["relationships"]["container"]["data"]["id"] = container["id"]
            included.append(inc)
    doc["data"]["relationships"]["reference_object"]["data"] = {
        "type": "container_updated_event",
        "id": next(i["id"] for i in included if i["type"] == "container_updated_event"),
    }
    doc["included"] = included
    return orjson.dumps(doc)


def test_webhook_apply_racing_a_load_never_writes_older_data_over_newer(tmp_path: Path) -> None:
    with SandboxThread(containers=1500, seed=13, clock=CLOCK) as sb:
        db, inbox = tmp_path / "w.duckdb", tmp_path / "inbox.sqlite"
        run_load(db, _api(sb))
        sb.advance(hours=12)
        truth = sb.ground_truth()
        hour_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).isoformat()
        with Inbox(inbox) as box:
            box.add_many(
                [
                    parse_notification(_older_notification(f"n-{n}", container, hour_ago))
                    for n, container in enumerate(truth["containers"][:200])
                ]
            )
        env = {"TERMINAL49_API_KEY": sb.api_key}
        load = _cli("load", "--full", "--duckdb", str(db), "--base-url", sb.base_url, env=env)
        time.sleep(1.0)
        apply = _cli("webhooks", "apply", "--duckdb", str(db), "--inbox", str(inbox), env=env)
        results = [p.communicate(timeout=300) for p in (load, apply)]
        assert [load.returncode, apply.returncode] == [0, 0], results
        with duckdb.connect(str(db), read_only=True) as con:
            got = dict(
                con.execute("SELECT id, available_for_pickup FROM terminal49.containers").fetchall()
            )
        wrong = [
            c["id"]
            for c in truth["containers"]
            if got[c["id"]] != c["attributes"].get("available_for_pickup")
        ]
        assert wrong == [], f"{len(wrong)} containers hold the older notification's value"
        assert "200 older records skipped" in results[1][0] + results[1][1], results[1]


@pytest.mark.parametrize("value", ["soon", "-1"])
def test_a_bad_writer_wait_is_one_line(tmp_path: Path, value: str) -> None:
    proc = _cli(
        "load",
        "--sandbox",
        "--duckdb",
        str(tmp_path / "w.duckdb"),
        env={"FREETIME_WRITER_WAIT": value},
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "Traceback" not in err
    assert err.startswith("error: ") and "WAIT" in err.upper()


def test_a_large_apply_prints_its_summary_and_no_traceback(tmp_path: Path) -> None:
    """6,788 notifications in one apply ran DuckDB out of its memory pool and printed 52
    tracebacks before a retry succeeded; now one summary line and nothing else."""
    with SandboxThread(containers=400, seed=19, clock=CLOCK) as sb:
        db, inbox = tmp_path / "w.duckdb", tmp_path / "inbox.sqlite"
        run_load(db, _api(sb))
        containers = sb.ground_truth()["containers"]
        start = dt.datetime.now(dt.UTC)
        with Inbox(inbox) as box:  # one transaction: the apply is under test, not the inbox
            box.add_many(
                [
                    parse_notification(
                        _older_notification(
                            f"big-{n}",
                            containers[n % len(containers)],
                            (start + dt.timedelta(seconds=n)).isoformat(),
                        )
                    )
                    for n in range(6788)
                ]
            )
        proc = _cli("webhooks", "apply", "--duckdb", str(db), "--inbox", str(inbox))
        out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    assert "Traceback" not in err and "Error" not in err, err[-2000:]
    assert "6788 notifications" in out + err, out + err
