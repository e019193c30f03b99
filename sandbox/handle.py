"""What a running sandbox offers its caller, however it runs: the admin, webhook and document
calls over HTTP, and the options it is started with.

:class:`SandboxHandle` is the base of :class:`sandbox.process.SandboxProcess` (a child process)
and :class:`sandbox.thread.SandboxThread` (a thread of the caller): both take the same options,
serve the same ``sandbox serve`` over real HTTP and answer the same calls; they differ only in
how they start and stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

import httpx


class SandboxStartError(RuntimeError):
    """The sandbox did not come up; the message says why (a process's stderr, a thread's error)."""


class SandboxHandle:
    """A sandbox server to start (``with`` or :meth:`start`), call and stop.

    Options are ``sandbox serve``'s (see ``serve --help``): ``extra_args`` are more of its
    command-line arguments. Attributes once started: ``base_url``
    (``http://127.0.0.1:PORT/v2``), ``api_key``, ``admin_url`` (``http://127.0.0.1:PORT/admin``).
    """

    def __init__(
        self,
        containers: int = 500,
        seed: int = 49,
        rate_limit: int = 0,
        faults: str | None = None,
        clock: str | None = None,
        api_key: str = "sandbox-key",
        host: str = "127.0.0.1",
        startup_timeout: float = 120.0,
        extra_args: list[str] | None = None,
        webhook_backoff: float | None = None,
        webhook_timeout: float | None = None,
        document_delay: float | None = None,
        emails_per_day: float | None = None,
        active_share: float | None = None,
        rate_window: float | None = None,
    ) -> None:
        self.options = dict(
            containers=containers,
            seed=seed,
            rate_limit=rate_limit,
            faults=faults,
            clock=clock,
            api_key=api_key,
            host=host,
        )
        self.event_options = {
            "--webhook-backoff-seconds": webhook_backoff,
            "--webhook-timeout-seconds": webhook_timeout,
            "--document-delay-seconds": document_delay,
            "--emails-per-day": emails_per_day,
            "--active-share": active_share,
            "--rate-window-seconds": rate_window,
        }
        self.startup_timeout = startup_timeout
        self.extra_args = list(extra_args or [])
        self.base_url = ""
        self.api_key = api_key
        self.admin_url = ""
        self._client: httpx.Client | None = None

    # ---- lifecycle ----------------------------------------------------------------------
    def serve_args(self) -> list[str]:
        """The arguments of ``sandbox serve`` for these options (on port 0: any free port)."""
        o = self.options
        args = [
            "--host",
            str(o["host"]),
            "--port",
            "0",
            "--containers",
            str(o["containers"]),
            "--seed",
            str(o["seed"]),
            "--api-key",
            str(o["api_key"]),
            "--rate-limit",
            str(o["rate_limit"]),
        ]
        if o["faults"]:
            args += ["--faults", str(o["faults"])]
        if o["clock"]:
            args += ["--clock", str(o["clock"])]
        for flag, value in self.event_options.items():
            if value is not None:
                args += [flag, str(value)]
        return args + self.extra_args

    def start(self) -> Self:
        """Start the server and wait until it answers (:class:`SandboxStartError` if not)."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the server and release what it holds; safe to call twice."""
        raise NotImplementedError

    def _fail(self, why: str) -> None:
        """Stop and raise :class:`SandboxStartError` saying ``why`` and what the server left."""
        raise NotImplementedError

    def _connect(self, base_url: str, api_key: str, alive: Callable[[], bool]) -> None:
        """Take the server's address and key, open the client and wait until ``/admin/clock``
        answers (``_fail`` if ``alive()`` turns false or the startup timeout passes)."""
        self.base_url = base_url
        self.api_key = api_key
        self.admin_url = base_url.rsplit("/v2", 1)[0] + "/admin"
        self._client = httpx.Client(
            headers={"Authorization": f"Token {self.api_key}"}, timeout=600.0
        )
        deadline = time.monotonic() + self.startup_timeout
        while True:
            try:
                if self._client.get(f"{self.admin_url}/clock").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if not alive() or time.monotonic() > deadline:
                self._fail("did not answer")
            time.sleep(0.02)

    def _close_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
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

    def advance(self, hours: float = 0, minutes: float = 0, spread: float = 0) -> dict[str, Any]:
        """Advance the sandbox clock; returns clock, changed_containers, new_containers and
        notifications (queued for delivery, spaced over ``spread`` wall seconds)."""
        return self._admin("POST", "advance", hours=hours, minutes=minutes, spread=spread)

    def refresh(self, count: int = 1) -> dict[str, Any]:
        """Mark ``count`` seeded-random containers as refreshed now (moves them to the front)."""
        return self._admin("POST", "refresh", count=count)

    def delete_container(self, container_id: str) -> dict[str, Any]:
        """Delete a container upstream (``POST /admin/delete``): it leaves every list."""
        return self._admin("POST", "delete", container=container_id)

    def timestamps(self) -> dict[str, Any]:
        """Internal timestamps the payloads do not carry: ``containers`` (id ->
        ``updated_at``) and ``shipments`` (id -> ``updated_at``, ``pod_eta_changed_at``)."""
        return self._admin("GET", "ground_truth/timestamps")

    def stats(self) -> dict[str, Any]:
        """Request statistics of /v2 since start or the last reset."""
        return self._admin("GET", "stats")

    def reset_stats(self) -> dict[str, Any]:
        """Zero the request statistics."""
        return self._admin("POST", "stats/reset")

    # ---- webhooks ------------------------------------------------------------------------
    def register_webhook(
        self,
        url: str,
        events: list[str] | None = None,
        active: bool = True,
        headers: list[dict[str, str]] | None = None,
    ) -> dict[str, Any]:
        """``POST /v2/webhooks``; returns the ``webhook`` resource (``attributes.secret``)."""
        attrs: dict[str, Any] = {"url": url, "active": active}
        if events is not None:
            attrs["events"] = events
        if headers is not None:
            attrs["headers"] = headers
        resp = self.client.post(
            f"{self.base_url}/webhooks", json={"data": {"type": "webhook", "attributes": attrs}}
        )
        resp.raise_for_status()
        out: dict[str, Any] = resp.json()["data"]
        return out

    def delete_webhook(self, webhook_id: str) -> None:
        """``DELETE /v2/webhooks/{id}``."""
        self.client.delete(f"{self.base_url}/webhooks/{webhook_id}").raise_for_status()

    def deliveries(self, event: str | None = None) -> list[dict[str, Any]]:
        """Every notification created so far (creation order), each the
        ``webhook_notification`` resource with current ``delivery_status``, ``meta`` (attempts,
        last_status_code, last_error, last_attempt_at, next_attempt_at), ``webhook_id`` and
        ``body`` (the exact delivered body text)."""
        params = {"event": event} if event else {}
        out: list[dict[str, Any]] = self._admin("GET", "ground_truth/notifications", **params)[
            "notifications"
        ]
        return out

    def deliver_pending(self, timeout: float = 30.0, due_only: bool = False) -> dict[str, Any]:
        """Wait until every notification is delivered or failed (``due_only``: until no attempt
        is due now); returns ``settled`` plus counts by status."""
        return self._admin(
            "POST", "webhooks/flush", timeout=timeout, due_only=str(due_only).lower()
        )

    def blast(
        self,
        count: int = 100,
        duplicates: float = 0.0,
        bad_signature: float = 0.0,
        malformed: float = 0.0,
        seed: int = 0,
        webhook_id: str | None = None,
        concurrency: int = 20,
    ) -> dict[str, Any]:
        """``POST /admin/webhooks/blast``: deliver ``count`` valid notifications plus injected
        faults to one webhook; returns the report (``valid_ids``, ``duplicate_ids``,
        ``bad_signature_ids``, ``malformed_ids``, ``results``, ...)."""
        params: dict[str, Any] = dict(
            count=count,
            duplicates=duplicates,
            bad_signature=bad_signature,
            malformed=malformed,
            seed=seed,
            concurrency=concurrency,
        )
        if webhook_id:
            params["webhook_id"] = webhook_id
        return self._admin("POST", "webhooks/blast", **params)

    # ---- documents -----------------------------------------------------------------------
    def process_documents(self, ids: list[str] | None = None) -> dict[str, Any]:
        """Finish classification/extraction of pending documents now (emits their events)."""
        params: list[tuple[str, str | int | float | bool | None]] = [("id", i) for i in ids or []]
        resp = self.client.post(f"{self.admin_url}/documents/process", params=params or None)
        resp.raise_for_status()
        out: dict[str, Any] = resp.json()
        return out

    def documents_truth(self) -> dict[str, Any]:
        """Ground truth of documents, email submissions and representations."""
        return self._admin("GET", "ground_truth/documents")

    def upload_document(
        self,
        data: bytes,
        filename: str = "invoice.pdf",
        content_type: str = "application/pdf",
        name: str | None = None,
    ) -> httpx.Response:
        """The whole direct-upload flow (blob, PUT, ``POST /documents``); returns the last
        response (201, or 409 for duplicate content)."""
        import base64
        import hashlib

        checksum = base64.b64encode(hashlib.md5(data).digest()).decode()  # noqa: S324
        resp = self.client.post(
            f"{self.base_url}/rails/active_storage/direct_uploads",
            json={
                "blob": {
                    "filename": filename,
                    "content_type": content_type,
                    "byte_size": len(data),
                    "checksum": checksum,
                }
            },
        )
        resp.raise_for_status()
        blob = resp.json()
        up = blob["direct_upload"]
        put = httpx.put(up["url"], content=data, headers=up["headers"], timeout=60)
        put.raise_for_status()
        return self.client.post(
            f"{self.base_url}/documents",
            json={
                "data": {
                    "type": "document",
                    "attributes": {
                        "name": name or filename,
                        "attached_document": blob["signed_id"],
                    },
                }
            },
        )
