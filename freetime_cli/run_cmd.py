"""`freetime run`: the `sync` flow once (load, risk, publish), then the at-risk table.

With no API key configured it loads from the embedded sandbox (a synthetic account), so a new
user sees the whole thing work before having a key. Prefect runs in ephemeral mode (its own
temporary server over the database in ``PREFECT_HOME``) unless ``PREFECT_API_URL`` points at a
server; its console output is cut to warnings and errors (the run's INFO logs still reach the
Prefect API and its UI). Ctrl+C stops it with one line and exit code 130; SIGTERM (``kill``,
a scheduler's timeout) likewise with 143, Prefect's temporary server stopped with it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from freetime_cli._common import (
    CarrierOption,
    DuckDbOption,
    LimitOption,
    PortOption,
    TerminalOption,
    WarehouseOption,
    WideOption,
    console,
    embedded_sandbox,
    fail,
    out,
    parse_as_of,
    print_error,
    quiet_logging,
    table_console,
    warehouse_given,
)
from freetime_cli.atrisk_table import Filters, parse_limit, print_at_risk
from pipelines import progress

if TYPE_CHECKING:
    from flows.sync import RunReport

# Set before Prefect is imported (it reads its settings once). setdefault: a user's own
# settings win. Without PREFECT_API_URL, Prefect starts its temporary server ("ephemeral mode")
# for the run over the database in PREFECT_HOME, and stops it at exit.
PREFECT_ENV = {
    # The console handler drops INFO chatter ("Starting temporary server", "Finished in state
    # Completed()") but keeps warnings and errors; the API handler keeps INFO for the UI.
    "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "WARNING",
    # Ephemeral mode on whatever the active profile says: `freetime run` needs no setup.
    "PREFECT_SERVER_EPHEMERAL_ENABLED": "true",
    # Its first start migrates a new database: far beyond the default 20 s on a busy machine.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    # The temporary server's telemetry heartbeat races its own first writes to a new SQLite
    # database and logs "database is locked" tracebacks; nothing here needs it.
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
}


# Set by Ctrl+C or SIGTERM: the interrupt may surface inside Prefect's engine as another failure.
_INTERRUPTED = threading.Event()
#: The signal that stopped the run (SIGINT or SIGTERM), for its line and exit code.
_STOPPED_BY: list[signal.Signals] = []


def _on_stop_signal(signum: int, frame: object) -> None:
    # SIGTERM's default action ends the process at once: no exit handlers, so Prefect's
    # temporary server would be left running. Both signals unwind the run the same way.
    _STOPPED_BY.append(signal.Signals(signum))
    _INTERRUPTED.set()
    raise KeyboardInterrupt


class _DropUserFacingTracebacks(logging.Filter):
    """Prefect logs a failed task or flow with its traceback; for the failures whose message is
    written for the user (no key, API unreachable, warehouse locked) this command prints that
    message as one line instead, so those records are dropped from the console only. So is
    everything Prefect logs after a Ctrl+C ("Crash detected", the failures it can cause)."""

    def __init__(self, kinds: tuple[type[BaseException], ...]) -> None:
        super().__init__()
        self.kinds = kinds

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and isinstance(exc, self.kinds):
            return False
        if _INTERRUPTED.is_set():  # whatever Prefect logs after a Ctrl+C: the command says it
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


def run(
    duckdb: DuckDbOption = None,
    warehouse: WarehouseOption = None,
    as_of: Annotated[
        str | None,
        typer.Option("--as-of", help="Compute risk as of this ISO 8601 instant (default: now)."),
    ] = None,
    limit: Annotated[str | None, LimitOption] = None,
    port: Annotated[str | None, PortOption] = None,
    terminal: Annotated[str | None, TerminalOption] = None,
    carrier: Annotated[str | None, CarrierOption] = None,
    wide: Annotated[bool, WideOption] = False,
) -> None:
    """Run the sync flow once: load the account, compute demurrage risk, publish, print it.

    Uses TERMINAL49_API_KEY (or .dlt/secrets.toml) when set; otherwise the embedded sandbox.
    """
    try:  # before anything starts: a bad option is one line
        view = TableView(parse_limit(limit), Filters.parse(port, terminal, carrier), wide)
    except ValueError as exc:
        fail(str(exc))
    for stop in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop, _on_stop_signal)
    try:
        target = warehouse_given(duckdb, warehouse)
        _run(target, as_of, view)
    except KeyboardInterrupt:
        stopped = _STOPPED_BY[0] if _STOPPED_BY else signal.SIGINT
        print_error(
            f"{'terminated' if stopped == signal.SIGTERM else 'interrupted'}: the warehouse "
            "holds what the last completed step wrote; the next run starts clean"
        )
        _silence_teardown()
        raise typer.Exit(128 + stopped) from None


def _silence_teardown() -> None:
    """After the interrupt's one line, send what the interpreter prints while it tears down a
    run cut mid-step to /dev/null: a step's thread may still hold a DuckDB connection at exit,
    and DuckDB's bindings then list a screenful of "nanobind: leaked ..." lines."""
    sys.stderr.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stderr.fileno())
    os.close(devnull)


