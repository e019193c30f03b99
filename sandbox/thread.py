"""The sandbox server on a thread of this process, for tests that need the sandbox but do not
test its process.

Usage, as with :class:`sandbox.process.SandboxProcess`::

    with SandboxThread(containers=500, seed=49, clock="2026-11-20T12:00:00Z") as sb:
        httpx.get(f"{sb.base_url}/containers", headers={"Authorization": f"Token {sb.api_key}"})
        sb.advance(hours=24)

It serves what ``sandbox serve`` serves, built by the same code from the same options
(:mod:`sandbox.serving`: the account, the state, the app, the socket and the uvicorn
configuration), on a real loopback socket, by uvicorn running its own event loop on a daemon
thread. What differs from the process: no interpreter to start, the caller's GIL is shared
(a test that loads this process heavily slows the server down, and the other way round),
uvicorn leaves the process's logging configuration alone, the cyclic GC is not frozen, and
there is no process to kill or to outlive.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Self

from sandbox.handle import SandboxHandle, SandboxStartError

if TYPE_CHECKING:
    import uvicorn

__all__ = ["SandboxStartError", "SandboxThread"]

#: Seconds :meth:`SandboxThread.stop` waits for the server to finish its answers in flight
#: before it cuts them (as ``SandboxProcess`` waits before the kill).
STOP_GRACE = 5.0


class SandboxThread(SandboxHandle):
    """Context manager around a sandbox server on a daemon thread.

    Attributes once entered: ``base_url`` (``http://127.0.0.1:PORT/v2``), ``api_key``,
    ``admin_url`` (``http://127.0.0.1:PORT/admin``), ``thread``.
    """

    thread: threading.Thread | None = None
    _server: uvicorn.Server | None = None
    _error: BaseException | None = None

    def start(self) -> Self:
        """Build the sandbox here, serve it on a new thread and wait until it answers. A bad
        option raises :class:`SandboxStartError` with ``serve``'s message."""
        import uvicorn

        from sandbox.cli import parse_args
        from sandbox.serving import InvalidOption, prepare

        try:
            options = parse_args(self.serve_args())
            prepared = prepare(options, own_logging=False)
        except InvalidOption as e:
            raise SandboxStartError(f"sandbox did not start: {e}") from None
        server = uvicorn.Server(prepared.config)
        self._server = server
        self._error = None

        def serve() -> None:
            try:
                server.run(sockets=[prepared.sock])
            except BaseException as e:  # noqa: BLE001 - SystemExit too (a failed lifespan)
                self._error = e
            finally:
                prepared.sock.close()  # uvicorn closes it on a clean shutdown only

        self.thread = threading.Thread(
            target=serve, name=f"sandbox {prepared.base_url}", daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + self.startup_timeout
        while not server.started:
            if not self.thread.is_alive():
                self._fail("stopped before it served")
            if time.monotonic() > deadline:
                self._fail("did not start serving")
            time.sleep(0.005)
        self._connect(prepared.base_url, options.api_key, self.thread.is_alive)
        return self

    def _fail(self, why: str) -> None:
        error = self._error
        self.stop()
        raise SandboxStartError(f"sandbox {why}: {error!r}") from error

    def stop(self) -> None:
        """Ask uvicorn to exit, wait for the thread (cutting answers still in flight after
        :data:`STOP_GRACE` seconds) and close the socket; safe to call twice."""
        self._close_client()
        server = self._server
        if server is not None:
            server.should_exit = True
            if self.thread is not None:
                self.thread.join(STOP_GRACE)
                if self.thread.is_alive():
                    server.force_exit = True
                    self.thread.join(STOP_GRACE)
        self._server = None
