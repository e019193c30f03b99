"""The load against the sandbox over real HTTP: the warehouse equals the API's ground truth."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

from pipelines.config import ApiSettings, ConfigError, pipelines_dir_for
from pipelines.load import PIPELINE_NAME, LoadFailed, run_load
from pipelines.terminal49.docs import COLUMN_COMMENTS, TABLE_COMMENTS, apply_comments
from pipelines.terminal49.scan import ScanStats
from pipelines.warehouse import WarehouseLocked
from pipelines.write import make_pipeline
from sandbox.thread import SandboxThread

pytestmark = pytest.mark.sandbox

CLOCK = "2026-11-20T12:00:00Z"
REPO = Path(__file__).resolve().parents[1]


def _api(sb: Any, **kw: Any) -> ApiSettings:
    return ApiSettings(
        base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=kw.get("rate", 100_000)
    )


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple[Any, ...]]:
    return con.execute(sql).fetchall()


def _ts(value: str | None) -> str | None:
    """An API timestamp as DuckDB prints a UTC instant (for comparing)."""
    if value is None:
        return None
    from datetime import UTC, datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC).isoformat()


def _local_day(value: str | None, zone: str | None) -> str | None:
    """An API LFD (bare date or instant) as its calendar day in ``zone`` (UTC when none)."""
    if not value or len(value) == 10:
        return value
    from datetime import datetime
    from zoneinfo import ZoneInfo

    instant = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return instant.astimezone(ZoneInfo(zone or "UTC")).date().isoformat()


def assert_equals_ground_truth(db: Path, truth: dict[str, Any], *, values: bool = True) -> None:
    """Every table holds exactly the ground truth's records (and, with values, their fields)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        ids = [r[0] for r in _rows(con, "SELECT id FROM terminal49.containers")]
        assert len(ids) == len(set(ids)), "duplicated containers"
        assert set(ids) == {c["id"] for c in truth["containers"]}
        ship = [r[0] for r in _rows(con, "SELECT id FROM terminal49.shipments")]
        assert len(ship) == len(set(ship))
        assert set(ship) == {s["id"] for s in truth["shipments"]}
        terminal_ids = {r[0] for r in _rows(con, "SELECT id FROM terminal49.terminals")}
        port_ids = {r[0] for r in _rows(con, "SELECT id FROM terminal49.ports")}
        referenced_terminals = {
            c["relationships"]["pod_terminal"]["data"]["id"]
            for c in truth["containers"]
            if (c["relationships"].get("pod_terminal") or {}).get("data")
        }
        assert referenced_terminals <= terminal_ids
        assert {t["id"] for t in truth["terminals"]} >= terminal_ids
        assert {p["id"] for p in truth["ports"]} >= port_ids
        if not values:
            return
        holds = Counter(
            _rows(con, "SELECT container_id, name, status FROM terminal49.container_holds")
        )
        fees = Counter(
            (c, t, round(a, 2))
            for c, t, a in _rows(
                con, "SELECT container_id, type, amount FROM terminal49.container_fees"
            )
        )
        want_holds: Counter[tuple[Any, ...]] = Counter()
        want_fees: Counter[tuple[Any, ...]] = Counter()
        for c in truth["containers"]:
            for h in c["attributes"].get("holds_at_pod_terminal") or []:
                want_holds[(c["id"], h["name"], h["status"])] += 1
            for f in c["attributes"].get("fees_at_pod_terminal") or []:
                want_fees[(c["id"], f["type"], round(float(f["amount"]), 2))] += 1
        assert holds == want_holds
        assert fees == want_fees
        got = {
            r[0]: r[1:]
            for r in _rows(
                con,
                "SELECT id, current_status, available_for_pickup, "
                "strftime(pickup_lfd_terminal, '%Y-%m-%d'), "
                "strftime(pod_discharged_at AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%S'), "
                "shipment_id FROM terminal49.containers",
            )
        }
        for c in truth["containers"]:
            a = c["attributes"]
            lfd = (a.get("import_deadlines") or {}).get("pickup_lfd_terminal")
            want = (
                a["current_status"],
                a["available_for_pickup"],
                _local_day(lfd, a.get("pod_timezone")),
                _ts(a["pod_discharged_at"])[:19] if a.get("pod_discharged_at") else None,
                c["relationships"]["shipment"]["data"]["id"],
            )
            assert got[c["id"]] == want, c["id"]
    finally:
        con.close()