def _run(duckdb: str | Path | None, as_of: str | None, view: TableView) -> None:
    command_started = time.perf_counter()
    age = process_age()
    started = command_started - age if age is not None else None
    from freetime_cli.load_cmd import check_writer
    from pipelines.config import ConfigError, resolve_warehouse
    from pipelines.warehouse import WarehouseUnusable

    try:
        when = parse_as_of(as_of)
        # a bad path, URL, password or server fails now, before the sandbox and Prefect start
        target = resolve_warehouse(duckdb)
        check_writer(target)
    except (ValueError, ConfigError, WarehouseUnusable) as exc:
        fail(str(exc))
    for key, value in PREFECT_ENV.items():
        os.environ.setdefault(key, value)
    quiet_logging()

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
        _start_temporary_prefect_server()
        if target.dsn is not None:
            # The flow takes the URL with its password masked (a parameter Prefect keeps);
            # its tasks complete it from this setting, in this process only.
            os.environ["FREETIME_WAREHOUSE"] = target.dsn
        bars = StepProgress(console)
        try:
            with progress.showing(bars):
                report = _run_sync(target.display if target.dsn else duckdb, when)
        finally:
            bars.close()
        finished = time.perf_counter()
    print_report(report, view)
    print_timing(
        report,
        Timing(started, command_started, finished, sandbox_seconds),
    )


class StepProgress:
    """Progress of the steps that wait on the API (:mod:`pipelines.progress`), on stderr: a
    live bar on a terminal; elsewhere a line when a step starts waiting and every 10 s."""

    STEPS = {"events": "transport events"}  # others read as they are: "load containers"

    def __init__(self, con: Console) -> None:
        self.con = con
        self.bars: Progress | None = None
        self.tasks: dict[str, TaskID] = {}
        self.said: dict[str, float] = {}
        self.lock = threading.Lock()  # the load's scans report from several threads

    def update(self, step: str, done: int, total: int | None, note: str = "") -> None:
        with self.lock:
            self._update(step, done, total, note)

    def _update(self, step: str, done: int, total: int | None, note: str) -> None:
        label = f"{self.STEPS.get(step, step)} ({note})" if note else self.STEPS.get(step, step)
        if not self.con.is_terminal:
            now = time.monotonic()
            if now - self.said.get(step, -1e9) >= 10.0:
                self.said[step] = now
                of = f" of {total}" if total is not None else ""
                self.con.print(f"{label}: {done}{of}...", highlight=False, soft_wrap=True)
            return
        if self.bars is None:
            self.bars = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=self.con,
                transient=True,
            )
            self.bars.start()
        if step not in self.tasks:
            self.tasks[step] = self.bars.add_task(label, total=total)
        self.bars.update(self.tasks[step], completed=done, total=total, description=label)

    def finish(self, step: str) -> None:
        with self.lock:
            task = self.tasks.pop(step, None)
            self.said.pop(step, None)
            if self.bars is not None and task is not None:
                self.bars.remove_task(task)
                if not self.tasks:
                    self.close()

    def close(self) -> None:
        """Stop the live display (also after a Ctrl+C or a failed step)."""
        if self.bars is not None:
            self.bars.stop()
            self.bars = None
        self.tasks.clear()


