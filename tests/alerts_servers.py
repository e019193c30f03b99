"""Real servers on loopback for the alert tests: an SMTP server (aiosmtpd, with STARTTLS or
SSL and AUTH) and an HTTP(S) server that records the webhooks it is sent (JSON, Slack- and
Teams-shaped), each answering as the test tells it (status, delay, a hook run on receipt).
"""

from __future__ import annotations

import datetime as dt
import email
import email.policy
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate and key for 127.0.0.1 (the clients are told not to verify it)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .sign(key, hashes.SHA256())
    )
    crt, pem = folder / "cert.pem", folder / "key.pem"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return crt, pem


def server_context(folder: Path) -> ssl.SSLContext:
    crt, pem = self_signed(folder)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(crt, pem)
    return ctx


# ---- SMTP ------------------------------------------------------------------------------------
class _Inbox:
    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []
        self.sizes: list[int] = []
        self.lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        raw = envelope.original_content or envelope.content
        msg = email.message_from_bytes(raw, policy=email.policy.default)
        assert isinstance(msg, EmailMessage)
        with self.lock:
            self.messages.append(msg)
            self.sizes.append(len(raw))
        return "250 OK"


@dataclass
class Smtp:
    """A running SMTP server; ``url(...)`` is the Apprise URL that reaches it."""

    controller: Controller
    inbox: _Inbox
    mode: str
    user: str
    password: str

    @property
    def messages(self) -> list[EmailMessage]:
        return self.inbox.messages

    def url(self, password: str | None = None, to: str = "desk@example.com") -> str:
        scheme = "mailto" if self.mode == "insecure" else "mailtos"
        return (
            f"{scheme}://{self.user}:{password or self.password}@127.0.0.1:"
            f"{self.controller.port}?to={to}&from=freetime@example.com&mode={self.mode}"
            "&verify=no"
        )

    def subjects(self) -> list[str]:
        return [str(m["subject"]) for m in self.messages]


def start_smtp(
    folder: Path, mode: str = "starttls", user: str = "desk", password: str = "s3cr3t-pw"
) -> Smtp:
    """An aiosmtpd server on loopback with AUTH (only ``user``/``password`` pass): ``mode``
    starttls (STARTTLS required before AUTH), ssl (TLS from the first byte) or insecure."""

    def auth(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        ok = isinstance(data, LoginPassword) and (data.login, data.password) == (
            user.encode(),
            password.encode(),
        )
        return AuthResult(success=ok, handled=False)

    inbox = _Inbox()
    ctx = server_context(folder) if mode != "insecure" else None
    kwargs: dict[str, Any] = {
        "hostname": "127.0.0.1",
        "port": free_port(),
        "authenticator": auth,
        # an SSL server's sessions do not know they are encrypted: AUTH is over TLS anyway
        "auth_require_tls": mode == "starttls",
    }
    if mode == "starttls":
        kwargs.update(tls_context=ctx, require_starttls=True)
    elif mode == "ssl":
        kwargs.update(ssl_context=ctx)
    controller = Controller(inbox, **kwargs)
    controller.start()
    return Smtp(controller, inbox, mode, user, password)


# ---- HTTP ------------------------------------------------------------------------------------
@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any
    at: float


@dataclass
class Hooks:
    """An HTTP(S) server on loopback recording every POST; ``answer(path)`` gives the status
    and the seconds to wait before answering; ``on_receive`` runs first (e.g. kills a sender)."""

    httpd: ThreadingHTTPServer
    scheme: str
    received: list[Received] = field(default_factory=list)
    answer: Callable[[str], tuple[int, float]] = lambda path: (200, 0.0)
    on_receive: Callable[[Received], None] | None = None

    @property
    def netloc(self) -> str:
        return f"127.0.0.1:{self.httpd.server_address[1]}"

    def bodies(self, prefix: str = "") -> list[Any]:
        return [r.body for r in self.received if r.path.startswith(prefix)]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def start_hooks(tls_folder: Path | None = None) -> Hooks:
    hooks: Hooks

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802
            size = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(size)
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
            rec = Received(self.path, dict(self.headers.items()), body, time.monotonic())
            hooks.received.append(rec)
            if hooks.on_receive:
                hooks.on_receive(rec)
            status, delay = hooks.answer(self.path)
            if delay:
                time.sleep(delay)
            out = b"ok"
            try:
                self.send_response(status)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
            except OSError:
                pass

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    httpd.daemon_threads = True
    scheme = "http"
    if tls_folder is not None:
        httpd.socket = server_context(tls_folder).wrap_socket(httpd.socket, server_side=True)
        scheme = "https"
    hooks = Hooks(httpd, scheme)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return hooks


def slack_to(hooks: Hooks) -> Iterator[None]:
    """Point Apprise's Slack webhook base (a class attribute naming hooks.slack.com) at
    ``hooks`` for the duration: the Slack plugin itself builds and posts the payload."""
    from apprise.plugins.slack import NotifySlack

    saved = NotifySlack.webhook_url
    NotifySlack.webhook_url = f"http://{hooks.netloc}/services"
    try:
        yield
    finally:
        NotifySlack.webhook_url = saved


# ---- an outbox to deliver --------------------------------------------------------------------
def write_outbox(path: Path, count: int, **overrides: Any) -> None:
    """A warehouse whose ``analytics.alert_outbox`` holds ``count`` alerts raised now, as the
    rules write them (one imminent box each, ``MSCU000000<i>``)."""
    import duckdb

    from pipelines.alerts.rules import OUTBOX, OUTBOX_DDL

    with duckdb.connect(str(path)) as con:
        con.execute("CREATE SCHEMA IF NOT EXISTS analytics")
        con.execute(OUTBOX_DDL)
        start = con.execute(f"SELECT coalesce(max(seq), 0) FROM {OUTBOX}").fetchone()[0]  # type: ignore[index]
        for i in range(start + 1, start + count + 1):
            row = {
                "seq": i,
                "alert_key": f"key-{i:04d}",
                "container_id": f"c{i}",
                "container_number": f"MSCU{i:07d}",
                "kind": "level",
                "value": "imminent 2030-01-11",
                "detail": "now imminent (was watch)",
                "risk_level": "imminent",
                "lfd_date": dt.date(2030, 1, 11),
                "lfd_source": "terminal",
                "days_to_lfd": 2,
                "port_of_discharge_locode": "USLAX",
                "pod_terminal_name": "Pier 400",
                "shipping_line_scac": "MAEU",
                "blocking_holds": ["customs"],
                "projected_demurrage": 450.0,
                "currency": "USD",
                "risk_reason": "LFD in 2 days",
                "raised_at": dt.datetime.now(dt.UTC),
                **overrides,
            }
            cols = ", ".join(row)
            marks = ", ".join("?" for _ in row)
            con.execute(f"INSERT INTO {OUTBOX} ({cols}) VALUES ({marks})", list(row.values()))
