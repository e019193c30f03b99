"""The sandbox server as a child process, for ``freetime`` without an API key, tests and benchmarks.

Usage::

    with SandboxProcess(containers=500, seed=49, clock="2026-11-20T12:00:00Z") as sb:
        httpx.get(f"{sb.base_url}/containers", headers={"Authorization": f"Token {sb.api_key}"})
        sb.advance(hours=24)

The process is ``python -m sandbox serve --port 0 ...``; the handle parses the two lines it
prints (``base_url: ...`` and ``api_key: ...``), waits until ``/admin/clock`` answers, and
terminates the process on exit (kill after a grace period). The calls are
:class:`sandbox.handle.SandboxHandle`'s; :class:`sandbox.thread.SandboxThread` serves the same
on a thread of the caller instead.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Self

from sandbox.handle import SandboxHandle, SandboxStartError

__all__ = ["REPO_ROOT", "SandboxProcess", "SandboxStartError"]

REPO_ROOT = Path(__file__).resolve().parents[1]


def _die_with_parent() -> None:
    """In the child before exec: ask Linux for SIGTERM when the parent dies (else a no-op)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class SandboxProcess(SandboxHandle):
    """Context manager around a sandbox server subprocess.

    Attributes once entered: ``base_url`` (``http://127.0.0.1:PORT/v2``), ``api_key``,
    ``admin_url`` (``http://127.0.0.1:PORT/admin``), ``process``.
    """

    process: subprocess.Popen[bytes] | None = None
    _stderr: Any = None

    # ---- lifecycle ----------------------------------------------------------------------
    def command(self) -> list[str]:
        """The command line that starts the server."""
        return [sys.executable, "-m", "sandbox", "serve", *self.serve_args()]

    def start(self) -> Self:
        """Start the process and wait until it answers."""
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        # Its own session (a Ctrl+C meant for the parent does not cut it mid-answer) and, on
        # Linux, SIGTERM when the parent dies, so a killed test or CLI leaves no server behind.
        self.process = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=REPO_ROOT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
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
        process = self.process
        self._connect(lines["base_url"], lines["api_key"], lambda: process.poll() is None)
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
        self._close_client()
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
