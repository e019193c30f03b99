"""`freetime serve`: serve prefect.yaml's deployments (hourly sync, nightly reconcile) from here.

Uses the Prefect server at ``PREFECT_API_URL`` when one is configured; otherwise starts a local
one (``prefect server start`` on 127.0.0.1, with its UI) for as long as this command runs, over
the same database in ``PREFECT_HOME`` that ``freetime run`` writes its runs to. Stopping (Ctrl+C
or SIGTERM) leaves the deployments' schedules active (``pause_on_shutdown=False``): runs
scheduled while nothing serves them wait as Late and start when ``freetime serve`` is back.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.markup import escape

from freetime_cli._common import console, fail, quiet_logging

LOCAL_HOST = "127.0.0.1"
SERVER_START_TIMEOUT_S = 120.0


def _healthy(api_url: str) -> bool:
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
    # Leases on concurrency slots (the warehouse limit, each deployment's limit) live in the
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
    """Serve the scheduled deployments (hourly sync, nightly reconcile) from this machine.

    Stopping leaves their schedules active (not paused).
    """
    quiet_logging()
    from flows.deployments import PREFECT_YAML, DeploymentConfigError, read_deployments

    path = prefect_file or PREFECT_YAML
    try:
        specs = read_deployments(path)
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
        _serve(specs, api_url)


def _profile_api_url() -> str | None:
    """PREFECT_API_URL from the active Prefect profile (``prefect config set ...``)."""
    from prefect.settings import PREFECT_API_URL

    value = PREFECT_API_URL.value()
    return str(value) if value else None


def _serve(specs: list[Any], api_url: str) -> None:
    from prefect import serve as prefect_serve
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from pipelines.config import ApiSettings, ConfigError

    deployments = [spec.to_runner_deployment() for spec in specs]
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
        console.print(
            f"serving {spec.name} ({spec.entrypoint}): {when}"
            + (f" {', '.join(sorted(tz))}" if tz else "")
            + f", concurrency limit {spec.concurrency_limit}",
            highlight=False,
        )
    console.print(f"Prefect UI: {ui_url}  (API {api_url})", highlight=False)
    console.print(
        "Ctrl+C stops serving; the schedules stay active (pause_on_shutdown=False): runs due "
        "while nothing serves them wait as Late and start when you serve again. Pause them in "
        "the UI or with `prefect deployment schedule pause` to stop them for good.",
        highlight=False,
        soft_wrap=True,
    )
    try:
        if not ApiSettings.resolve().api_key:
            console.print(
                "[yellow]warning:[/] no TERMINAL49_API_KEY (or .dlt/secrets.toml) here: the "
                "scheduled loads will fail until it is set",
                soft_wrap=True,
            )
    except ConfigError as exc:
        console.print(f"[yellow]warning:[/] {escape(str(exc))}", soft_wrap=True)
    # The runner hands the current settings (this API URL included) to every flow run it starts.
    with temporary_settings(updates={PREFECT_API_URL: api_url}):
        prefect_serve(*deployments, pause_on_shutdown=False, print_starting_message=False)
