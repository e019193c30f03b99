"""The HTTP seam's connection-failure policy, through its injectable transport.

A client that never got an answer gives up after ``UNREACHABLE_ATTEMPTS`` connection failures (a
wrong base URL must not hang a load for minutes); once the API has answered, a refused
connection is a blip and gets the full retry budget.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import httpx
import pytest

from pipelines.config import ApiSettings, ConfigError
from pipelines.terminal49 import settings
from pipelines.terminal49.client import RetriesExhausted, Terminal49Client, Unreachable

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
    with pytest.raises(Unreachable, match=r"cannot reach the API at http://api.test/v2 "
                       r"\(connection refused\)") as err:
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
    client = Terminal49Client("http://api.test/v2", "k", rate_limit_per_minute=None,
                              transport=httpx.MockTransport(handler), sleep=sleeps.append)
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
