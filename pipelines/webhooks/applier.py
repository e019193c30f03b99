"""The receiver's applier: what the receiver stores reaches the warehouse within seconds.

Contract of :class:`Applier` (a thread of ``freetime webhooks serve`` when it knows the
warehouse):
- it wakes as soon as the receiver commits a new notification (and every ``idle_seconds``
  anyway, for what another process stored or a failed batch left) and applies the inbox in
  small batches (:func:`pipelines.webhooks.apply.apply_inbox`, ``batch_size`` notifications,
  one at a time), each published under the writer lock like any writer's: it waits its turn
  behind a load's publish and never blocks one for longer than a batch;
- after a batch that changed containers, shipments, holds or fees, the risk of the containers
  it touched is recomputed and published (:func:`pipelines.analytics.publish_risk_of`: one
  transaction, those containers' rows only, or a full run when the batch touched a large share
  of the account or the oldest row is more than a quarter of an hour old), under the writer
  lock too;
- the warehouse is a DuckDB file or a PostgreSQL database (:class:`~pipelines.config.Warehouse`):
  on PostgreSQL each batch and each risk run is one transaction under the writers' advisory
  lock (:mod:`pipelines.pg.lock`), and its alerts are delivered as on DuckDB;
- storing and acknowledging never wait for it: it runs beside the receiver's event loop, and
  a failure (a warehouse locked by a notebook, an API down) is reported in one line and
  retried later; nothing stored is lost (the inbox keeps it until applied);
- the alerts a risk run raised are delivered at once (:func:`pipelines.alerts.send_pending`)
  by a sender thread of their own, so a slow or broken channel never delays the next batch;
  a delivery that fails stays pending for the next pass (or the flows' send step);
- ``report`` gets one line per applied batch; :meth:`Applier.state` is what ``/healthz``
  shows.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pipelines.config import Warehouse, resolve_warehouse
from pipelines.publish.lock import writer_lock
from pipelines.terminal49.client import Terminal49Client
from pipelines.warehouse import WarehouseMissing
from pipelines.webhooks.apply import ApplySummary, apply_inbox

log = logging.getLogger("freetime.webhooks")

#: Notifications applied in one batch: a batch publishes in about a second.
BATCH = 500
#: Tables whose rows feed the risk: a batch that wrote any republishes it.
RISK_TABLES = ("containers", "container_holds", "container_fees", "shipments")
#: No new alert message is started after this many seconds of a pass; the rest goes next pass.
SEND_BUDGET_SECONDS = 60.0


@dataclass
class ApplierState:
    """What the applier did so far (``/healthz``)."""

    batches: int = 0
    notifications: int = 0
    risk_runs: int = 0
    #: risk runs over the batch's containers only (the others were full runs)
    partial_risk_runs: int = 0
    alerts_sent: int = 0
    last_applied_at: str | None = None
    last_error: str | None = None


class Applier:
    """Applies an inbox to a warehouse in a background thread; see the module docstring."""

    def __init__(
        self,
        duckdb_path: Path | Warehouse,
        inbox_path: Path,
        *,
        client: Callable[[], Terminal49Client | None] = lambda: None,
        batch_size: int = BATCH,
        idle_seconds: float = 5.0,
        gather_seconds: float = 0.2,
        retry_seconds: float = 5.0,
        risk: bool = True,
        alerts: bool = True,
        report: Callable[[str], None] = lambda line: log.info("%s", line),
    ) -> None:
        self.warehouse = resolve_warehouse(duckdb_path)
        #: the DuckDB file, or the PostgreSQL warehouse's local working folder
        self.duckdb_path = self.warehouse.path or self.warehouse.working_folder()
        self.inbox_path = inbox_path
        self._client_factory = client
        self.batch_size = batch_size
        self.idle_seconds = idle_seconds
        self.gather_seconds = gather_seconds
        self.retry_seconds = retry_seconds
        self.risk = risk
        self.alerts = alerts and risk
        self.report = report
        self._state = ApplierState()
        self._wake = threading.Event()
        self._send_wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sender: threading.Thread | None = None

    def wake(self) -> None:
        """Something new is in the inbox (called from the receiver's inbox writer)."""
        self._wake.set()

    def state(self) -> dict[str, Any]:
        return asdict(self._state)

    def start(self) -> Applier:
        self._thread = threading.Thread(target=self._run, name="inbox-applier", daemon=True)
        self._thread.start()
        if self.alerts:
            self._sender = threading.Thread(target=self._send, name="alert-sender", daemon=True)
            self._sender.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the batch under way (a daemon thread: a batch that waits for the writer
        lock does not hold the process up past ``timeout``)."""
        self._stop.set()
        self._wake.set()
        self._send_wake.set()
        for thread in (self._thread, self._sender):
            if thread is not None:
                thread.join(timeout)
        self._thread = self._sender = None

    def _run(self) -> None:
        client = None
        try:
            client = self._client_factory()
            self._warm_up()
            while not self._stop.is_set():
                more = self._apply_once(client)
                if more:
                    continue
                self._wake.wait(self.idle_seconds)
                self._wake.clear()
                # deliveries come in bursts: gather a moment's worth into one batch
                self._stop.wait(self.gather_seconds)
        finally:
            if client is not None:
                client.close()

    def _warm_up(self) -> None:
        """Import what a batch needs (dlt's destination, polars) before the first delivery:
        seconds the first notification would otherwise wait."""
        try:
            if self.warehouse.is_postgres:
                from pipelines.pg.write import make_pipeline as make_pg_pipeline

                make_pg_pipeline(self.warehouse, "webhooks").destination.client_class  # noqa: B018
            else:
                from pipelines.publish.staging import make_pipeline, staging_slot

                with staging_slot(self.duckdb_path, "webhooks") as slot:
                    make_pipeline(self.duckdb_path, slot).destination.client_class  # noqa: B018
            if self.risk:
                import pipelines.analytics  # noqa: F401
        except Exception as exc:  # the first batch will say what is wrong
            log.debug("warm-up failed: %s", exc)

    def _apply_once(self, client: Terminal49Client | None) -> bool:
        """Apply one batch; True when more is pending and should be applied at once."""
        started = time.monotonic()
        try:
            summary = apply_inbox(
                self.warehouse,
                self.inbox_path,
                client,
                batch_size=self.batch_size,
                max_batches=1,
            )
            risk_started = time.monotonic()
            risk, recomputed = self._publish_risk(summary)
            risk_s = time.monotonic() - risk_started
        except Exception as exc:  # a locked file, an API down, bad tariffs: retried, never fatal
            self._state.last_error = f"{type(exc).__name__}: {exc}"
            self.report(f"apply failed, retrying in {self.retry_seconds:.0f}s: {exc}")
            self._stop.wait(self.retry_seconds)
            return False
        if not summary.notifications and not summary.malformed:
            return False
        state = self._state
        state.batches += 1
        state.notifications += summary.notifications
        state.risk_runs += risk
        state.partial_risk_runs += recomputed is not None
        if risk:
            self._send_wake.set()
        state.last_applied_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        state.last_error = None
        changed = summary.rows.get("containers", 0)
        how = (
            "unchanged"
            if not risk
            else "republished in full"
            if recomputed is None
            else f"republished for {recomputed} containers"
        )
        self.report(
            f"applied {summary.notifications} notifications: {changed} containers changed, "
            f"risk {how}, {time.monotonic() - started:.1f}s "
            f"(apply {summary.seconds:.1f}s, risk {risk_s:.1f}s); {summary.pending} pending"
        )
        return summary.pending > 0

    def _publish_risk(self, summary: ApplySummary) -> tuple[bool, int | None]:
        """(risk republished, containers recomputed: None after a full run)."""
        if not self.risk or not any(summary.rows.get(t) for t in RISK_TABLES):
            return False, None
        from pipelines.analytics import publish_risk_of  # polars: only once there is risk to do

        with self._writer_lock("risk after webhooks"):
            try:
                run = publish_risk_of(
                    self.warehouse.path or self.warehouse.dsn,
                    summary.container_ids,
                    summary.shipment_ids,
                    what="risk after webhooks",
                )
            except WarehouseMissing:  # webhooks before any load: no containers table yet
                return False, None
        return True, run.recomputed

    def _writer_lock(self, what: str) -> contextlib.AbstractContextManager[None]:
        """The warehouse's writer lock: the file lock, or PostgreSQL's advisory lock."""
        # --- WAREHOUSE DISPATCH (issue 30): PostgreSQL's writers take an advisory lock ---
        if self.warehouse.is_postgres:
            from pipelines.pg.lock import writer_lock as pg_writer_lock

            return pg_writer_lock(self.warehouse, what)
        # --- end of the warehouse dispatch ---
        return writer_lock(self.duckdb_path, what)

    def _send(self) -> None:
        """Deliver pending alerts each time a risk run may have raised some."""
        while True:
            self._send_wake.wait()
            self._send_wake.clear()
            if self._stop.is_set():
                return
            # Apprise, once there is something to send: its import never competes with the
            # receiver's first acknowledgements
            from pipelines.alerts import send_pending

            try:
                summary = send_pending(self.warehouse, budget_seconds=SEND_BUDGET_SECONDS)
            except Exception as exc:  # a broken alerts.toml, a locked file: said, retried later
                self.report(f"alerts not sent: {exc}")
                continue
            for result in summary.results:
                self._state.alerts_sent += result.sent
                if result.error or result.sent:
                    self.report(f"alerts: {result.line()}")
