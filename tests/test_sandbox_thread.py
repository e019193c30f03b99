"""The sandbox on a thread (``sandbox.thread.SandboxThread``): the same options and defaults as
``sandbox serve``, a real socket, a clean stop."""

from __future__ import annotations

import dataclasses
import inspect
import os
import socket
import threading
from typing import Any

import httpx
import pytest

from sandbox.cli import parse_args
from sandbox.faults import FaultSpec
from sandbox.handle import SandboxHandle, SandboxStartError
from sandbox.model import Account
from sandbox.state import SandboxState
from sandbox.thread import SandboxThread

CLOCK = "2026-11-20T12:00:00Z"


def _default(cls: Any, name: str) -> Any:
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


@pytest.mark.fast
def test_state_and_account_defaults_are_serve_defaults() -> None:
    """Anything built with SandboxState's or Account.generate's own defaults (in-process tests,
    benchmarks) gets what ``sandbox serve`` runs with when the option is not given."""
    serve = parse_args([])
    expected = {
        "rate_limit": serve.rate_limit,
        "rate_window": serve.rate_window_seconds,
        "faults": FaultSpec.parse(serve.faults),
        "advance_every": serve.advance_every,
        "advance_step": round(serve.advance_step_hours * 3600),
        "webhook_backoff": serve.webhook_backoff_seconds,
        "webhook_max_retries": serve.webhook_max_retries,
        "webhook_timeout": serve.webhook_timeout_seconds,
        "webhook_concurrency": serve.webhook_concurrency,
        "document_delay": serve.document_delay_seconds,
        "email_documents": serve.email_documents,
        "emails_per_day": serve.emails_per_day,
    }
    given = {"account", "api_key"}  # no default: always passed
    counters = {"requests", "fault_counter", "by_status", "fault_counts", "windows", "filtered"}
    options = {f.name for f in dataclasses.fields(SandboxState) if f.init} - given - counters
    assert options == set(expected), "a SandboxState option this test does not compare"
    for name, value in expected.items():
        assert _default(SandboxState, name) == value, name
    generate = inspect.signature(Account.generate).parameters
    assert generate["active_share"].default == serve.active_share
    assert generate["pod_deadlines"].default == serve.pod_deadlines


@pytest.mark.fast
def test_handle_defaults_are_serve_defaults() -> None:
    handle = inspect.signature(SandboxHandle.__init__).parameters
    serve = parse_args([])
    for name in ("containers", "seed", "rate_limit", "api_key", "host"):
        assert handle[name].default == getattr(serve, name), name
    # Options the handle leaves out of the command line unless given: serve's defaults apply.
    for name in ("faults", "clock", "webhook_backoff", "document_delay", "active_share"):
        assert handle[name].default is None, name
    assert parse_args(SandboxHandle().serve_args()) == dataclasses.replace(serve, port=0)


@pytest.mark.fast
def test_a_bad_option_raises_serves_message() -> None:
    with pytest.raises(SandboxStartError, match="invalid --faults"):
        SandboxThread(faults="bogus=0.1").start()
    with pytest.raises(SandboxStartError, match="--webhook-max-retries"):
        SandboxThread(extra_args=["--webhook-max-retries", "-1"]).start()
    with pytest.raises(SandboxStartError, match="invalid --clock"):
        SandboxThread(clock="yesterday").start()


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()


@pytest.mark.sandbox
def test_serves_over_a_real_socket_and_stops_cleanly() -> None:
    before_threads = set(threading.enumerate())
    before_fds = _fds()
    sb = SandboxThread(containers=30, seed=3, clock=CLOCK, extra_args=["--no-pod-deadlines"])
    with sb:
        assert sb.base_url.startswith("http://127.0.0.1:") and not sb.base_url.endswith(":0/v2")
        assert sb.thread is not None and sb.thread.daemon and sb.thread.is_alive()
        r = httpx.get(f"{sb.base_url}/containers", headers={"Authorization": f"Token {sb.api_key}"})
        assert r.status_code == 200 and r.json()["meta"]["total"] == 30
        assert sb.clock() == CLOCK
        port = int(sb.base_url.rsplit(":", 1)[1].split("/")[0])
    assert not sb.thread.is_alive()
    assert set(threading.enumerate()) <= before_threads
    assert _fds() <= before_fds  # the listening socket and every connection closed
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 2):
        pass
    sb.stop()  # twice is fine
