"""The one HTTP seam to the Terminal49 API: httpx with timeouts, retries and pacing.

Contract:
- every request carries ``Authorization: Token <key>``; the key is held in the client only and
  never appears in a log line, an exception message or a repr;
- requests are paced under the rate limit (rolling window), 429 answers are honoured through
  ``Retry-After``; 5xx, timeouts, dropped connections and bodies cut short are retried with
  exponential backoff and jitter;
- a complete body that is not valid JSON (``NaN``, nesting too deep, HTML) can never succeed:
  it raises :class:`MalformedBody` at once, naming the cause;
- a 401/403 raises :class:`AuthError`, other 4xx :class:`ApiError` (a 404 under a base URL
  without ``/v2`` says so), exhaustion of retries :class:`RetriesExhausted` (all subclasses of
  :class:`Terminal49Error`);
- an API that accepts connections but has sent no answer at all for ``stall_seconds`` (the
  clock restarts on every answer, to any request of this client) raises :class:`ApiStalled`
  instead of spending the whole retry budget on read timeouts;
- an API that cannot be connected to before it ever answered (a wrong base URL, no network)
  raises :class:`Unreachable` after ``settings.UNREACHABLE_ATTEMPTS`` tries (seconds, not the
  minutes of the full retry budget, which is kept for failures once the API has answered).
"""

from __future__ import annotations

import datetime as dt
import email.utils
import functools
import logging
import random
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import orjson

from pipelines.config import DEFAULT_RATE_LIMIT_PER_MINUTE, DEFAULT_STALL_SECONDS, ApiSettings
from pipelines.terminal49 import settings
from pipelines.terminal49._ratelimit import (
    BudgetStore,
    RollingWindowLimiter,
    SharedWindowLimiter,
    budget_file,
    budget_key,
)

log = logging.getLogger("freetime.client")
T = TypeVar("T")


class Terminal49Error(Exception):
    """Base of the client's errors; messages are safe to show to a user (no key)."""


class AuthError(Terminal49Error):
    """The API refused the key (401/403)."""


class ApiError(Terminal49Error):
    """A 4xx the client cannot fix by retrying (bad include, unknown id, ...)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class RetriesExhausted(Terminal49Error):
    """A request kept failing (5xx, 429, network) through every retry."""


class ClientClosed(Terminal49Error):
    """The client was closed (or aborted) while a request waited to be sent."""


class Unreachable(RetriesExhausted):
    """No connection could be made to the API, which has not answered this client yet."""


class ApiStalled(Terminal49Error):
    """The API accepted connections but sent no answer for ``stall_seconds``: retrying the
    whole load at once would most likely wait as long again."""


class UnreadableBody(Exception):
    """Raised by a ``parse`` function for a body that is cut short: retried."""


class MalformedBody(ApiError):
    """A complete answer whose body is not the JSON expected: retrying cannot fix it."""

    def __init__(self, message: str) -> None:
        super().__init__(200, message)


#: The token at which a body stopped parsing (``NaN``, ``Infinity``, ``<html>``...).
_TOKEN = re.compile(rb"[^\s,:\[\]{}]{1,24}")


def parse_json(body: bytes) -> Any:
    """The parsed JSON of ``body``. A body that ends before its JSON does (cut short on the way)
    raises :class:`UnreadableBody`; one that is complete but invalid :class:`MalformedBody`."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if exc.pos >= len(body):
            raise UnreadableBody(f"the body ends early ({len(body)} bytes)") from None
        found = _TOKEN.match(body, exc.pos)
        token = (found.group() if found else body[exc.pos : exc.pos + 1]).decode("utf-8", "replace")
        raise MalformedBody(
            f"the API sent JSON that cannot be parsed: {token} at byte {exc.pos} ({exc.msg})"
        ) from None


def json_object(body: bytes) -> dict[str, Any]:
    """The default parser: a JSON object, else :class:`UnreadableBody` or
    :class:`MalformedBody` (see :func:`parse_json`)."""
    doc = parse_json(body)
    if not isinstance(doc, dict):
        raise MalformedBody(f"the API sent JSON that is not an object ({type(doc).__name__})")
    return doc


@dataclass
class ClientStats:
    """Counters for progress lines and summaries; updated under a lock."""

    requests: int = 0
    #: HTTP answers received (any status): the API has been reached
    answers: int = 0
    retries: int = 0
    rate_limited: int = 0
    bytes: int = 0
    started: float = field(default_factory=time.monotonic)
    #: seconds since ``started`` at which each request was sent (to measure budget use)
    sent_at: list[float] = field(default_factory=list, repr=False)
    #: the API's clock (its ``Date`` header) at its first 200 answer: what list filters on
    #: dates compare with, whatever this machine's clock says
    first_answer_date: dt.datetime | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def sent(self) -> None:
        with self._lock:
            self.requests += 1
            self.sent_at.append(time.monotonic() - self.started)


