"""The webhook receiver against hostile senders, as `freetime webhooks serve` runs it.

Every test talks to a real receiver process over loopback: raw sockets where the sender has to
misbehave (chunked bodies without an end, bytes trickled one at a time), httpx otherwise.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from freetime_cli.webhooks_cmd import start_receiver_process
from pipelines.webhooks.inbox import MAX_BODY_BYTES, Inbox
from pipelines.webhooks.receiver import create_app
from pipelines.webhooks.signing import HEADER, sign

SECRET = "hardening-secret-0123456789"
FAKE_SIGNATURE = "ab" * 32  # well formed, never right
CHUNK = 64 * 1024


def notification(nid: str) -> bytes:
    return orjson.dumps(
        {
            "data": {
                "id": nid,
                "type": "webhook_notification",
                "attributes": {
                    "event": "container.updated",
                    "created_at": "2026-11-24T10:00:00Z",
                },
            },
            "included": [],
        }
    )


class Rx:
    """A started receiver process: its URL, port, pid and inbox."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, inbox: Path) -> None:
        self.proc, self.url, self.inbox = proc, url, inbox
        self.port = int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
        self.health = url.rsplit("/webhooks", 1)[0] + "/healthz"

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def open_files(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))


Start = Callable[..., "Rx"]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    procs: list[subprocess.Popen[bytes]] = []

    def _start(*options: str) -> Rx:
        inbox = tmp_path / f"inbox-{len(procs)}.sqlite"
        proc, url = start_receiver_process(SECRET, inbox, options=options)
        procs.append(proc)
        return Rx(proc, url, inbox)

    yield _start
    for proc in procs:
        _stop(proc)


@pytest.fixture(scope="module")
def rx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rx]:
    """One receiver with the default options for the tests of bodies: each reads its own
    counters as the change of the receiver's health over the test."""
    inbox = tmp_path_factory.mktemp("rx") / "inbox.sqlite"
    proc, url = start_receiver_process(SECRET, inbox)
    try:
        yield Rx(proc, url, inbox)
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def health_change(rx: Rx, before: dict[str, int]) -> dict[str, int]:
    """The receiver's counters now less ``before`` (a health answer taken earlier)."""
    now = httpx.get(rx.health).json()
    return {k: v - before[k] for k, v in now.items() if type(v) is int and k in before}


