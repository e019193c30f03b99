"""The HTTP seam's failure policy, through its injectable transport and over real HTTP.

A client that never got an answer gives up after ``UNREACHABLE_ATTEMPTS`` connection failures (a
wrong base URL must not hang a load for minutes); once the API has answered, a refused
connection is a blip and gets the full retry budget. An API that accepts connections and stays
silent stalls the load after ``stall_seconds``; a body cut short is retried, a complete body
that cannot be parsed is not.
"""

from __future__ import annotations

import gc
import logging
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from conftest import Handler, LoopbackServer

from pipelines.config import DEFAULT_STALL_SECONDS, ApiSettings, ConfigError
from pipelines.terminal49 import settings
from pipelines.terminal49.client import (
    ApiError,
    ApiStalled,
    MalformedBody,
    RetriesExhausted,
    Terminal49Client,
    Unreachable,
    json_object,
)

pytestmark = pytest.mark.fast

OK = b'{"data": [], "meta": {"total": 0}}'


def _client(script: list[str], sleeps: list[float]) -> tuple[Terminal49Client, list[str]]:
    """A client whose transport plays ``script``: "ok" answers 200, "refused" fails to connect."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        step = script.pop(0) if script else "ok"
        seen.append(step)
        if step == "refused":
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        return httpx.Response(200, content=OK)

    sleep: Callable[[float], None] = sleeps.append
    client = Terminal49Client(
        "http://api.test/v2",
        "secret-key-1",
        rate_limit_per_minute=None,
        transport=httpx.MockTransport(handler),
        sleep=sleep,
    )
    return client, seen


def test_never_answered_gives_up_after_a_few_tries() -> None:
    sleeps: list[float] = []
    client, seen = _client(["refused"] * 20, sleeps)
    with pytest.raises(
        Unreachable,
        match=r"cannot reach the API at http://api.test/v2 "
        r"\(connection refused\)",
    ) as err:
        client.get_json("/containers")
    assert len(seen) == settings.UNREACHABLE_ATTEMPTS
    assert isinstance(err.value, RetriesExhausted) and "secret-key-1" not in str(err.value)
    assert sum(sleeps) < 5


def test_refused_after_an_answer_gets_the_full_budget() -> None:
    sleeps: list[float] = []
    refusals = settings.UNREACHABLE_ATTEMPTS + 2
    client, seen = _client(["ok", *["refused"] * refusals, "ok"], sleeps)
    assert client.get_json("/containers")["meta"]["total"] == 0
    assert client.get_json("/containers")["meta"]["total"] == 0  # after the refusals
    assert seen == ["ok", *["refused"] * refusals, "ok"]
    assert client.stats.retries == refusals


@pytest.mark.parametrize("url", ["notaurl", "ftp://x/v2", "http:///v2", "api.terminal49.com/v2"])
def test_a_base_url_that_is_not_http_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="must be an http\\(s\\) URL"):
        ApiSettings.resolve(base_url=url, api_key="k")
    assert ApiSettings.resolve(base_url="http://127.0.0.1:9/v2/", api_key="k").base_url == (
        "http://127.0.0.1:9/v2"
    )


def test_an_unsupported_protocol_is_not_retried() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.UnsupportedProtocol("Request URL has an unsupported protocol 'ftp://'.")

    sleeps: list[float] = []
    client = Terminal49Client(
        "http://api.test/v2",
        "k",
        rate_limit_per_minute=None,
        transport=httpx.MockTransport(handler),
        sleep=sleeps.append,
    )
    with pytest.raises(Unreachable, match="unsupported protocol"):
        client.get_json("/containers")
    assert client.stats.requests == 1 and sleeps == []


def test_an_answer_is_freed_once_read_not_at_the_next_full_garbage_collection() -> None:
    # httpx 0.28 ties a response and its stream in a reference cycle: each page's body stayed
    # until a full collection (up to 100 MB of them in a load of 100,000 containers)
    client, _ = _client([], [])
    gc.collect()
    gc.disable()
    try:
        for _ in range(5):
            client.get_json("/containers")
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, httpx.Response)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []


# -- an API that accepts connections and never answers ---------------------------------------


@pytest.fixture
def silent_api() -> Iterator[str]:
    """A base URL whose server accepts TCP connections (the kernel's backlog) and never
    answers."""
    with socket.create_server(("127.0.0.1", 0), backlog=64) as listener:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v2"


def test_an_api_that_never_answers_stalls_the_load_after_the_stall_bound(
    silent_api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TERMINAL49_STALL_SECONDS", "0.5")
    api = ApiSettings.resolve(base_url=silent_api, api_key="secret-key-1")
    with Terminal49Client.for_api(api) as client, pytest.raises(ApiStalled) as err:
        client.get_json("/containers")
    assert str(err.value) == (
        f"the API at {silent_api} accepted connections but sent no answer for 0.5 s "
        "(TERMINAL49_STALL_SECONDS)"
    )
    assert not isinstance(err.value, RetriesExhausted)  # flows must be able to tell it apart
    assert client.stats.requests < settings.MAX_ATTEMPTS


def test_a_slow_api_that_answers_completes_past_the_stall_bound(
    loopback: Callable[[Handler], LoopbackServer],
) -> None:
    def slow(path: str, query: dict[str, str], headers: dict[str, str]) -> Any:
        time.sleep(0.3)
        return 200, {}, OK

    server = loopback(slow)
    with Terminal49Client(
        server.base_url, "k", rate_limit_per_minute=None, stall_seconds=1.5, concurrency=2
    ) as client:
        pages = list(client.get_many("/containers", ({"n": n} for n in range(12)), json_object))
    assert len(pages) == 12 and client.stats.retries == 0  # 12 x 0.3 s on 2 connections


@pytest.mark.parametrize("raw", ["", "x", "-1", "inf", "nan"])
def test_a_stall_bound_that_is_not_a_positive_number_is_a_config_error(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TERMINAL49_STALL_SECONDS", raw)
    if raw == "":
        assert ApiSettings.resolve(api_key="k").stall_seconds == DEFAULT_STALL_SECONDS
        return
    with pytest.raises(ConfigError, match="TERMINAL49_STALL_SECONDS must be a"):
        ApiSettings.resolve(api_key="k")


@pytest.mark.parametrize("raw", ["", "x", "0", "-6", "inf", "nan"])
def test_a_rate_window_that_is_not_a_positive_number_is_a_config_error(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TERMINAL49_RATE_WINDOW_SECONDS", raw)
    if raw == "":  # the API's minute
        assert ApiSettings.resolve(api_key="k").rate_window_seconds == settings.RATE_WINDOW_S
        return
    with pytest.raises(ConfigError, match="TERMINAL49_RATE_WINDOW_SECONDS must be positive"):
        ApiSettings.resolve(api_key="k")


def test_the_limit_counts_in_the_rate_window_the_settings_name(
    loopback: Callable[[Handler], LoopbackServer],
) -> None:
    server = loopback(lambda path, query, headers: (200, {}, OK))
    api = ApiSettings(server.base_url, "k", rate_limit_per_minute=2, rate_window_seconds=6)
    sleeps: list[float] = []

    class Waits(Exception):
        pass

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        raise Waits

    with Terminal49Client.for_api(api, sleep=sleep) as client:
        client.get_json("/containers")
        client.get_json("/containers")
        with pytest.raises(Waits):
            client.get_json("/containers")
    # the third request waits for the first to leave the 6 s window (plus the margin), not 60 s
    assert len(server.requests) == 2
    assert 5 < sleeps[0] <= 6 + settings.RATE_WINDOW_MARGIN_S


# -- bodies: cut short is retried, malformed is not ----------------------------------------


def _serving(
    loopback: Callable[[Handler], LoopbackServer], bodies: list[bytes]
) -> tuple[Terminal49Client, LoopbackServer, list[float]]:
    """A client of a server that answers 200 with each of ``bodies`` in turn, then OK."""
    server = loopback(lambda path, query, headers: (200, {}, bodies.pop(0) if bodies else OK))
    sleeps: list[float] = []
    client = Terminal49Client(server.base_url, "k", rate_limit_per_minute=None, sleep=sleeps.append)
    return client, server, sleeps


def test_a_body_cut_short_is_retried(loopback: Callable[[Handler], LoopbackServer]) -> None:
    client, server, sleeps = _serving(loopback, [OK[:-7], b""])
    with client:
        assert client.get_json("/containers")["meta"]["total"] == 0
    assert len(server.requests) == 3 and client.stats.retries == 2


@pytest.mark.parametrize(
    ("body", "cause"),
    [
        (b'{"data": [], "meta": {"total": NaN}}', "NaN at byte 31"),
        (b'{"data": [{"x": Infinity}]}', "Infinity at byte 16"),
        (b"[" * 2000 + b"]" * 2000, "[ at byte 1025 (depth limit exceeded)"),
        (b"<html><body>Bad gateway</body></html>", "<html><body>Bad at byte 0"),
    ],
)
def test_a_complete_body_that_cannot_be_parsed_fails_at_once_with_its_cause(
    loopback: Callable[[Handler], LoopbackServer], body: bytes, cause: str
) -> None:
    client, server, sleeps = _serving(loopback, [body])
    with client, pytest.raises(MalformedBody) as err:
        client.get_json("/containers")
    assert str(err.value).startswith("GET /containers: the API sent JSON that cannot be parsed: ")
    assert cause in str(err.value)
    assert len(server.requests) == 1 and sleeps == []
    assert isinstance(err.value, ApiError)  # not retried by a flow either


# -- small ones: a 404 under a base URL without /v2, retry lines in words --------------------


def test_a_404_under_a_base_url_without_v2_hints_at_the_path(
    loopback: Callable[[Handler], LoopbackServer],
) -> None:
    server = loopback(lambda path, query, headers: (404, {}, b"<html>Not Found</html>"))
    bare = server.base_url.removesuffix("/v2")
    with (
        Terminal49Client(bare, "k", rate_limit_per_minute=None) as client,
        pytest.raises(ApiError) as err,
    ):
        client.get_json("/containers")
    assert str(err.value) == (
        f"the API answered 404 for {bare}/containers: does the base URL end in /v2?"
    )
    with (
        Terminal49Client(server.base_url, "k", rate_limit_per_minute=None) as client,
        pytest.raises(ApiError, match="^GET /containers: 404") as err,
    ):
        client.get_json("/containers")


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (
            httpx.RemoteProtocolError("Server disconnected without sending a response."),
            "the connection dropped",
        ),
        (httpx.ReadError("[Errno 104] Connection reset by peer"), "the connection dropped"),
        (httpx.ReadTimeout("timed out"), "no answer within 60 s"),
    ],
)
def test_retry_lines_name_the_failure_in_words(
    error: Exception, words: str, caplog: pytest.LogCaptureFixture
) -> None:
    failures = [error]

    def handler(request: httpx.Request) -> httpx.Response:
        if failures:
            raise failures.pop()
        return httpx.Response(200, content=OK)

    client = Terminal49Client(
        "http://api.test/v2",
        "k",
        rate_limit_per_minute=None,
        transport=httpx.MockTransport(handler),
        sleep=lambda s: None,
    )
    with caplog.at_level(logging.WARNING, logger="freetime.client"):
        client.get_json("/containers")
    (line,) = [r.getMessage() for r in caplog.records if r.name == "freetime.client"]
    assert line.startswith(f"GET /containers: {words}, retry 1 in ")
    assert type(error).__name__ not in line
