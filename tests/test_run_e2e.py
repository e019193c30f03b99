"""`freetime run` as a new user runs it: an empty folder, no API key, no Prefect set up.

The first run (:func:`first_run`) is done once for the module, in an empty folder over a new
Prefect home. The other runs start from a copy of the Prefect home it left, as a user's later
runs do: Prefect's temporary server then starts over a migrated database instead of migrating
a new one each time (some 7 CPU-seconds a run).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

AS_OF = "2026-11-20T12:00:00Z"


def _clean_env(tmp_path: Path) -> dict[str, str]:
    """The user's environment minus anything of this project or of Prefect; a private
    PREFECT_HOME so the user's own Prefect database is never touched."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TERMINAL49_", "FREETIME_", "PREFECT_"))
    }
    env["PREFECT_HOME"] = str(tmp_path / ".prefect")
    env["COLUMNS"] = "200"
    return env


def _freetime(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "freetime_cli.main", *args],
        cwd=tmp_path,
        env=env or _clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def first_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A new user's first `freetime run`: an empty folder, no key, a new Prefect home. Returns
    the folder (read it; copy its ``.prefect`` to run again) and the finished command."""
    folder = tmp_path_factory.mktemp("first-run")
    return folder, _freetime(folder, "run", "--as-of", AS_OF, "--limit", "0")


def _second_run_home(
    first_run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """Give ``tmp_path`` a copy of the Prefect home the first run left (its server is gone:
    the SQLite files are at rest), so a run there is a user's next run, not a first one."""
    first, result = first_run
    assert result.returncode == 0, f"the first run failed:\n{result.stderr[-3000:]}"
    shutil.copytree(first / ".prefect", tmp_path / ".prefect")