def request_head(signature: str | None, extra: str = "Transfer-Encoding: chunked\r\n") -> bytes:
    head = "POST /webhooks/terminal49 HTTP/1.1\r\nHost: rx\r\nContent-Type: application/json\r\n"
    if signature is not None:
        head += f"{HEADER}: {signature}\r\n"
    return (head + extra + "\r\n").encode()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def read_answer(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """What the receiver sends until it closes (or ``timeout`` passes); a reset after its
    answer (it closes with the unread body still queued) ends the read like a close."""
    sock.settimeout(timeout)
    got = b""
    try:
        while True:
            part = sock.recv(65536)
            if not part:
                break
            got += part
    except (TimeoutError, ConnectionResetError):
        pass
    return got


def status_of(answer: bytes) -> int | None:
    if not answer.startswith(b"HTTP/1.1 "):
        return None
    return int(answer[9:12])


# -- point 6: bodies -------------------------------------------------------------------------
def test_unsigned_chunked_body_is_refused_before_it_is_read(rx: Rx) -> None:
    before = httpx.get(rx.health).json()
    with socket.create_connection(("127.0.0.1", rx.port), timeout=5) as sock:
        sock.sendall(request_head(None) + chunk(b"x" * CHUNK))  # and never the last chunk
        answer = read_answer(sock)
    assert status_of(answer) == 401, answer[:200]
    assert b"connection: close" in answer.lower()
    assert health_change(rx, before)["unauthorized"] == 1


def test_a_streamed_body_is_refused_as_soon_as_it_passes_the_cap(rx: Rx) -> None:
    """A chunked body with no Content-Length, signed or not, is cut at 10 MiB: 413 while the
    sender is still sending, and the receiver never holds much more than the cap."""
    before = httpx.get(rx.health).json()
    rss_before = rx.rss_kib()
    limit = 64 * 1024 * 1024  # the sender would go on to 64 MiB
    sent = 0
    answer = b""
    with socket.create_connection(("127.0.0.1", rx.port), timeout=5) as sock:
        sock.sendall(request_head(FAKE_SIGNATURE))
        piece = chunk(b"x" * CHUNK)
        sel = selectors.DefaultSelector()
        sel.register(sock, selectors.EVENT_READ)
        while sent < limit:
            if sel.select(0):
                break  # the receiver answered (or closed) mid-body
            try:
                sock.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += CHUNK
        sel.close()
        answer = read_answer(sock)
    assert status_of(answer) == 413, answer[:200]
    assert sent < limit  # refused while the body was still coming
    assert rx.rss_kib() - rss_before < 48 * 1024
    change = health_change(rx, before)
    assert change["too_large"] == 1 and change["stored"] == 0


def test_a_declared_length_over_the_cap_is_refused_before_the_body(rx: Rx) -> None:
    with socket.create_connection(("127.0.0.1", rx.port), timeout=5) as sock:
        sock.sendall(
            request_head(FAKE_SIGNATURE, f"Content-Length: {MAX_BODY_BYTES + 1}\r\n") + b"{"
        )
        answer = read_answer(sock)
    assert status_of(answer) == 413, answer[:200]


def test_a_signed_chunked_delivery_under_the_cap_is_stored(rx: Rx) -> None:
    body = notification("chunked-1")

    def pieces() -> Iterator[bytes]:  # an iterator: httpx sends it chunked, no Content-Length
        for i in range(0, len(body), 7):
            yield body[i : i + 7]

    r = httpx.post(rx.url, content=pieces(), headers={HEADER: sign(body, SECRET)}, timeout=10)
    assert r.status_code == 200 and r.json() == {"id": "chunked-1", "stored": True}
    with Inbox(rx.inbox) as inbox:
        row = inbox.get("chunked-1")
    assert row is not None and row.body == body


# -- point 7: slow senders -------------------------------------------------------------------
def test_trickling_senders_are_cut_and_valid_deliveries_still_get_through(
    start: Start,
) -> None:
    """300 connections trickle (a body a byte at a time, headers a byte at a time, or nothing
    at all); all are cut by the request timeout while signed deliveries keep getting 200."""
    rx: Rx = start("--request-timeout", "3")
    files_before = rx.open_files()
    sel = selectors.DefaultSelector()
    kinds = ["body"] * 200 + ["head"] * 50 + ["silent"] * 50
    sockets: dict[socket.socket, str] = {}
    answers: dict[str, list[int | None]] = {"body": [], "head": [], "silent": []}
    head = request_head(FAKE_SIGNATURE)
    sent_head: dict[socket.socket, int] = {}
    for kind in kinds:
        sock = socket.create_connection(("127.0.0.1", rx.port), timeout=5)
        if kind == "body":
            sock.sendall(head)
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ, kind)
        sockets[sock] = kind
        sent_head[sock] = 0

    def cut(sock: socket.socket, kind: str) -> None:
        answer = b""
        with contextlib.suppress(BlockingIOError, ConnectionResetError):
            answer = sock.recv(65536)
        answers[kind].append(status_of(answer))
        sel.unregister(sock)
        sock.close()
        del sockets[sock]

    delivered: list[int] = []
    http = httpx.Client(timeout=10)
    deadline = time.monotonic() + 20  # 3 s timeouts: everything is cut long before this
    n = 0
    try:
        while sockets and time.monotonic() < deadline:
            for sock, kind in list(sockets.items()):
                try:
                    if kind == "body":
                        sock.send(chunk(b"x"))
                    elif kind == "head" and sent_head[sock] < len(head) - 2:
                        sock.send(head[sent_head[sock] : sent_head[sock] + 1])
                        sent_head[sock] += 1
                except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                    pass
            for key, _ in sel.select(0.25):
                cut(key.fileobj, key.data)  # type: ignore[arg-type]
            body = notification(f"valid-{n}")
            delivered.append(
                http.post(rx.url, content=body, headers={HEADER: sign(body, SECRET)}).status_code
            )
            n += 1
    finally:
        http.close()
        for sock in sockets:
            sock.close()
        sel.close()
    assert not sockets, f"{len(sockets)} trickling connections were never cut"
    assert set(answers["body"]) == {408}
    assert set(answers["head"]) | set(answers["silent"]) == {None}  # closed without an answer
    assert delivered and set(delivered) == {200}
    with Inbox(rx.inbox) as inbox:
        assert inbox.counts()["stored"] == n
    assert httpx.get(rx.health).json()["timed_out"] == 200
    assert rx.open_files() <= files_before + 2


def test_requests_beyond_the_connection_cap_get_503(start: Start) -> None:
    rx: Rx = start("--max-connections", "20")
    idle = [socket.create_connection(("127.0.0.1", rx.port), timeout=5) for _ in range(25)]
    body = notification("capped")
    headers = {HEADER: sign(body, SECRET)}
    try:
        time.sleep(0.2)  # let the receiver accept them all
        assert httpx.post(rx.url, content=body, headers=headers, timeout=10).status_code == 503
    finally:
        for sock in idle:
            sock.close()
    for _ in range(100):  # bounded: the receiver sees the closes within a few loop turns
        r = httpx.post(rx.url, content=body, headers=headers, timeout=10)
        if r.status_code != 503:
            break
        time.sleep(0.05)
    assert r.status_code == 200


# -- point 8: the secret ---------------------------------------------------------------------
@pytest.mark.parametrize(("how", "blank"), [("env", " "), ("option", "\t\n  ")])
def test_a_blank_secret_is_refused_in_one_line(how: str, blank: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "FREETIME_WEBHOOK_SECRET"}
    args = [sys.executable, "-m", "freetime_cli.main", "webhooks", "serve", "--port", "0"]
    args += ["--inbox", str(tmp_path / "inbox.sqlite")]
    if how == "env":
        env["FREETIME_WEBHOOK_SECRET"] = blank
    else:
        args += ["--secret", blank]
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the receiver started with a blank secret ({how})")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "secret" in lines[0] and "whitespace" in lines[0], lines
    assert not (tmp_path / "inbox.sqlite").exists()
    with pytest.raises(ValueError, match="whitespace"):
        create_app(blank, tmp_path / "inbox.sqlite")


# -- issue 26, point 12: the port ------------------------------------------------------------
def test_the_receiver_defaults_to_8050_beside_the_sandbox_on_8049() -> None:
    def help_of(*command: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", *command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    receiver = help_of("freetime_cli.main", "webhooks", "serve")
    sandbox = help_of("sandbox", "serve")
    assert "[default: 8050]" in receiver
    assert "[default: 8049]" in sandbox
