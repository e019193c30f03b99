"""Run the sandbox as a subprocess for tests, benchmarks and ``freetime`` without an API key.

Usage::

    with SandboxProcess(containers=500, seed=49, clock="2026-11-20T12:00:00Z") as sb:
        httpx.get(f"{sb.base_url}/containers", headers={"Authorization": f"Token {sb.api_key}"})
        sb.advance(hours=24)

The process is ``python -m sandbox serve --port 0 ...``; the handle parses the two lines it
prints (``base_url: ...`` and ``api_key: ...``), waits until ``/admin/clock`` answers, and
terminates the process on exit (kill after a grace period).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]


class SandboxStartError(RuntimeError):
    """The sandbox process did not come up; the message carries its stderr."""


class SandboxProcess:
    """Context manager around a sandbox server subprocess.

    Attributes once entered: ``base_url`` (``http://127.0.0.1:PORT/v2``), ``api_key``,
    ``admin_url`` (``http://127.0.0.1:PORT/admin``), ``process``.
    """

    def __init__(self, containers: int = 500, seed: int = 49, rate_limit: int = 0,
                 faults: str | None = None, clock: str | None = None,
                 api_key: str = "sandbox-key", host: str = "127.0.0.1",
                 startup_timeout: float = 120.0, extra_args: list[str] | None = None) -> None:
        self.options = dict(containers=containers, seed=seed, rate_limit=rate_limit,
                            faults=faults, clock=clock, api_key=api_key, host=host)
        self.startup_timeout = startup_timeout
        self.extra_args = list(extra_args or [])
        self.base_url = ""
        self.api_key = api_key
        self.admin_url = ""
        self.process: subprocess.Popen[bytes] | None = None
        self._stderr: Any = None
        self._client: httpx.Client | None = None

    # ---- lifecycle ----------------------------------------------------------------------
    def command(self) -> list[str]:
        """The command line that starts the server."""
        o = self.options
        cmd = [sys.executable, "-m", "sandbox", "serve", "--host", str(o["host"]), "--port", "0",
               "--containers", str(o["containers"]), "--seed", str(o["seed"]),
               "--api-key", str(o["api_key"]), "--rate-limit", str(o["rate_limit"])]
        if o["faults"]:
            cmd += ["--faults", str(o["faults"])]
        if o["clock"]:
            cmd += ["--clock", str(o["clock"])]
        return cmd + self.extra_args

    def start(self) -> SandboxProcess:
        """Start the process and wait until it answers."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(self.command(), stdout=subprocess.PIPE,
                                        stderr=self._stderr, cwd=REPO_ROOT, env=env)
        lines: dict[str, str] = {}
        stdout = self.process.stdout
        assert stdout is not None

        def read() -> None:
            while len(lines) < 2:
                raw = stdout.readline()
                if not raw:
                    return
                key, _, value = raw.decode().strip().partition(": ")
                if key in ("base_url", "api_key"):
                    lines[key] = value

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(self.startup_timeout)
        if len(lines) < 2:
            self._fail("did not print base_url/api_key")
        self.base_url = lines["base_url"]
        self.api_key = lines["api_key"]
        self.admin_url = self.base_url.rsplit("/v2", 1)[0] + "/admin"
        self._client = httpx.Client(headers={"Authorization": f"Token {self.api_key}"},
                                    timeout=600.0)
        deadline = time.monotonic() + self.startup_timeout
        while True:
            try:
                if self._client.get(f"{self.admin_url}/clock").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self._fail("did not answer")
            time.sleep(0.02)
        return self

    def _fail(self, why: str) -> None:
        err = b""
        if self._stderr is not None:
            self._stderr.seek(0)
            err = self._stderr.read()[-4000:]
        self.stop()
        raise SandboxStartError(f"sandbox {why}: {err.decode(errors='replace')}")

    def stop(self) -> None:
        """Terminate the process (kill after 5 s) and release resources."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> SandboxProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # ---- admin calls ---------------------------------------------------------------------
    @property
    def client(self) -> httpx.Client:
        """An httpx client sending the API key (for admin and /v2 calls alike)."""
        if self._client is None:
            raise RuntimeError("sandbox not started")
        return self._client

    def _admin(self, method: str, path: str, **params: Any) -> dict[str, Any]:
        resp = self.client.request(method, f"{self.admin_url}/{path}", params=params or None)
        resp.raise_for_status()
        out: dict[str, Any] = resp.json()
        return out

    def clock(self) -> str:
        """Current sandbox clock (ISO 8601, UTC)."""
        return str(self._admin("GET", "clock")["clock"])

    def ground_truth(self) -> dict[str, Any]:
        """The full account as the API would serve it now."""
        return self._admin("GET", "ground_truth")

    def advance(self, hours: float = 0, minutes: float = 0) -> dict[str, Any]:
        """Advance the sandbox clock; returns clock, changed_containers, new_containers."""
        return self._admin("POST", "advance", hours=hours, minutes=minutes)

    def refresh(self, count: int = 1) -> dict[str, Any]:
        """Mark ``count`` seeded-random containers as refreshed now (moves them to the front)."""
        return self._admin("POST", "refresh", count=count)

    def stats(self) -> dict[str, Any]:
        """Request statistics of /v2 since start or the last reset."""
        return self._admin("GET", "stats")

    def reset_stats(self) -> dict[str, Any]:
        """Zero the request statistics."""
        return self._admin("POST", "stats/reset")