def _http_date(value: str | None) -> dt.datetime | None:
    """An HTTP ``Date`` header as a UTC instant (None when absent or unreadable)."""
    try:
        return email.utils.parsedate_to_datetime(value).astimezone(dt.UTC) if value else None
    except (TypeError, ValueError):
        return None


def _retry_after_seconds(value: str | None, default: float) -> float:
    """``Retry-After`` is delta-seconds or an HTTP date; anything else falls back to default."""
    if not value:
        return default
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    when = _http_date(value)
    return max(when.timestamp() - time.time(), 0.0) if when else default


def _connect_reason(exc: httpx.TransportError) -> str:
    """A short cause for a failed connection (the message may carry the address, never the key)."""
    if isinstance(exc, httpx.ConnectTimeout):
        return "connection timed out"
    text = str(exc).lower()
    if "refused" in text:
        return "connection refused"
    if "name or service not known" in text or "nodename" in text or "resolution" in text:
        return "host name not found"
    return f"connection failed: {exc}" if str(exc) else "connection failed"


def _transport_reason(exc: httpx.TransportError, read_timeout_s: float) -> str:
    """A transport error in words for a log line or a message (no exception class names)."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return _connect_reason(exc)
    if isinstance(exc, httpx.ReadTimeout):
        return f"no answer within {read_timeout_s:g} s"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return "the connection dropped"
    if isinstance(exc, httpx.WriteError | httpx.WriteTimeout):
        return "the request could not be sent"
    if isinstance(exc, httpx.PoolTimeout):
        return "no connection free in time"
    return "network error"


def _error_detail(response: httpx.Response) -> str:
    try:
        errors = orjson.loads(response.content).get("errors") or []
        parts = [e.get("detail") or e.get("title") or "" for e in errors if isinstance(e, dict)]
        return "; ".join(p for p in parts if p) or response.reason_phrase
    except (orjson.JSONDecodeError, AttributeError):
        return response.reason_phrase


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings httpx builds for a client by default (certifi's authorities, or
    ``SSL_CERT_FILE``/``SSL_CERT_DIR`` as set when first asked), built once per process and
    shared by its clients: building them parses the whole bundle of authorities, a cost each
    short-lived client would otherwise pay again."""
    return httpx.create_ssl_context()