def test_freetime_run_in_an_empty_folder_without_a_key(
    first_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    tmp_path, result = first_run
    assert result.returncode == 0, result.stderr[-3000:]
    err_lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert any("embedded sandbox" in line for line in err_lines), result.stderr
    # Prefect's console chatter is cut to warnings: no INFO lines, no tracebacks.
    assert not [line for line in err_lines if "| INFO" in line], result.stderr
    assert "Traceback" not in result.stderr and "nanobind" not in result.stderr

    out = result.stdout
    assert "At-risk containers" in out and "reason" in out and "projected" in out
    assert "risk as of 2026-11-20 12:00 UTC: overdue" in out
    timing = next(line for line in out.splitlines() if line.startswith("timing: "))
    steps = ("load", "webhooks", "risk", "events", "report", "publish")
    for part in ("prefect start", *steps, "prefect finish", "total"):
        assert f"{part} " in timing
    # every second is named: the parts add up to the total
    body = timing.removeprefix("timing: ").split(" (sandbox")[0]
    seconds = {k: float(v.rstrip("s")) for k, v in (p.rsplit(" ", 1) for p in body.split(", "))}
    total = seconds.pop("total")
    assert abs(sum(seconds.values()) - total) < 0.5, timing
    requests = next(line for line in out.splitlines() if line.startswith("API requests: "))
    assert re.search(r"load \d+, webhooks 0, events (\d+) \(budget 40", requests), requests
    assert int(re.findall(r"events (\d+)", requests)[0]) <= 40

    warehouse = tmp_path / "data" / "freetime.duckdb"
    assert warehouse.exists()
    with duckdb.connect(str(warehouse), read_only=True) as con:
        tables = {
            (s, t)
            for s, t in con.execute(
                "SELECT table_schema, table_name FROM information_schema.tables"
            ).fetchall()
        }
        for t in (
            "containers",
            "shipments",
            "container_holds",
            "container_fees",
            "terminals",
            "ports",
        ):
            assert ("terminal49", t) in tables
        for t in (
            "demurrage_risk",
            "at_risk_containers",
            "exposure_by_terminal",
            "lfd_calendar",
            "containers_wide",
        ):
            assert ("analytics", t) in tables
        assert con.execute("SELECT count(*) FROM terminal49.containers").fetchone() == (500,)
        first = con.execute(
            "SELECT container_number FROM analytics.at_risk_containers ORDER BY urgency_rank"
        ).fetchone()
        n_at_risk = con.execute("SELECT count(*) FROM analytics.at_risk_containers").fetchone()
    assert first is not None and first[0] in out
    assert n_at_risk is not None and f"At-risk containers ({n_at_risk[0]})" in out
    assert f"\n{n_at_risk[0]} shown; projected demurrage " in out  # --limit 0: every one


def _stopped_while_loading(tmp_path: Path, stop: Callable[[int], None]) -> tuple[int, str]:
    """Start `freetime run` in ``tmp_path`` in its own process group (as under a terminal),
    call ``stop(pid)`` once the load reports its first page, and wait for the command: its exit
    code and stderr. Fails unless every process of the group is gone within 30 s."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "freetime_cli.main", "run", "--as-of", AS_OF],
        cwd=tmp_path,
        env=_clean_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    # The stop lands where the run waits for it: once the load reports its first page.
    # stderr is read on a thread so the run never blocks on a full pipe.
    lines: list[str] = []
    loading = threading.Event()

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("load "):
                loading.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        loading.wait(timeout=240)
        assert loading.is_set() and proc.poll() is None, "".join(lines)[-3000:]
        stop(proc.pid)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(timeout=10)
    deadline = time.monotonic() + 30
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = _group_alive(proc.pid)
    if alive:
        os.killpg(proc.pid, signal.SIGKILL)
    assert not alive, "a process of the stopped run is still running"
    return proc.returncode, "".join(lines)


def _assert_one_line(stderr: str, line: str) -> None:
    """``line`` is the last thing said: no traceback, no teardown noise after it."""
    assert stderr.rstrip().splitlines()[-1].startswith(line), stderr[-3000:]
    assert "Traceback" not in stderr and "nanobind" not in stderr, stderr[-3000:]


def test_ctrl_c_stops_the_run_cleanly_and_the_next_run_goes_through(
    first_run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """Ctrl+C in a terminal reaches the whole process group (the command, Prefect's temporary
    server, the embedded sandbox): one line, exit 130, nothing left running; the next run in
    the same folder (same Prefect database, same warehouse) is not blocked by the one
    interrupted while it was loading. The interrupted run is a user's second: over the Prefect
    home of a completed first run, with no warehouse yet."""
    _second_run_home(first_run, tmp_path)
    code, stderr = _stopped_while_loading(tmp_path, lambda pid: os.killpg(pid, signal.SIGINT))
    assert code == 130, stderr[-3000:]
    _assert_one_line(stderr, "error: interrupted:")

    result = _freetime(tmp_path, "run", "--as-of", AS_OF, "--limit", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "At-risk containers" in result.stdout


def test_sigterm_stops_the_run_and_its_temporary_server(
    first_run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """SIGTERM to the command alone (`kill`, a scheduler's timeout) ends it as Ctrl+C does,
    exit 143: Prefect's temporary server and the embedded sandbox stop with it, not orphaned."""
    _second_run_home(first_run, tmp_path)
    code, stderr = _stopped_while_loading(tmp_path, lambda pid: os.kill(pid, signal.SIGTERM))
    assert code == 143, stderr[-3000:]
    _assert_one_line(stderr, "error: terminated:")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_freetime_run_bad_input_is_one_line(tmp_path: Path) -> None:
    result = _freetime(tmp_path, "run", "--as-of", "next tuesday", timeout=60)
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0 and "--as-of" in result.stderr
    assert "Traceback" not in result.stderr
    for args, needle in ((["--limit", "-1"], "--limit -1"), (["--port", "LA"], "--port 'LA'")):
        result = _freetime(tmp_path, "run", *args, timeout=60)
        assert result.returncode == 2 and result.stderr.startswith(f"error: {needle}")
        assert result.stderr.strip().count("\n") == 0, result.stderr
    assert not (tmp_path / "data").exists()  # refused before anything started


def test_freetime_run_failing_in_its_first_task(
    first_run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """A flow that fails in its first task (the warehouse holds another account) ends with the
    message, and Prefect's queued logs are sent before the temporary server stops (no "Error
    logging to API"). A file that is not DuckDB is refused before anything starts."""
    _second_run_home(first_run, tmp_path)
    other = tmp_path / "other.duckdb"
    with duckdb.connect(str(other)) as con:
        con.execute("CREATE SCHEMA terminal49")
        con.execute(
            "CREATE TABLE terminal49.freetime_source (source VARCHAR, recorded_at TIMESTAMPTZ)"
        )
        con.execute(
            "INSERT INTO terminal49.freetime_source VALUES ('https://api.terminal49.com/v2', now())"
        )
    before = other.read_bytes()
    result = _freetime(tmp_path, "run", "--duckdb", str(other), timeout=120)
    assert result.returncode == 1, result.stderr[-3000:]
    assert (
        f"error: sync failed: the warehouse {other} holds data loaded from "
        "https://api.terminal49.com/v2"
    ) in result.stderr
    assert "Error logging to API" not in result.stderr and "Traceback" not in result.stderr
    assert other.read_bytes() == before  # nothing written

    notes = tmp_path / "notes.duckdb"
    notes.write_text("not a database\n")
    result = _freetime(tmp_path, "run", "--duckdb", str(notes), timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.startswith(f"error: cannot open the warehouse {notes}")
    assert "not a valid DuckDB database file" in result.stderr
    assert notes.read_text() == "not a database\n"  # the user's file is left as it was
