"""Deliver the outbox: each destination in its own thread, in the order alerts were raised.

:func:`send_pending` reads the new outbox rows once (a short read-only connection), then each
destination works through them on its own: a slow or dead channel delays only itself. An alert
is marked sent (the delivery state, :func:`~pipelines.alerts.state.open_state`: a file beside a
DuckDB warehouse, tables in a PostgreSQL one) only after Apprise reports that the channel
accepted it. A destination is served by one sender at a time (the state's ``exclusive``: an
advisory lock of PostgreSQL across machines, a lock file beside a DuckDB warehouse's state
file): a second sender waits up to :data:`LOCK_WAIT_SECONDS` for the first to finish, then
sends only what is left, so two senders never send one alert twice.

The first failure stops that destination for this pass and sets its back-off (doubling from
``retry_seconds`` up to ``retry_max_seconds``); its alerts stay pending and the next pass
resumes from the first one not sent. A sender killed between a channel's acceptance and the
mark sends that one alert again to that destination on restart; the generic JSON webhook
carries ``idempotency_key`` (and an ``Idempotency-Key`` header) so a receiver can drop the
copy.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pipelines.alerts.config import AlertSettings, Destination, load_settings, scrub
from pipelines.alerts.messages import alert_body, alert_title, json_fields
from pipelines.alerts.outbox import WarehouseArg, read_alerts, start_cursor
from pipelines.alerts.state import open_state
from pipelines.config import Warehouse, resolve_warehouse

log = logging.getLogger("freetime.alerts")

#: How long a sender waits for another one serving the same destination (PostgreSQL).
LOCK_WAIT_SECONDS = 30.0

#: ``deliver(destination, title, body, body_format, json_extras)`` -> None or why it failed.
Deliver = Callable[[Destination, str, str, str, Mapping[str, str] | None], str | None]


class _AppriseReasons(logging.Filter):
    """Why a send failed, per thread: Apprise says so only in its log, the cause (``Socket
    Exception: ...``, ``SMTP AUTH ...``) at DEBUG. Installed once on the ``apprise`` logger, it
    records the lines of the threads that are sending and lets through only what the logger
    would have let through anyway (WARNING and above), so nothing new reaches other handlers."""

    def __init__(self) -> None:
        super().__init__()
        self.active: dict[int, list[str]] = {}
        self.lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        lines = self.active.get(record.thread or 0)
        if lines is not None:
            text = record.getMessage()
            if record.levelno >= logging.WARNING or "exception" in text.lower():
                lines.append(text)
        return record.levelno >= logging.WARNING

    @contextlib.contextmanager
    def capture(self) -> Iterator[list[str]]:
        with self.lock:
            logger = logging.getLogger("apprise")
            if self not in logger.filters:
                logger.addFilter(self)
                logger.setLevel(logging.DEBUG)
        lines: list[str] = []
        self.active[threading.get_ident()] = lines
        try:
            yield lines
        finally:
            self.active.pop(threading.get_ident(), None)


_REASONS = _AppriseReasons()


def deliver(
    dest: Destination,
    title: str,
    body: str,
    body_format: str = "markdown",
    json_extras: Mapping[str, str] | None = None,
) -> str | None:
    """Send one message to ``dest`` through Apprise. None when the channel accepted it, else
    one line saying why not (the destination's secrets masked)."""
    import apprise

    url = dest.send_url()
    if json_extras and dest.is_json:
        extra = [f"%3A{quote(k)}={quote(v, safe='')}" for k, v in json_extras.items()]
        if "idempotency_key" in json_extras:
            key = quote(json_extras["idempotency_key"], safe="")
            extra.append(f"%2BIdempotency-Key={key}")
        url += "&" + "&".join(extra)
    if body_format == "markdown" and url.startswith("slack"):
        # Apprise passes markdown to Slack as it is, where **bold** shows its stars; from HTML
        # it writes Slack's own mrkdwn.
        from apprise.conversion import convert_between

        body = convert_between(apprise.NotifyFormat.MARKDOWN, apprise.NotifyFormat.HTML, body)  # type: ignore[no-untyped-call]
        body_format = "html"
    notifier = apprise.Apprise()
    if not notifier.add(url):
        return dest.error or "Apprise cannot send to this URL"
    with _REASONS.capture() as lines:
        try:
            ok = notifier.notify(body=body, title=title, body_format=body_format)
        except Exception as exc:  # a plugin that raises instead of logging: still one line
            ok = False
            lines.append(f"{type(exc).__name__}: {exc}")
    if ok:
        return None
    why = "; ".join(dict.fromkeys(line.strip() for line in lines if line.strip()))
    return scrub(" ".join((why or "the channel did not accept the message").split()), dest.url)


@dataclass
class DestinationResult:
    """What one pass did for one destination."""

    name: str
    label: str
    sent: int = 0
    pending: int = 0
    error: str | None = None
    waiting_until: datetime | None = None  # in back-off, not tried this pass
    busy: bool = False  # another sender was serving it for longer than LOCK_WAIT_SECONDS

    def line(self) -> str:
        """One line for a log or the console (the URL masked)."""
        if self.busy:
            return f"{self.label}: another sender is delivering its alerts"
        if self.error:
            return f"{self.label}: not delivered ({self.pending} pending): {self.error}"
        if self.waiting_until:
            return (
                f"{self.label}: retrying after {self.waiting_until:%H:%M:%S} UTC "
                f"({self.pending} pending)"
            )
        return f"{self.label}: {self.sent} sent, {self.pending} pending"


@dataclass
class SendSummary:
    """A pass of :func:`send_pending`."""

    results: list[DestinationResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def sent(self) -> int:
        return sum(r.sent for r in self.results)

    @property
    def failed(self) -> list[DestinationResult]:
        return [r for r in self.results if r.error]


def backoff(settings: AlertSettings, failures: int) -> timedelta:
    return timedelta(
        seconds=min(settings.retry_max_seconds, settings.retry_seconds * 2 ** max(failures - 1, 0))
    )


def _parse(at: str | None) -> datetime | None:
    return datetime.fromisoformat(at) if at else None


def _one_destination(
    dest: Destination,
    alerts: Sequence[Mapping[str, Any]],
    settings: AlertSettings,
    warehouse: Warehouse,
    state_path: Path | None,
    start: int,
    now: datetime,
    deadline: float | None,
    ignore_backoff: bool,
    send: Deliver,
) -> DestinationResult:
    result = DestinationResult(dest.name, dest.label)
    wait = LOCK_WAIT_SECONDS
    if deadline is not None:
        wait = max(min(wait, deadline - time.monotonic()), 0.0)
    with open_state(warehouse, state_path) as st, st.exclusive(dest.key, wait) as mine:
        if not mine:
            result.busy = True
            return result
        # read under the lock: what another sender marked meanwhile is not sent again
        row = st.register(dest.key, dest.masked, start)
        cursor = int(row["cursor"])
        sent = st.sent_seqs(dest.key, cursor)
        todo = [
            a
            for a in alerts
            if a["seq"] > cursor and a["seq"] not in sent and dest.filter.matches(a)
        ]
        result.pending = len(todo)
        if dest.error:
            result.error = dest.error
            st.failed(dest.key, dest.error, now, now)
            return result
        retry_at = _parse(row["next_attempt_at"])
        if not ignore_backoff and retry_at and retry_at > now and todo:
            result.waiting_until = retry_at
            return result
        wanted = {a["seq"] for a in todo}
        for a in alerts:
            seq = int(a["seq"])
            if seq <= cursor:
                continue
            if seq in wanted:
                if deadline is not None and time.monotonic() > deadline:
                    break
                why = send(
                    dest,
                    alert_title(a),
                    alert_body(a),
                    "markdown",
                    json_fields(a) if dest.is_json else None,
                )
                if why is not None:
                    failures = int(row["failures"]) + 1
                    st.failed(dest.key, why, now + backoff(settings, failures), now)
                    result.error = why
                    break
                st.mark_sent(dest.key, seq, str(a["alert_key"]), datetime.now(UTC))
                result.sent += 1
                result.pending -= 1
            cursor = seq
        st.advance(dest.key, cursor)
        if result.error is None and row["failures"]:
            st.recovered(dest.key)
    return result


def send_pending(
    warehouse: WarehouseArg = None,
    settings: AlertSettings | None = None,
    *,
    state_path: str | Path | None = None,
    now: datetime | None = None,
    budget_seconds: float | None = None,
    ignore_backoff: bool = False,
    send: Deliver = deliver,
) -> SendSummary:
    """Deliver the outbox's pending alerts to every configured destination, concurrently.

    ``warehouse``: a DuckDB path, a ``postgresql://`` URL or a :class:`Warehouse` (None: the
    configured one); ``state_path``: the state file of a DuckDB warehouse (ConfigError for a
    PostgreSQL one, whose state is in the database).

    ``budget_seconds``: no new message is started after it (the flows bound a pass so a slow
    channel never holds up the next run; what is left waits for the next pass).
    ``ignore_backoff``: try destinations in back-off now (``freetime alerts send``).
    Raises AlertConfigError (unreadable alerts.toml), ConfigError, WarehouseMissing /
    WarehouseLocked / WarehouseUnusable.
    A destination that fails does not raise: its :class:`DestinationResult` says why.
    """
    started = time.monotonic()
    settings = settings or load_settings()
    now = now or datetime.now(UTC)
    wh = resolve_warehouse(warehouse)
    state = Path(state_path) if state_path else None
    if not settings.destinations:
        return SendSummary()
    with open_state(wh, state) as st:
        known = st.destinations()
    cursors = [int(known[d.key]["cursor"]) for d in settings.destinations if d.key in known]
    new = [d for d in settings.destinations if d.key not in known]
    start = start_cursor(wh, now) if new else 0
    low = min([*cursors, *([start] if new else [])])
    alerts = read_alerts(wh, after_seq=low)
    deadline = started + budget_seconds if budget_seconds is not None else None
    with ThreadPoolExecutor(max_workers=len(settings.destinations)) as pool:
        futures = [
            pool.submit(
                _one_destination,
                d,
                alerts,
                settings,
                wh,
                state,
                start,
                now,
                deadline,
                ignore_backoff,
                send,
            )
            for d in settings.destinations
        ]
        results = [f.result() for f in futures]
    for r in results:
        if r.error:
            log.warning("alerts: %s", r.line())
    return SendSummary(results, round(time.monotonic() - started, 3))