class Terminal49Client:
    """A thread-safe client; ``transport`` is injectable (tests, captured responses)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        rate_limit_per_minute: float | None = DEFAULT_RATE_LIMIT_PER_MINUTE,
        concurrency: int = settings.DEFAULT_CONCURRENCY,
        transport: httpx.BaseTransport | None = None,
        max_attempts: int = settings.MAX_ATTEMPTS,
        backoff_base_s: float = settings.BACKOFF_BASE_S,
        stall_seconds: float = DEFAULT_STALL_SECONDS,
        rate_window_s: float = settings.RATE_WINDOW_S,
        sleep: Callable[[float], None] | None = None,
        budget: Path | BudgetStore | None = None,
        yield_budget: bool = False,
    ) -> None:
        """``budget``: a folder where the key's request window is shared with the other
        processes pacing there (:class:`~._ratelimit.SharedWindowLimiter`), or a
        :class:`~._ratelimit.BudgetStore` shared by several machines (None: this client paces
        alone); ``yield_budget``: leave part of it to them (the full scan);
        ``rate_window_s``: the rolling window of ``rate_limit_per_minute`` (the API's 60 s;
        shorter only against a sandbox started with that window)."""
        self.base_url = base_url.rstrip("/")
        self.stall_seconds = stall_seconds
        # a read timeout longer than the stall bound would let one request outwait it
        self.read_timeout_s = min(settings.READ_TIMEOUT_S, stall_seconds)
        #: monotonic time of the latest answer to any request (see :class:`ApiStalled`)
        self._answered_at = float("-inf")
        self.concurrency = max(1, concurrency)
        self.max_attempts = max_attempts
        self.backoff_base_s = backoff_base_s
        self._closed = threading.Event()
        self._sleep = sleep or self._wait
        self.stats = ClientStats()
        limit = int(rate_limit_per_minute) if rate_limit_per_minute else None
        window, margin = rate_window_s, settings.RATE_WINDOW_MARGIN_S
        self.limiter: RollingWindowLimiter
        if isinstance(budget, Path):
            self.limiter = SharedWindowLimiter(
                budget_file(budget, base_url, api_key),
                limit,
                window,
                margin,
                yielding=yield_budget,
                sleep=self._sleep,
            )
        elif budget is not None:
            self.limiter = budget.limiter(
                budget_key(base_url, api_key),
                limit,
                window,
                margin,
                yielding=yield_budget,
                sleep=self._sleep,
            )
        else:
            self.limiter = RollingWindowLimiter(limit, window, margin, sleep=self._sleep)
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={
                "Authorization": f"Token {api_key}",
                "Accept": "application/vnd.api+json",
                "Content-Type": "application/vnd.api+json",
                "User-Agent": "freetime (+https://github.com/freetime)",
            },
            timeout=httpx.Timeout(self.read_timeout_s, connect=settings.CONNECT_TIMEOUT_S),
            limits=httpx.Limits(max_connections=self.concurrency + 2),
            transport=transport,
            verify=tls_context(),
            follow_redirects=False,
        )

    @classmethod
    def for_api(cls, api: ApiSettings, **options: Any) -> Terminal49Client:
        """A client for resolved settings (base URL, key, rate limit, stall bound); ``options``
        are the constructor's keyword arguments (concurrency, transport, retries)."""
        options.setdefault("stall_seconds", api.stall_seconds)
        options.setdefault("rate_window_s", api.rate_window_seconds)
        return cls(
            api.base_url,
            api.api_key or "",
            rate_limit_per_minute=api.rate_limit_per_minute,
            **options,
        )

    def __repr__(self) -> str:
        return f"Terminal49Client(base_url={self.base_url!r})"

    def close(self) -> None:
        self.abort()
        self._http.close()
        self.limiter.close()

    def abort(self) -> None:
        """Wake every thread waiting for the rate limit or a retry; they raise
        :class:`ClientClosed` (a Ctrl+C must not wait out a 60 s rate window)."""
        self._closed.set()

    def _wait(self, seconds: float) -> None:
        """The default sleep: ``seconds``, or until :meth:`abort`."""
        if self._closed.wait(seconds):
            raise ClientClosed("the client was closed")

    def __enter__(self) -> Terminal49Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one request -------------------------------------------------------------------------
    def get_json(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """GET ``path`` (relative to the base URL) and return the parsed JSON document."""
        return self.get(path, params, json_object)

    def get(self, path: str, params: dict[str, Any] | None, parse: Callable[[bytes], T]) -> T:
        """GET ``path`` and return ``parse(body)`` of the 200 answer.

        ``parse`` runs in the calling thread; an :class:`UnreadableBody` it raises (a truncated
        answer) is retried like a dropped connection, a :class:`MalformedBody` is raised at once
        (prefixed with the request). 401/403 raise :class:`AuthError`, other 4xx
        :class:`ApiError`.
        """
        response, value = self._exchange("GET", path, params=params, parse=parse)
        if response.status_code == 200:
            if self.stats.first_answer_date is None:
                self.stats.first_answer_date = _http_date(response.headers.get("date"))
            return value  # type: ignore[return-value]
        if response.status_code in (401, 403):
            raise AuthError(
                f"the API refused the key ({response.status_code} {response.reason_phrase}: "
                f"{_error_detail(response)}); check TERMINAL49_API_KEY"
            )
        if response.status_code == 404 and not urlsplit(self.base_url).path.endswith("/v2"):
            raise ApiError(
                404,
                f"the API answered 404 for {self.base_url}{path}: does the base URL end in /v2?",
            )
        raise ApiError(
            response.status_code,
            f"GET {path}: {response.status_code} {_error_detail(response)}",
        )

    def post(self, path: str, body: bytes, content_type: str) -> httpx.Response:
        """POST ``body`` to ``path``, paced and retried like a GET (429, 5xx, network).

        Returns the first answer that is not retried, whatever its status: the caller reads
        4xx bodies itself (409 ``duplicate_document``, 422 with ``source.pointer``).
        """
        response, _ = self._exchange(
            "POST", path, content=body, headers={"Content-Type": content_type}
        )
        return response

    def _exchange(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        parse: Callable[[bytes], T] | None = None,
    ) -> tuple[httpx.Response, T | None]:
        """The one retry loop: pace, send, read the whole body; retry 429 (``Retry-After``),
        5xx, network errors and (with ``parse``) 200 bodies cut short; return the first
        answer that is none of these, with ``parse(body)`` for a 200."""
        attempt = 0
        limited = 0
        first_sent: float | None = None
        while True:
            self.limiter.acquire()
            self.stats.sent()
            if first_sent is None:
                first_sent = time.monotonic()
            try:
                response = self._http.request(
                    method, path, params=params, content=content, headers=headers
                )
                body = response.content  # reads the whole body: truncation raises here
                # httpx 0.28 binds the response and its stream in a reference cycle (encode/httpx
                # #3733), so every read body waited for a full garbage collection, which comes
                # rarer as the heap grows. Read, the body no longer needs the bound stream.
                response.stream = httpx.ByteStream(body)
            except httpx.UnsupportedProtocol as exc:  # a URL no retry can fix
                raise Unreachable(f"cannot reach the API at {self.base_url}: {exc}") from None
            except httpx.TransportError as exc:  # timeouts, refused, dropped, truncated
                attempt += 1
                reason = _transport_reason(exc, self.read_timeout_s)
                connecting = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                if (
                    connecting
                    and self.stats.answers == 0
                    and attempt >= settings.UNREACHABLE_ATTEMPTS
                ):
                    raise Unreachable(
                        f"cannot reach the API at {self.base_url} ({_connect_reason(exc)}); "
                        "check TERMINAL49_BASE_URL (or --base-url) and the network"
                    ) from None
                # silent since this request was first sent, or since any later answer
                silent = time.monotonic() - max(first_sent, self._answered_at)
                if not connecting and silent >= self.stall_seconds:
                    raise ApiStalled(
                        f"the API at {self.base_url} accepted connections but sent no answer "
                        f"for {self.stall_seconds:g} s (TERMINAL49_STALL_SECONDS)"
                    ) from None
            else:
                self._answered_at = time.monotonic()
                self.stats.add(bytes=len(body), answers=1)
                status = response.status_code
                if status == 429:
                    limited += 1
                    self.stats.add(rate_limited=1, retries=1)
                    if limited > settings.MAX_RATE_LIMITED:
                        raise RetriesExhausted(
                            f"{method} {path}: still rate limited (429) after {limited} tries"
                        )
                    wait = _retry_after_seconds(response.headers.get("Retry-After"), 1.0)
                    log.info("%s %s: 429, waiting %.1fs (Retry-After)", method, path, wait)
                    self.limiter.penalise(wait)
                    continue
                if status >= 500:
                    attempt += 1
                    reason = f"HTTP {status}"
                elif status == 200 and parse is not None:
                    try:
                        return response, parse(body)
                    except UnreadableBody as exc:
                        attempt += 1
                        reason = str(exc)
                    except MalformedBody as exc:
                        raise MalformedBody(f"{method} {path}: {exc}") from None
                else:
                    return response, None
            if attempt >= self.max_attempts:
                raise RetriesExhausted(
                    f"{method} {path}: gave up after {attempt} attempts ({reason})"
                )
            self.stats.add(retries=1)
            delay = min(settings.BACKOFF_CAP_S, self.backoff_base_s * 2 ** (attempt - 1))
            delay *= 0.5 + random.random()  # jitter: concurrent workers must not retry in step
            log.warning("%s %s: %s, retry %d in %.1fs", method, path, reason, attempt, delay)
            self._sleep(delay)

    # -- many pages ----------------------------------------------------------------------------
    def get_many(
        self,
        path: str,
        param_sets: Iterable[dict[str, Any]],
        parse: Callable[[bytes], T],
    ) -> Iterator[tuple[dict[str, Any], T]]:
        """GET ``path`` once per parameter set, ``concurrency`` at a time; yield in given order.

        ``parse`` runs in the worker threads. At most ``2 * concurrency`` answers are held in
        memory at once. Any exception here (a page that failed, Ctrl+C, the consumer closing
        the generator) aborts the client, so workers waiting for the rate window stop at once;
        the client is not usable afterwards.
        """
        window = 2 * self.concurrency
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="t49") as pool:
            pending: list[tuple[dict[str, Any], Future[T]]] = []
            try:
                for params in param_sets:
                    pending.append((params, pool.submit(self.get, path, params, parse)))
                    if len(pending) >= window:
                        params0, fut = pending.pop(0)
                        yield params0, _result(fut)
                while pending:
                    params0, fut = pending.pop(0)
                    yield params0, _result(fut)
            except BaseException:  # a failed page, Ctrl+C, the consumer stopping: stop now
                self.abort()  # workers waiting for the rate window give up at once
                raise
            finally:
                for _, fut in pending:
                    fut.cancel()


def _result(future: Future[T]) -> T:
    """``future.result()``, waking every 0.2 s: a Ctrl+C delivered to another thread (Prefect
    runs several) is then raised here at once, not when the page arrives."""
    while True:
        try:
            return future.result(timeout=0.2)
        except FutureTimeout:
            continue
