"""What ``sandbox serve`` and :class:`sandbox.thread.SandboxThread` share: the options (with
``serve``'s defaults and checks), the account and its state, the listening socket and the
uvicorn configuration.

:func:`sandbox.cli.parse_args` turns ``serve``'s command-line arguments into
:class:`ServeOptions` through the ``serve`` command itself, so an option, its default and its
range are declared once (in :mod:`sandbox.cli`). :func:`prepare` checks them, binds and builds
everything but does not serve: the caller runs
``uvicorn.Server(prepared.config).run(sockets=[prepared.sock])`` in its main thread (``serve``)
or on a thread (``SandboxThread``).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import uvicorn

    from sandbox.state import SandboxState


class InvalidOption(ValueError):
    """An option ``serve`` rejects (or a port it cannot bind); the message is one line."""


@dataclass(frozen=True)
class ServeOptions:
    """Every option of ``sandbox serve``, by its parameter name (see ``serve --help``)."""

    host: str
    port: int
    containers: int
    seed: int
    api_key: str
    rate_limit: int
    rate_window_seconds: float
    faults: str
    clock: str | None
    advance_every: float
    advance_step_hours: float
    log_level: str
    webhook_backoff_seconds: float
    webhook_max_retries: int
    webhook_timeout_seconds: float
    webhook_concurrency: int
    document_delay_seconds: float
    email_documents: int
    emails_per_day: float
    active_share: float | None
    pod_deadlines: bool


def parse_clock(value: str | None) -> int:
    """``--clock`` ISO 8601 (naive = UTC) to epoch seconds; default now floored to the hour."""
    if value is None:
        now = int(datetime.now(UTC).timestamp())
        return now - now % 3600
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp())


@dataclass
class Prepared:
    """A sandbox ready to serve: ``sock`` bound and listening, ``base_url`` its address."""

    sock: socket.socket
    state: SandboxState
    base_url: str
    config: uvicorn.Config


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not yet listening); :class:`InvalidOption` if
    it cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on accepted sockets whose proto is TCP
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise InvalidOption(f"cannot bind {host}:{port}: {e.strerror}") from None
    return sock


def prepare(options: ServeOptions, own_logging: bool = True) -> Prepared:
    """Check ``options`` (:class:`InvalidOption`), bind, generate the account, build the state
    and the app, listen, and configure uvicorn as ``serve`` does. ``own_logging=False`` leaves
    the process's logging configuration alone (uvicorn's loggers then propagate to the root
    logger): for a server on a thread of someone else's process."""
    from sandbox.faults import FaultSpec, FaultSpecError

    o = options
    try:
        spec = FaultSpec.parse(o.faults)
    except FaultSpecError as e:
        raise InvalidOption(f"invalid --faults: {e}") from None
    if o.active_share is not None and not 0.0 <= o.active_share <= 1.0:
        raise InvalidOption(
            f"invalid --active-share {o.active_share}: expected a share between 0 and 1"
        )
    try:
        clock_ts = parse_clock(o.clock)
    except ValueError:
        raise InvalidOption(
            f"invalid --clock {o.clock!r}: expected ISO 8601 such as 2026-11-20T12:00:00Z"
        ) from None

    sock = bind(o.host, o.port)
    try:
        import uvicorn

        from sandbox.app import create_app
        from sandbox.model import Account
        from sandbox.state import SandboxState

        account = Account.generate(
            o.containers,
            o.seed,
            clock_ts,
            active_share=o.active_share,
            pod_deadlines=o.pod_deadlines,
        )
        state = SandboxState(
            account=account,
            api_key=o.api_key,
            rate_limit=o.rate_limit,
            rate_window=o.rate_window_seconds,
            faults=spec,
            advance_every=o.advance_every,
            advance_step=round(o.advance_step_hours * 3600),
            webhook_backoff=o.webhook_backoff_seconds,
            webhook_max_retries=o.webhook_max_retries,
            webhook_timeout=o.webhook_timeout_seconds,
            webhook_concurrency=o.webhook_concurrency,
            document_delay=o.document_delay_seconds,
            email_documents=o.email_documents,
            emails_per_day=o.emails_per_day,
        )
        asgi = create_app(state)
        sock.listen(2048)
        logging: dict[str, object] = {} if own_logging else {"log_config": None}
        config = uvicorn.Config(
            asgi,
            log_level=o.log_level,
            access_log=False,
            http="h11",
            loop="asyncio",
            lifespan="on",
            timeout_keep_alive=30,
            date_header=False,  # V2Guard sends the account clock's date
            **logging,  # type: ignore[arg-type]
        )
    except BaseException:
        sock.close()
        raise
    shown = f"[{o.host}]" if sock.family == socket.AF_INET6 else o.host
    return Prepared(sock, state, f"http://{shown}:{sock.getsockname()[1]}/v2", config)
