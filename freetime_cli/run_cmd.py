"""`freetime run`: the `sync` flow once (load, risk, publish), then the at-risk table.

With no API key configured it loads from the embedded sandbox (a synthetic account), so a new
user sees the whole thing work before having a key. Prefect runs in ephemeral mode unless
``PREFECT_API_URL`` points at a server; its console output is cut to warnings and errors (the
run's INFO logs still reach the Prefect API and its UI).
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from freetime_cli._common import (
    DuckDbOption,
    console,
    embedded_sandbox,
    fail,
    out,
    parse_as_of,
    print_error,
    quiet_logging,
)

if TYPE_CHECKING:
    from flows.sync import RunReport

PRIVATE_SERVER_ENV = "FREETIME_PRIVATE_PREFECT_SERVER"  # = flows.tasks.PRIVATE_SERVER_ENV

LEVEL_STYLE = {"overdue": "bold red", "due_today": "red", "imminent": "yellow"}

# Set before Prefect is imported (its logging config reads them once). setdefault: a user's own
# settings win. The console handler drops INFO chatter ("Starting temporary server", "Finished in
# state Completed()") but keeps warnings and errors; the API handler keeps INFO for the UI.
PREFECT_QUIET_ENV = {
    "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "WARNING",
    # The ephemeral server's telemetry heartbeat races its own first writes to a fresh SQLite
    # database and logs "database is locked" tracebacks; nothing here needs it.
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
}


class _DropUserFacingTracebacks(logging.Filter):
    """Prefect logs a failed task or flow with its traceback; for the failures whose message is
    written for the user (no key, API unreachable, warehouse locked) this command prints that
    message as one line instead, so those records are dropped from the console only."""

    def __init__(self, kinds: tuple[type[BaseException], ...]) -> None:
        super().__init__()
        self.kinds = kinds

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and isinstance(exc, self.kinds):
            return False
        message = record.getMessage()
        return not (
            record.name.startswith("prefect.")
            and any(k.__name__ in message for k in self.kinds)
            and (
                "Finished in state" in message
                or "Retries are exhausted" in message
                or "Task run failed" in message
            )
        )


def _quiet_prefect_console(kinds: tuple[type[BaseException], ...]) -> None:
    from prefect.logging.handlers import PrefectConsoleHandler

    drop = _DropUserFacingTracebacks(kinds)
    for name in ("", "prefect", "prefect.flow_runs", "prefect.task_runs"):
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, PrefectConsoleHandler):
                handler.addFilter(drop)


def process_age() -> float | None:
    """Seconds since this process started (Linux /proc), to count interpreter start and the
    CLI's imports in the timing split; None elsewhere."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _configured_prefect_api() -> str | None:
    """PREFECT_API_URL from the environment or the active Prefect profile, read without
    importing Prefect (that alone takes seconds, which the server start should overlap)."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    path = Path(os.environ.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    active = os.environ.get("PREFECT_PROFILE") or doc.get("active") or "ephemeral"
    value = (doc.get("profiles", {}).get(active) or {}).get("PREFECT_API_URL")
    return str(value) if value else None


class BackgroundPrefectServer:
    """The temporary Prefect API that ephemeral mode would start, started by us, early.

    Prefect's ephemeral mode starts the same server (uvicorn on ``create_app``, UI off, over the
    database in ``PREFECT_HOME``) only when the flow makes its first API call, after importing
    its server module in this process (~4 s here). Starting it first lets its boot overlap the
    imports and the sandbox start; the flow then talks to it through ``PREFECT_API_URL``.
    Stopped at interpreter exit, after Prefect's log and event workers have flushed (atexit
    runs in reverse order of registration and this registers before Prefect is imported).
    """

    def __init__(self) -> None:
        self.port = _free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "prefect.server.api.server:create_app",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "error",
                "--lifespan",
                "on",
            ],
            env={
                **os.environ,
                "PREFECT_UI_ENABLED": "0",
                "PREFECT__SERVER_EPHEMERAL": "1",
                "PREFECT__SERVER_FINAL": "1",
            },
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # Its own session: a Ctrl+C in the terminal reaches this process only, which then
            # releases the warehouse slot through the still-running server before stopping it.
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        atexit.register(self.stop)

    def wait(self, timeout: float = 180.0) -> None:
        """Block until the API answers; raise RuntimeError with the server's last words."""
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                if httpx.get(f"{self.api_url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self._log.seek(0)
        lines = self._log.read()[-2000:].decode(errors="replace").strip().splitlines()
        raise RuntimeError(
            "the temporary Prefect server did not start" + (f": {lines[-1]}" if lines else "")
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def _die_with_parent() -> None:
    """In the child, before exec (Linux): get SIGTERM when the parent dies, even by SIGKILL,
    so a killed `freetime run` leaves no server behind. A no-op elsewhere."""
    with contextlib.suppress(Exception):
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(
    duckdb: DuckDbOption = None,
    as_of: Annotated[
        str | None,
        typer.Option("--as-of", help="Compute risk as of this ISO 8601 instant (default: now)."),
    ] = None,
    limit: Annotated[
        int, typer.Option(min=0, help="At-risk rows to print, most urgent first (0: all).")
    ] = 25,
) -> None:
    """Run the sync flow once: load the account, compute demurrage risk, publish, print it.

    Uses TERMINAL49_API_KEY (or .dlt/secrets.toml) when set; otherwise the embedded sandbox.
    """
    code = 0
    try:
        _run(duckdb, as_of, limit)
    except typer.Exit as exc:
        code = exc.exit_code
    except KeyboardInterrupt:
        print_error("interrupted: the warehouse holds what the last completed step wrote; "
                    "the next run starts clean")
        code = 130
    _leave(code)


def _leave(code: int) -> None:
    """Exit after the exit handlers (Prefect flushes its logs, the temporary server stops) but
    without interpreter teardown: with Prefect loaded, DuckDB's bindings print a screenful of
    "nanobind: leaked ..." at teardown, which would bury the at-risk table."""
    sys.stdout.flush()
    sys.stderr.flush()
    _drain_prefect_workers()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _drain_prefect_workers() -> None:
    """Send Prefect's queued logs and events now, while the temporary server still runs.

    Prefect drains them at thread shutdown, which ``os._exit`` skips; a run that failed in its
    first seconds would otherwise still be sending when the server stops ("Error logging to
    API" on the console)."""
    if "prefect" not in sys.modules:
        return
    with contextlib.suppress(Exception):
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=5)
    with contextlib.suppress(Exception):
        from prefect.events.worker import EventsWorker

        EventsWorker.drain_all(timeout=5)


def _run(duckdb: Path | None, as_of: str | None, limit: int) -> None:
    command_started = time.perf_counter()
    age = process_age()
    started = command_started - age if age is not None else None
    from pipelines.config import ConfigError, resolve_duckdb_path
    from pipelines.warehouse import WarehouseUnusable, check_usable

    try:
        when = parse_as_of(as_of)
        # a bad path fails now, before the sandbox and the Prefect server start
        check_usable(resolve_duckdb_path(duckdb))
    except (ValueError, ConfigError, WarehouseUnusable) as exc:
        fail(str(exc))
    for key, value in PREFECT_QUIET_ENV.items():
        os.environ.setdefault(key, value)
    quiet_logging()
    server: BackgroundPrefectServer | None = None
    if "prefect" not in sys.modules and not _configured_prefect_api():
        server = BackgroundPrefectServer()
        os.environ["PREFECT_API_URL"] = server.api_url  # read when Prefect is imported
        os.environ[PRIVATE_SERVER_ENV] = "1"  # see flows.tasks.ensure_warehouse_limit

    from pipelines.config import ApiSettings

    try:
        api = ApiSettings.resolve()
    except ConfigError as exc:
        fail(str(exc))
    sandbox_seconds: float | None = None
    with contextlib.ExitStack() as stack:
        if not api.api_key:
            t = time.perf_counter()
            try:
                url, key = stack.enter_context(embedded_sandbox())
            except Exception as exc:  # SandboxStartError and friends: one line, no traceback
                fail(f"could not start the embedded sandbox: {exc}")
            sandbox_seconds = time.perf_counter() - t
            console.print(
                f"no TERMINAL49_API_KEY set: loading the synthetic account from the embedded "
                f"sandbox at {url} (set the key to load your own)",
                highlight=False,
                soft_wrap=True,
            )
            # In-process only, for the load task to resolve; the sandbox key is not a secret.
            os.environ["TERMINAL49_API_KEY"] = key
            os.environ["TERMINAL49_BASE_URL"] = url
        if server is not None:
            try:
                server.wait()
            except RuntimeError as exc:
                fail(str(exc), code=1)
        report = _run_sync(duckdb, when)
        finished = time.perf_counter()
    print_report(report, limit)
    print_timing(
        report,
        Timing(started, command_started, finished, sandbox_seconds),
    )


def _run_sync(duckdb: Path | None, as_of: dt.datetime | None) -> RunReport:
    """Run the flow; a failure becomes one line on stderr and exit code 1."""
    import httpx

    from flows.sync import sync
    from flows.tasks import USER_FACING

    _quiet_prefect_console(USER_FACING)
    try:
        state = sync(duckdb_path=str(duckdb) if duckdb else None, as_of=as_of, return_state=True)
    except httpx.HTTPError as exc:  # PREFECT_API_URL set but nothing answers there
        from prefect.settings import PREFECT_API_URL

        fail(f"cannot reach the Prefect API at {PREFECT_API_URL.value()}: {exc}", code=1)
    if not state.is_completed():
        result: Any = state.result(raise_on_failure=False)
        if isinstance(result, BaseException):
            message = (
                str(result)
                if isinstance(result, USER_FACING)
                else (f"{type(result).__name__}: {result}")
            )
        else:
            message = state.message or state.name or "the sync flow did not complete"
        fail(f"sync failed: {message}", code=1)
    report = state.result()
    assert report is not None
    return report


def at_risk_table(rows: list[dict[str, Any]], limit: int) -> Table:
    """The at-risk containers, most urgent first (the order the flow published)."""
    shown = rows if limit == 0 else rows[:limit]
    title = f"At-risk containers ({len(rows)})"
    if len(shown) < len(rows):
        title += f", the {len(shown)} most urgent"
    table = Table(title=title, show_edge=False, title_justify="left", expand=False)
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("container", no_wrap=True)
    table.add_column("risk", no_wrap=True)
    table.add_column("LFD", no_wrap=True)
    table.add_column("days", justify="right", no_wrap=True)
    table.add_column("terminal")
    table.add_column("reason", overflow="fold")
    table.add_column("projected", justify="right", no_wrap=True)
    for r in shown:
        level = str(r.get("risk_level") or "")
        projected = r.get("projected_demurrage")
        cost = (
            f"{projected:,.0f} {r.get('currency') or ''}".strip()
            if projected is not None
            else "n/a"
        )
        lfd = str(r.get("lfd") or "")
        if r.get("lfd_source"):
            lfd += f" ({r['lfd_source']})"
        table.add_row(  # Text, not str: names from the API are never read as markup
            str(r.get("rank")),
            Text(str(r.get("container") or "")),
            Text(level, style=LEVEL_STYLE.get(level, "")),
            Text(lfd),
            "" if r.get("days_to_lfd") is None else str(r["days_to_lfd"]),
            Text(str(r.get("terminal") or "")),
            Text(str(r.get("reason") or "")),
            Text(cost),
        )
    return table


def print_report(report: RunReport, limit: int) -> None:
    from flows.artifacts import level_counts_line, money, single_currency

    risk = report.risk
    # Piped or captured output gets a wide table rather than rich's 80-column default.
    con = out if out.is_terminal else Console(width=max(out.width, 160))
    if report.load is not None:
        con.print(f"loaded {report.load.summary.table_counts_line()} into {report.duckdb_path}")
    if report.at_risk:
        con.print(at_risk_table(report.at_risk, limit))
    else:
        con.print("No container is overdue, due today or imminent.")
    cur = single_currency(report.at_risk)
    changed = ""
    if report.changes is not None:
        c = report.changes
        changed = (
            f"; since the last run: {c.get('newly_overdue', 0)} newly overdue, "
            f"{c.get('newly_ready', 0)} newly ready, {c.get('lfd_moved', 0)} LFDs moved"
        )
    con.print(
        f"risk as of {risk.as_of:%Y-%m-%d %H:%M} UTC: {level_counts_line(risk.levels)}; "
        f"projected demurrage {money(risk.projected_demurrage, cur)}{changed}",
        highlight=False,
        soft_wrap=True,
    )


@dataclass
class Timing:
    """perf_counter instants of one `freetime run` (``process`` is None off Linux)."""

    process: float | None
    command: float
    finished: float
    sandbox_seconds: float | None


def timing_split(report: RunReport, t: Timing) -> dict[str, float]:
    """Wall time in seconds, adding up to the total:

    - startup: interpreter start and the CLI's imports, up to this command (Linux only);
    - prefect start: from the command to the flow body holding the warehouse slot: importing
      Prefect and the pipelines, the temporary API server's boot, creating the flow run; the
      embedded sandbox starts meanwhile (its own time is shown separately, not added);
    - load, risk, publish: the flow's three steps, each a Prefect task;
    - prefect finish: closing the run (final states, flushing logs) until the call returns.
    """
    steps = report.timings
    slot = steps.get("slot", 0.0)
    body = slot + steps.get("load", 0.0) + steps.get("risk", 0.0) + steps.get("publish", 0.0)
    split: dict[str, float] = {}
    if t.process is not None:
        split["startup"] = t.command - t.process
    split["prefect start"] = report.body_started + slot - t.command
    split["load"] = steps.get("load", 0.0)
    split["risk"] = steps.get("risk", 0.0)
    split["publish"] = steps.get("publish", 0.0)
    split["prefect finish"] = t.finished - report.body_started - body
    split["total"] = t.finished - (t.process if t.process is not None else t.command)
    return split


def print_timing(report: RunReport, t: Timing) -> None:
    split = timing_split(report, t)
    line = "timing: " + ", ".join(f"{k} {v:.1f}s" for k, v in split.items())
    if t.sandbox_seconds is not None:
        line += f" (sandbox start {t.sandbox_seconds:.1f}s, within prefect start)"
    out.print(line, highlight=False, soft_wrap=True)
