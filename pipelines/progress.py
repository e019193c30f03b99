"""Progress of the steps that wait on the API, for whoever shows it: one seam, no display.

A step reports ``(step, done, total)`` as it goes; the command line installs a sink (a progress
bar on a terminal) for the length of a run with :func:`showing`. With no sink installed a
report costs a function call and shows nothing (a scheduled run logs its own summaries).
The sink is process-wide, not per thread: a flow's tasks run in worker threads.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Protocol


class Sink(Protocol):
    def update(self, step: str, done: int, total: int | None, note: str = "") -> None:
        """``done`` of ``total`` (None: not known yet) units of ``step``; ``note`` says what
        the step waits on or counts (e.g. ``"requests"``)."""

    def finish(self, step: str) -> None:
        """The step ended (whatever it did)."""


_lock = threading.Lock()
_sink: Sink | None = None


def report(step: str, done: int, total: int | None, note: str = "") -> None:
    """Tell the installed sink (if any) how far ``step`` is."""
    sink = _sink
    if sink is not None:
        sink.update(step, done, total, note)


def finish(step: str) -> None:
    sink = _sink
    if sink is not None:
        sink.finish(step)


@contextlib.contextmanager
def showing(sink: Sink) -> Iterator[Sink]:
    """Install ``sink`` for the block (the previous one comes back after it)."""
    global _sink
    with _lock:
        previous, _sink = _sink, sink
    try:
        yield sink
    finally:
        with _lock:
            _sink = previous
