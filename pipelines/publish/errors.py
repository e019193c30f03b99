"""Errors of a write, as one line a user can act on."""

from __future__ import annotations

from pathlib import Path

import httpx

from pipelines.terminal49.client import Terminal49Error
from pipelines.terminal49.scan import ScanIncomplete


class LoadFailed(Exception):
    """The write did not complete; the warehouse holds what it held before. User-safe text."""


def locked_message(path: Path, waited: float) -> str:
    return (
        f"the warehouse {path} stayed locked by another process (an open notebook, a duckdb "
        f"shell or another load) for {waited:.0f}s"
    )


def root_cause(exc: BaseException) -> BaseException:
    """The first API error in ``exc``'s chain, else the innermost exception."""
    seen = set()
    while exc.__cause__ is not None or exc.__context__ is not None:
        if id(exc) in seen:
            break
        seen.add(id(exc))
        if isinstance(exc, Terminal49Error | ScanIncomplete):
            return exc
        nxt = exc.__cause__ or exc.__context__
        assert nxt is not None
        exc = nxt
    return exc


def describe(cause: BaseException, step: str) -> str:
    """A user-safe line for a failed step."""
    if isinstance(cause, Terminal49Error | ScanIncomplete):
        return f"load failed while reading the API: {cause}"
    if isinstance(cause, httpx.HTTPError):
        return f"load failed while reading the API: {type(cause).__name__}: {cause}"
    return f"load failed at the {step} step: {type(cause).__name__}: {cause}"


def raise_if_interrupted(cause: BaseException) -> None:
    """Ctrl+C (dlt re-raises it from inside a step) stops the writer: a KeyboardInterrupt,
    never a :class:`LoadFailed` that a flow would retry. Nothing was published."""
    if isinstance(cause, KeyboardInterrupt):
        raise KeyboardInterrupt("the load was interrupted; nothing was written") from None
