"""`freetime serve`: serve prefect.yaml's deployments (hourly sync, nightly full sync) here.

Uses the Prefect server at ``PREFECT_API_URL`` when one is configured; otherwise starts a local
one (``prefect server start`` on 127.0.0.1, with its UI) for as long as this command runs, over
the same database in ``PREFECT_HOME`` that ``freetime run`` writes its runs to. Ctrl+C or
SIGTERM stops it within seconds (exit code 0) and leaves the deployments' schedules active
(``pause_on_shutdown=False``): runs scheduled while nothing serves them wait as Late and start
when ``freetime serve`` is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from freetime_cli._common import console, fail, quiet_logging

if TYPE_CHECKING:
    from prefect.deployments.runner import RunnerDeployment

    from flows.deployments import DeploymentSpec

LOCAL_HOST = "127.0.0.1"
SERVER_START_TIMEOUT_S = 120.0


def _healthy(api_url: str) -> bool:
    import httpx  # here: every command imports this module, few of them talk HTTP

    try:
        return httpx.get(f"{api_url.rstrip('/')}/health", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def local_prefect_server(port: int) -> Iterator[str]:
    """A Prefect server (API and UI) on 127.0.0.1:``port`` for the block; yields the API URL.

    A server already answering on that port is used as is (and left running).
    """
    api_url = f"http://{LOCAL_HOST}:{port}/api"
    if _healthy(api_url):
        yield api_url
        return
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    # Leases on concurrency slots (each deployment's limit) live in the
    # server's memory by default: a restart while a run holds one would leave the slot taken
    # for good. On disk, the restarted server's repossessor frees them when they expire.
    env.setdefault(
        "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE",
        "prefect.server.concurrency.lease_storage.filesystem",
    )
    env.pop("PREFECT_API_URL", None)
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "prefect",
                "server",
                "start",
                "--host",
                LOCAL_HOST,
                "--port",
                str(port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        try:
            deadline = time.monotonic() + SERVER_START_TIMEOUT_S
            while not _healthy(api_url):
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    tail = log.read()[-1500:].decode(errors="replace").strip().splitlines()
                    fail(
                        f"the local Prefect server did not start on port {port}"
                        + (f": {tail[-1]}" if tail else "")
                        + " (is the port taken? try --port)"
                    )
                time.sleep(0.25)
            yield api_url
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def serve(
    port: Annotated[
        int,
        typer.Option(
            help="Port of the local Prefect server started when PREFECT_API_URL is not set."
        ),
    ] = 4200,
    prefect_file: Annotated[
        Path | None,
        typer.Option(help="Deployment file (default: the project's prefect.yaml)."),
    ] = None,
) -> None:
    """Serve the scheduled deployments (hourly sync, nightly full sync) from this machine.

    Ctrl+C or SIGTERM stops serving; the schedules stay active (not paused).
    """
    # SIGTERM stops like Ctrl+C at every stage (before serving starts, too).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        _serve_here(port, prefect_file)
    except KeyboardInterrupt:
        console.print("stopped before serving started")
        raise typer.Exit(130) from None


def _serve_here(port: int, prefect_file: Path | None) -> None:
    quiet_logging()
    from flows.deployments import PREFECT_YAML, DeploymentConfigError, read_deployments

    path = prefect_file or PREFECT_YAML
    try:
        specs = read_deployments(path)
        deployments = [spec.to_runner_deployment() for spec in specs]
    except DeploymentConfigError as exc:
        fail(str(exc))

    with contextlib.ExitStack() as stack:
        configured = os.environ.get("PREFECT_API_URL") or _profile_api_url()
        if configured:
            if not _healthy(configured):
                fail(f"cannot reach the Prefect API at {configured} (PREFECT_API_URL)", code=1)
            api_url = configured
        else:
            console.print(f"starting a local Prefect server on {LOCAL_HOST}:{port}…")
            api_url = stack.enter_context(local_prefect_server(port))
        _describe(specs, api_url)
        from prefect.settings import PREFECT_API_URL, temporary_settings

        # The runner hands the current settings (this API URL included) to every flow run.
        with temporary_settings(updates={PREFECT_API_URL: api_url}):
            stopped_by = asyncio.run(serve_until_signalled(deployments))
    console.print(f"stopped serving ({stopped_by}); the schedules stay active", highlight=False)


async def serve_until_signalled(deployments: list[RunnerDeployment]) -> str:
    """Register ``deployments`` and run them on their schedules (Prefect's ``Runner``, as
    ``prefect.serve`` does, schedules left active on shutdown) until SIGINT or SIGTERM; returns
    the signal's name.

    Either signal cancels the runner, which then stops its loops and cancels the flow runs it
    started. (Prefect's own SIGTERM handler calls the runner's stop from inside its event loop,
    where that returns a coroutine nobody awaits, and exits without stopping anything.)
    """
    from prefect.runner import Runner

    runner = Runner(pause_on_shutdown=False)
    for deployment in deployments:
        await runner.aadd_deployment(deployment)
    serving = asyncio.ensure_future(runner.start())
    await asyncio.sleep(0)  # start() installs its SIGTERM handler first; ours replace it
    received: list[str] = []

    def stop(sig: signal.Signals) -> None:
        received.append(sig.name)
        serving.cancel()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop, sig)
    console.print(
        "Ctrl+C stops serving; the schedules stay active (pause_on_shutdown=False): runs due "
        "while nothing serves them wait as Late and start when you serve again. Pause them in "
        "the UI or with `prefect deployment schedule pause` to stop them for good.",
        highlight=False,
        soft_wrap=True,
    )
    with contextlib.suppress(asyncio.CancelledError):
        await serving
    return received[0] if received else "the runner stopped"


def _profile_api_url() -> str | None:
    """PREFECT_API_URL from the active Prefect profile (``prefect config set ...``)."""
    from prefect.settings import PREFECT_API_URL

    value = PREFECT_API_URL.value()
    return str(value) if value else None


def _describe(specs: list[DeploymentSpec], api_url: str) -> None:
    """What is served, when, and where its UI is; a warning when no API key is configured."""
    from pipelines.config import ApiSettings, ConfigError

    ui_url = api_url.rstrip("/").removesuffix("/api")
    for spec in specs:
        when = (
            ", ".join(
                (s.cron and f"cron {s.cron!r}")
                or (s.rrule and f"rrule {s.rrule!r}")
                or f"every {s.interval_seconds:.0f}s"
                for s in spec.schedules
            )
            or "no schedule"
        )
        tz = {s.timezone for s in spec.schedules if s.timezone}
        params = ", ".join(f"{k}={v!r}" for k, v in spec.parameters.items())
        console.print(
            f"serving {spec.name} ({spec.entrypoint}"
            + (f" with {params}" if params else "")
            + f"): {when}"
            + (f" {', '.join(sorted(tz))}" if tz else "")
            + f", concurrency limit {spec.concurrency_limit}",
            highlight=False,
            soft_wrap=True,
        )
    console.print(f"Prefect UI: {ui_url}  (API {api_url})", highlight=False)
    try:
        if not ApiSettings.resolve().api_key:
            console.print(
                "[yellow]warning:[/] no TERMINAL49_API_KEY (or .dlt/secrets.toml) here: the "
                "scheduled loads will fail until it is set",
                soft_wrap=True,
            )
    except ConfigError as exc:
        console.print(f"[yellow]warning:[/] {escape(str(exc))}", soft_wrap=True)