@pytest.fixture(scope="module")
def sandbox() -> Any:
    with SandboxThread(containers=400, seed=7, clock=CLOCK) as sb:
        yield sb


@pytest.fixture(scope="module")
def loaded(sandbox: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A warehouse loaded once from ``sandbox`` (which no test moves): read it, or copy it
    with :func:`_copy_of` to write."""
    db = tmp_path_factory.mktemp("loaded") / "w.duckdb"
    run_load(db, _api(sandbox))
    return db


def _copy_of(loaded: Path, tmp_path: Path) -> Path:
    """``loaded``'s file alone (no working folder) as ``tmp_path / "w.duckdb"``."""
    return Path(shutil.copy(loaded, tmp_path / "w.duckdb"))


def test_tables_types_and_ground_truth(sandbox: Any, tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    summary = run_load(db, _api(sandbox))
    assert summary.rows["containers"] >= 400
    assert_equals_ground_truth(db, sandbox.ground_truth())
    con = duckdb.connect(str(db), read_only=True)
    types = dict(
        _rows(
            con,
            "SELECT table_name || '.' || column_name, data_type FROM duckdb_columns() "
            "WHERE schema_name = 'terminal49'",
        )
    )
    con.close()
    expected = {
        "containers.id": "VARCHAR",
        "containers.pickup_lfd_terminal": "DATE",
        "containers.pickup_lfd_rail": "DATE",
        "containers.pickup_lfd_line": "DATE",
        "containers.available_for_pickup": "BOOLEAN",
        "containers.equipment_length": "BIGINT",
        "containers.weight_in_lbs": "DOUBLE",
        "containers.ref_numbers": "JSON",
        "containers.shipment_id": "VARCHAR",
        "containers.pod_terminal_id": "VARCHAR",
        "containers.pickup_facility_id": "VARCHAR",
        "shipments.pod_eta_at": "TIMESTAMP WITH TIME ZONE",
        "shipments.tags": "JSON",
        "shipments.port_of_discharge_id": "VARCHAR",
        "shipments.destination_terminal_id": "VARCHAR",
        "container_holds.status": "VARCHAR",
        "container_fees.amount": "DOUBLE",
        "terminals.firms_code": "VARCHAR",
        "ports.time_zone": "VARCHAR",
    }
    for column, kind in expected.items():
        assert types.get(column) == kind, column


def _dump(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    con = duckdb.connect(str(db), read_only=True)
    out = {}
    for table in (
        "containers",
        "shipments",
        "container_holds",
        "container_fees",
        "terminals",
        "ports",
    ):
        cols = [
            r[0]
            for r in _rows(
                con,
                f"SELECT column_name FROM duckdb_columns() WHERE schema_name='terminal49' "
                f"AND table_name='{table}' "
                "AND column_name NOT IN ('fetched_at', '_dlt_load_id', '_dlt_id')",
            )
        ]
        out[table] = sorted(
            _rows(con, f"SELECT {', '.join(cols)} FROM terminal49.{table}"), key=repr
        )
    con.close()
    return out


def _comments(db: Path) -> dict[tuple[str, str | None], str | None]:
    with duckdb.connect(str(db), read_only=True) as con:
        tables = _rows(
            con,
            "SELECT table_name, NULL, comment FROM duckdb_tables() "
            "WHERE schema_name = 'terminal49'",
        )
        columns = _rows(
            con,
            "SELECT table_name, column_name, comment FROM duckdb_columns() "
            "WHERE schema_name = 'terminal49'",
        )
    return {(t, c): text for t, c, text in tables + columns}


def test_second_load_leaves_identical_rows(sandbox: Any, tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    run_load(db, _api(sandbox))
    first, comments = _dump(db), _comments(db)
    # analysts find the fields from SQL: every documented table and column has its comment
    for table, text in TABLE_COMMENTS.items():
        assert comments[table, None] == text
    for table, named in COLUMN_COMMENTS.items():
        for column, text in named.items():
            if (table, column) in comments:
                assert comments[table, column] == text, (table, column)
    assert comments["containers", "pod_terminal_id"] is not None
    run_load(db, _api(sandbox))
    assert _dump(db) == first
    assert _comments(db) == comments
    with duckdb.connect(str(db), read_only=True) as con:  # no copy of a load stays behind
        staged = _rows(
            con,
            "SELECT table_name FROM duckdb_tables() "
            "WHERE schema_name = '_incoming_load' AND table_name NOT LIKE '_dlt%'",
        )
        assert {"containers", "container_holds"} <= {t for (t,) in staged}
        for (table,) in staged:
            assert _rows(con, f'SELECT count(*) FROM _incoming_load."{table}"') == [(0,)]
    with duckdb.connect(str(db)) as con:  # all in place: nothing is rewritten
        assert apply_comments(con, "terminal49") == 0
        con.execute("COMMENT ON TABLE terminal49.containers IS 'changed by hand'")
        assert apply_comments(con, "terminal49") == 1
    # written packages are deleted, not kept to pile up with every scheduled load
    load_dir = pipelines_dir_for(db) / PIPELINE_NAME / "load"
    assert load_dir.is_dir() and not any(load_dir.glob("loaded/*")), list(load_dir.rglob("*"))


def test_world_moves_cleared_holds_disappear() -> None:
    with SandboxThread(containers=300, seed=11, clock=CLOCK) as sb:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "w.duckdb"
            run_load(db, _api(sb))
            before = sb.ground_truth()
            holds_before = {
                (c["id"], h["name"])
                for c in before["containers"]
                for h in c["attributes"]["holds_at_pod_terminal"] or []
            }
            moved = sb.advance(hours=72)
            assert moved["changed_containers"] > 0
            run_load(db, _api(sb))
            after = sb.ground_truth()
            assert_equals_ground_truth(db, after)
            holds_after = {
                (c["id"], h["name"])
                for c in after["containers"]
                for h in c["attributes"]["holds_at_pod_terminal"] or []
            }
            cleared = holds_before - holds_after
            assert cleared, "the sandbox cleared no hold in 72 h: the test proves nothing"
            con = duckdb.connect(str(db), read_only=True)
            rows = {
                tuple(r)
                for r in _rows(con, "SELECT container_id, name FROM terminal49.container_holds")
            }
            con.close()
            assert not (cleared & rows)


def test_faults_and_reordering_during_the_scan() -> None:
    faults = "5xx=0.05,429=0.05,truncate=0.01,drop=0.01"
    with SandboxThread(containers=1500, seed=5, clock=CLOCK, faults=faults) as sb:
        import tempfile

        perturbations = 0

        def on_page(stats: ScanStats) -> None:
            nonlocal perturbations
            # While the client pages, the world changes and reorders under it.
            if stats.kind == "containers" and stats.pages in (3, 6, 9):
                sb.advance(hours=12)
                sb.refresh(count=60)
                perturbations += 1

        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "w.duckdb"
            summary = run_load(db, _api(sb), on_page=on_page)
            assert perturbations == 3
            assert summary.retries > 0, "no fault was met: the test proves nothing"
            # The set of records is exact: nothing missing, nothing duplicated.
            assert_equals_ground_truth(db, sb.ground_truth(), values=False)
            # And the next load (world still, faults still on) has every value right.
            run_load(db, _api(sb))
            assert_equals_ground_truth(db, sb.ground_truth())


def _cli(*args: str, env: dict[str, str] | None = None, **kw: Any) -> subprocess.Popen[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TERMINAL49_")}
    full_env.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-m", "freetime_cli.main", *args],
        cwd=kw.get("cwd", REPO),
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _loaded_apart(sb: Any, tmp_path: Path) -> Path:
    """A warehouse loaded from ``sb``, copied alone into a new folder: the key's shared window
    there is empty, so a load into it at 8 requests a minute sends 8 at once and then waits
    (the 20-odd requests of the loading would fill the window for a minute)."""
    seed = tmp_path / "seed" / "w.duckdb"
    run_load(seed, _api(sb, rate=100_000))
    (tmp_path / "run").mkdir()
    return Path(shutil.copy(seed, tmp_path / "run" / "w.duckdb"))


def test_ctrl_c_stops_the_load_at_once_and_writes_nothing(tmp_path: Path) -> None:
    """Ctrl+C while the loader waits for the rate window: it stops in seconds (not when the
    60 s window frees up), exits 130 with one line, and the warehouse is as it was."""
    with SandboxThread(containers=1000, seed=4, clock=CLOCK) as sb:
        db = _loaded_apart(sb, tmp_path)
        before = _dump(db)
        sb.advance(hours=24)
        sb.reset_stats()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERMINAL49_")}
        env.update({"TERMINAL49_API_KEY": sb.api_key, "TERMINAL49_RATE_LIMIT": "8"})
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "freetime_cli.main",
                "load",
                "--duckdb",
                str(db),
                "--base-url",
                sb.base_url,
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # as in a terminal, whatever the test runner's own SIGINT disposition is
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        deadline = time.monotonic() + 60
        while sb.stats()["requests"] < 8 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sb.stats()["requests"] >= 8, "the load did not send its first 8 requests"
        time.sleep(1.0)
        assert proc.poll() is None, f"the load ended first: {proc.stderr and proc.stderr.read()}"
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert time.monotonic() - sent < 10, "Ctrl+C waited for the rate window"
        assert proc.returncode == 130, err
        assert "error: interrupted: nothing was written" in err and "Traceback" not in err
        assert _dump(db) == before


def test_killed_load_leaves_old_data_and_next_load_completes(tmp_path: Path) -> None:
    with SandboxThread(containers=1000, seed=3, clock=CLOCK, rate_limit=600) as sb:
        db = _loaded_apart(sb, tmp_path)
        with duckdb.connect(str(db), read_only=True) as con:
            old = _rows(con, "SELECT count(*) FROM terminal49.containers")
        sb.advance(hours=24)
        sb.reset_stats()
        # 8 requests a minute: the first 8 pages come at once, then the loader waits, mid-scan.
        env = {"TERMINAL49_API_KEY": sb.api_key, "TERMINAL49_RATE_LIMIT": "8"}
        proc = _cli("load", "--duckdb", str(db), "--base-url", sb.base_url, env=env)
        deadline = time.monotonic() + 60
        while sb.stats()["requests"] < 8 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sb.stats()["requests"] >= 8, "the load did not send its first 8 requests"
        time.sleep(1.0)
        assert proc.poll() is None, (
            f"the load ended before it could be killed: {proc.stderr.read()}"
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        con = duckdb.connect(str(db), read_only=True)
        assert _rows(con, "SELECT count(*) FROM terminal49.containers") == old
        con.close()
        run_load(db, _api(sb))
        assert_equals_ground_truth(db, sb.ground_truth())


def test_key_never_appears_in_logs_or_files(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = "sekret-7d1f0c9e5b"
    caplog.set_level("DEBUG")
    with SandboxThread(containers=200, seed=2, clock=CLOCK, api_key=key, faults="5xx=0.1") as sb:
        db = tmp_path / "w.duckdb"
        summary = run_load(db, _api(sb))
        assert summary.retries > 0
        env = {"TERMINAL49_API_KEY": key}
        proc = _cli("load", "--duckdb", str(db), "--base-url", sb.base_url, env=env)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert key not in caplog.text
    assert key not in out + err
    assert key not in repr(_api(sb)) and key not in repr(ApiSettings(api_key=key))
    blobs = [db, *pipelines_dir_for(db).rglob("*")]
    for f in blobs:
        if f.is_file():
            assert key.encode() not in f.read_bytes(), f


def test_wrong_or_missing_key_is_one_clear_line(tmp_path: Path) -> None:
    with SandboxThread(containers=50, seed=1, clock=CLOCK) as sb:
        proc = _cli(
            "load",
            "--duckdb",
            str(tmp_path / "w.duckdb"),
            "--base-url",
            sb.base_url,
            env={"TERMINAL49_API_KEY": "wrong"},
        )
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 2
        assert "refused the key" in err and "Traceback" not in err
        with pytest.raises(LoadFailed, match="refused the key"):
            run_load(tmp_path / "x.duckdb", ApiSettings(base_url=sb.base_url, api_key="wrong"))
    proc = _cli("load", "--duckdb", str(tmp_path / "w.duckdb"), env={}, cwd=tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "no API key" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    with pytest.raises(ConfigError):
        run_load(tmp_path / "x.duckdb", ApiSettings(base_url="http://127.0.0.1:9/v2"))


def test_unreachable_api_fails_cleanly_and_keeps_the_warehouse(
    sandbox: Any, loaded: Path, tmp_path: Path
) -> None:
    db = _copy_of(loaded, tmp_path)
    before = _dump(db)
    bad = ApiSettings(base_url="http://127.0.0.1:9/v2", api_key="k")
    started = time.monotonic()
    with pytest.raises(
        LoadFailed,
        match=r"cannot reach the API at http://127.0.0.1:9/v2 "
        r"\(connection refused\); check TERMINAL49_BASE_URL",
    ):
        run_load(db, bad)  # the full retry budget, yet it fails in seconds: never answered
    assert time.monotonic() - started < 15
    assert _dump(db) == before
    proc = _cli(
        "load",
        "--duckdb",
        str(db),
        "--base-url",
        "http://127.0.0.1:9/v2",
        env={"TERMINAL49_API_KEY": "k"},
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "Traceback" not in err
    assert "error: load failed while reading the API: cannot reach the API" in err
    assert _dump(db) == before
    run_load(db, _api(sandbox))
    assert _dump(db) == before


def test_bad_arguments_fail_before_the_sandbox_or_prefect_starts(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    proc = _cli("load", "--sandbox", "--duckdb", str(blocker / "w.duckdb"))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "Traceback" not in err
    assert f"cannot create the folder {blocker}" in err
    assert "sandbox" not in out + err  # it never started
    proc = _cli(
        "load",
        "--sandbox",
        "--base-url",
        "http://api.example/v2",
        "--duckdb",
        str(tmp_path / "w.duckdb"),
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and err.startswith("error: --sandbox loads from the local sandbox")
    assert not (tmp_path / "w.duckdb").exists()
    proc = _cli(
        "load",
        "--sandbox",
        "--duckdb",
        str(tmp_path / "w.duckdb"),
        env={"TERMINAL49_RATE_LIMIT": "fast"},
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "sandbox" not in out
    assert err == "error: rate limit must be a number of requests per minute: 'fast'\n"
    started = time.monotonic()
    proc = _cli("run", "--duckdb", str(tmp_path))  # a folder: before Prefect and the sandbox
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "Traceback" not in err
    assert err.startswith(f"error: the warehouse path {tmp_path} is a folder")
    assert time.monotonic() - started < 8 and "sandbox" not in out + err
    # a file that is not DuckDB: also refused before anything starts
    for args in (["run"], ["load", "--sandbox"]):
        proc = _cli(*args, "--duckdb", str(blocker))
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 2 and "sandbox" not in out + err, err
        assert err.startswith(f"error: cannot open the warehouse {blocker}: "), err
        assert blocker.read_text() == "not a folder"
    # a file where the writers' working folder goes (dlt failed with a bare NotADirectoryError)
    room = tmp_path / "room"
    room.mkdir()
    (room / ".dlt-pipelines").write_text("in the way")
    for args in (["run"], ["load", "--sandbox"]):
        proc = _cli(*args, "--duckdb", str(room / "w.duckdb"))
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 2 and "Traceback" not in err, err
        assert "sandbox" not in out + err, err
        working = room / ".dlt-pipelines" / "w"
        assert err.startswith(f"error: cannot use {working} for the working files"), err
    with pytest.raises(ConfigError, match="a path in a folder you can write"):
        make_pipeline(room / "w.duckdb", "webhooks")  # apply and documents meet it here
    assert sorted(p.name for p in room.iterdir()) == [".dlt-pipelines"]


def test_webhooks_apply_without_an_inbox_creates_nothing(tmp_path: Path) -> None:
    proc = _cli("webhooks", "apply", "--duckdb", str(tmp_path / "w.duckdb"))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"nothing to apply: no inbox at {tmp_path / 'inbox.sqlite'}" in " ".join(out.split())
    assert list(tmp_path.iterdir()) == []
    proc = _cli("webhooks", "apply", "--inbox", str(tmp_path / "missing.sqlite"))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "no inbox at" in err and "Traceback" not in err


def _hold_read_lock(db: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process (a notebook, say) holding a read-only connection for a while."""
    code = (
        "import duckdb, sys, time; c = duckdb.connect(sys.argv[1], read_only=True); "
        "print('locked', flush=True); time.sleep(float(sys.argv[2]))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(db), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


class _OnRecord(logging.Handler):
    """Calls ``act`` on each record it is given."""

    def __init__(self, act: Callable[[], object]) -> None:
        super().__init__()
        self.act = act

    def emit(self, record: logging.LogRecord) -> None:
        self.act()


def test_locked_warehouse_is_retried_then_reported(
    sandbox: Any, loaded: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = _copy_of(loaded, tmp_path)
    before = _dump(db)
    # A reader that goes away within the retry window: the load waits, says so, then completes.
    # The reader leaves once the load says it waits (a fixed hold raced the load's own pace).
    reader = _hold_read_lock(db, 120)
    leave = _OnRecord(reader.kill)
    logging.getLogger("freetime.warehouse").addHandler(leave)
    try:
        with caplog.at_level("WARNING", logger="freetime.warehouse"):
            summary = run_load(db, _api(sandbox), lock_retry_seconds=30)
    finally:
        logging.getLogger("freetime.warehouse").removeHandler(leave)
        reader.kill()
        reader.wait()
    assert summary.rows["containers"] > 0
    assert [r.getMessage() for r in caplog.records if r.name == "freetime.warehouse"] == [
        f"the warehouse {db} is locked by another process; waiting up to 30s"
    ]
    # A reader that stays: a plain message, and the warehouse is as it was.
    reader = _hold_read_lock(db, 30)
    try:
        with pytest.raises(WarehouseLocked, match="stayed locked by another process"):
            run_load(db, _api(sandbox), lock_retry_seconds=2)
    finally:
        reader.kill()
        reader.wait()
    assert _dump(db) == before
    run_load(db, _api(sandbox))
    assert_equals_ground_truth(db, sandbox.ground_truth())


def test_a_warehouse_never_mixes_two_accounts(sandbox: Any, loaded: Path, tmp_path: Path) -> None:
    db = _copy_of(loaded, tmp_path)
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT source FROM terminal49.freetime_source").fetchall() == [
            ("sandbox",)
        ]
        con.execute("SELECT count(*) FROM terminal49.containers").fetchall()
    # Pretend the warehouse holds a real account: loading the sandbox into it is refused.
    with duckdb.connect(str(db)) as con:
        con.execute(
            "UPDATE terminal49.freetime_source SET source = 'https://api.terminal49.com/v2'"
        )
    before = _dump(db)
    with pytest.raises(ConfigError, match="holds data loaded from https://api.terminal49.com/v2"):
        run_load(db, _api(sandbox))
    assert _dump(db) == before