def _start_temporary_prefect_server() -> None:
    """Without ``PREFECT_API_URL``, start Prefect's temporary server (the one its ephemeral mode
    starts on the flow's first API call) now, out of reach of Ctrl+C; stopped at exit.

    A terminal sends Ctrl+C to the whole process group. A server that got it too would be gone
    when the interrupted flow reports its final state, and Prefect's client would retry against
    it for a minute. SIGINT is blocked while the server is spawned: the child inherits the mask
    (Python and uvicorn leave it as it is), so only this process sees the interrupt, and the
    server stops by SIGTERM when this process exits.
    """
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED

    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        return
    from prefect.server.api.server import SubprocessASGIServer

    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        SubprocessASGIServer().start()
    except RuntimeError as exc:  # it did not answer within the startup timeout
        fail(f"the temporary Prefect server did not start: {str(exc).splitlines()[0]}", code=1)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _run_sync(duckdb: str | Path | None, as_of: dt.datetime | None) -> RunReport:
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
    finally:
        _release_dlt_pipelines()
    # A step that treats its failures as warnings (events, report) can swallow the interrupt
    # and let the flow complete: Ctrl+C still ends the command with 130, never 0.
    if _INTERRUPTED.is_set():
        raise KeyboardInterrupt
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


def _release_dlt_pipelines() -> None:
    """Drop dlt's references to the pipelines the flow ran. Their destination credentials hold
    the (closed) DuckDB connection of the last write; alive at interpreter exit, DuckDB's
    bindings report it among a screenful of "nanobind: leaked ..." lines under the table."""
    from dlt.common.configuration.container import Container
    from dlt.common.pipeline import PipelineContext

    context = Container()[PipelineContext]
    context.deactivate()
    context.clear_activation_history()


def print_report(report: RunReport, view: TableView) -> None:
    """What the run loaded, the at-risk table (:mod:`freetime_cli.atrisk_table`), the levels,
    the API requests of each step."""
    from flows.artifacts import level_counts_line, money, single_currency

    risk = report.risk
    con = table_console()
    if report.load is not None:
        con.print(
            f"loaded {report.load.summary.table_counts_line()} into {report.duckdb_path}",
            highlight=False,
            soft_wrap=True,
        )
    rows = view.filters.apply(report.at_risk)
    title = f"At-risk containers ({len(rows)})"
    if view.filters:
        title += f", {view.filters.describe()}"
    if rows:
        # around the table: the "loaded" line above; levels, requests and timing below (two
        # lines each on a narrow terminal)
        print_at_risk(con, rows, title=title, limit=view.limit, wide=view.wide, reserve=7)
    elif view.filters:
        con.print(f"No at-risk container matches {view.filters.describe()}.", highlight=False)
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
    if report.requests:
        con.print(report.requests_line(), highlight=False, soft_wrap=True)


@dataclass(frozen=True)
class TableView:
    """How `freetime run` shows the at-risk list (the same options as `freetime risk`)."""

    limit: int | None = None
    filters: Filters = Filters()
    wide: bool = False


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
    - prefect start: from the command to the flow body: the
      embedded sandbox's start (also shown on its own), importing Prefect and the pipelines,
      the temporary API server's boot, creating the flow run;
    - every step of the flow, by name, in the order it ran (load, webhooks, risk, events,
      report, publish, alerts);
    - prefect finish: closing the run (final states, flushing logs) until the call returns
      (stopping the temporary server at exit comes after, uncounted).
    """
    steps = report.timings
    split: dict[str, float] = {}
    if t.process is not None:
        split["startup"] = t.command - t.process
    split["prefect start"] = report.body_started - t.command
    split.update(steps)
    split["prefect finish"] = t.finished - report.body_started - sum(steps.values())
    split["total"] = t.finished - (t.process if t.process is not None else t.command)
    return split


def print_timing(report: RunReport, t: Timing) -> None:
    split = timing_split(report, t)
    line = "timing: " + ", ".join(f"{k} {v:.1f}s" for k, v in split.items())
    if t.sandbox_seconds is not None:
        line += f" (sandbox start {t.sandbox_seconds:.1f}s, within prefect start)"
    out.print(line, highlight=False, soft_wrap=True)
