"""`freetime run`: the `sync` flow once (load, risk, publish), then the at-risk table.

With no API key configured it loads from the embedded sandbox (a synthetic account), so a new
user sees the whole thing work before having a key. Prefect runs in ephemeral mode (its own
temporary server over the database in ``PREFECT_HOME``) unless ``PREFECT_API_URL`` points at a
server; its console output is cut to warnings and errors (the run's INFO logs still reach the
Prefect API and its UI). Ctrl+C stops it with one line and exit code 130.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import signal
import threading
import time
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

LEVEL_STYLE = {"overdue": "bold red", "due_today": "red", "imminent": "yellow"}

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


# Set by Ctrl+C: the interrupt may surface inside Prefect's engine as another failure.
_INTERRUPTED = threading.Event()


def _on_sigint(signum: int, frame: object) -> None:
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
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        _run(duckdb, as_of, limit)
    except KeyboardInterrupt:
        print_error(
            "interrupted: the warehouse holds what the last completed step wrote; "
            "the next run starts clean"
        )
        raise typer.Exit(130) from None


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
        report = _run_sync(duckdb, when)
        finished = time.perf_counter()
    print_report(report, limit)
    print_timing(
        report,
        Timing(started, command_started, finished, sandbox_seconds),
    )


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
    finally:
        _release_dlt_pipelines()
    if not state.is_completed():
        if _INTERRUPTED.is_set():
            raise KeyboardInterrupt
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
    - prefect start: from the command to the flow body holding the warehouse slot: the
      embedded sandbox's start (also shown on its own), importing Prefect and the pipelines,
      the temporary API server's boot, creating the flow run;
    - load, risk, publish: the flow's three steps, each a Prefect task;
    - prefect finish: closing the run (final states, flushing logs) until the call returns
      (stopping the temporary server at exit comes after, uncounted).
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
