"""What the running sandbox server shares: the account, its renderer, the key, limits, counters,
the webhook hub and the document store.

One :class:`SandboxState` per server; ``create_app`` stores it on the Starlette app
(``app.state.sandbox``) where every endpoint reads it.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from sandbox.document_store import DocumentStore
from sandbox.faults import RATE_WINDOW, FaultInjector, FaultSpec
from sandbox.model import Account
from sandbox.render import Renderer
from sandbox.webhook_events import Builder
from sandbox.webhook_hub import WebhookHub


@dataclass
class SandboxState:
    """Everything the running server shares: account, renderer, key, limits, counters."""

    account: Account
    api_key: str
    rate_limit: int = 0  # requests per rolling window per key; 0 = off
    rate_window: float = RATE_WINDOW  # seconds of the rolling window
    faults: FaultSpec = field(default_factory=FaultSpec)
    advance_every: float = 0.0  # wall seconds between automatic advances; 0 = off
    advance_step: int = 3600  # sandbox seconds per automatic advance
    webhook_backoff: float = 60.0  # seconds before the first retry (doubles, capped x64)
    webhook_max_retries: int = 12
    webhook_timeout: float = 10.0
    webhook_concurrency: int = 20
    document_delay: float = 30.0  # wall seconds until a submitted document is processed; 0=off
    email_documents: int = -1  # seeded past emails at start; -1 = 3 + containers // 100 (<= 12)
    emails_per_day: float = -1.0  # new emails per sandbox day on advance; -1 = containers / 500
    renderer: Renderer = field(init=False)
    injector: FaultInjector = field(init=False)
    hub: WebhookHub = field(init=False)
    builder: Builder = field(init=False)
    docs: DocumentStore = field(init=False)
    requests: int = 0
    fault_counter: int = 0
    by_status: Counter[str] = field(default_factory=Counter)
    fault_counts: Counter[str] = field(default_factory=Counter)
    windows: dict[str, deque[float]] = field(default_factory=dict)
    # Filtered list orders, keyed by (resource, filter items, clock, account version).
    filtered: dict[tuple[Any, ...], list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.renderer = Renderer(self.account)
        self.injector = FaultInjector(self.faults, self.account.seed)
        self.hub = WebhookHub(
            self.account.seed,
            backoff=self.webhook_backoff,
            max_retries=self.webhook_max_retries,
            timeout=self.webhook_timeout,
            concurrency=self.webhook_concurrency,
        )
        self.builder = Builder(self.account, self.renderer)
        self.docs = DocumentStore(self.account, self.renderer)
        n = len(self.account.container_ids)
        seeded = self.email_documents if self.email_documents >= 0 else min(12, 3 + n // 100)
        if n:
            self.docs.seed_emails(seeded)
        if self.emails_per_day < 0:
            self.emails_per_day = n / 500.0

    def advance(self, seconds: int, spread: float = 0.0) -> tuple[int, int]:
        """Advance the account and emit what a real account would: container and shipment
        notifications for subscribed events, new emails, and processing of every pending
        document (``document.extracted`` / ``document.extraction_failed``).

        ``spread`` (wall seconds): the container and shipment notifications' first deliveries
        are spaced evenly over that long instead of all at once, as a steady stream of changes
        reaches a live account's endpoint."""
        acct = self.account
        changed, new = acct.advance(seconds)
        if seconds <= 0:
            return changed, new
        old = acct.last_old_clock
        wanted = self.hub.wanted()
        if wanted:
            occs = self.builder.changes(old, acct.last_changed, acct.last_new, wanted)
            for k, occ in enumerate(occs):
                self.hub.emit(occ, spread * k / len(occs))
        if acct.container_ids and self.emails_per_day > 0:
            self.docs.arrive(old, acct.clock, self.emails_per_day)
        self.process_documents()
        return changed, new

    def process_documents(self, ids: list[str] | None = None) -> list[str]:
        """Process pending documents (all or ``ids``), emit their events; returns their ids."""
        out = []
        for occ in self.docs.process(ids):
            self.hub.emit(occ)
            assert occ.document_id is not None
            out.append(occ.document_id)
        return out

    def reset_stats(self) -> None:
        """Zero the request statistics (not the fault sequence)."""
        self.requests = 0
        self.by_status.clear()
        self.fault_counts.clear()
