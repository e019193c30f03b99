"""Progress of the steps that wait on the API: the seam in pipelines, the display of
`freetime run` (a bar on a terminal, a line every 10 s elsewhere)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from freetime_cli.run_cmd import StepProgress
from pipelines import progress

pytestmark = pytest.mark.fast


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, int, int | None, str]] = []
        self.done: list[str] = []

    def update(self, step: str, done: int, total: int | None, note: str = "") -> None:
        self.seen.append((step, done, total, note))

    def finish(self, step: str) -> None:
        self.done.append(step)


def test_reports_reach_the_installed_sink_only_while_it_is_installed() -> None:
    progress.report("events", 1, 2)  # nobody listening: nothing happens
    outer, inner = Recorder(), Recorder()
    with progress.showing(outer):
        progress.report("events", 1, 40, "requests")
        with progress.showing(inner):
            progress.report("load containers", 50, None, "records")
        progress.finish("events")
    progress.report("events", 2, 40)
    assert outer.seen == [("events", 1, 40, "requests")] and outer.done == ["events"]
    assert inner.seen == [("load containers", 50, None, "records")]


def test_off_a_terminal_a_line_when_a_step_starts_then_every_ten_seconds() -> None:
    buf = io.StringIO()
    bars = StepProgress(Console(file=buf, width=100))
    for i in range(1, 41):
        bars.update("events", i, 40, "requests")
    bars.finish("events")
    bars.update("events", 1, 40, "requests")  # a new run of the step says so again
    assert buf.getvalue().splitlines() == [
        "transport events (requests): 1 of 40...",
        "transport events (requests): 1 of 40...",
    ]


def test_on_a_terminal_a_bar_per_step_gone_when_the_steps_end() -> None:
    con = Console(file=io.StringIO(), width=100, force_terminal=True)
    bars = StepProgress(con)
    bars.update("load containers", 10, 500, "records")
    bars.update("events", 3, 40, "requests")
    assert bars.bars is not None and len(bars.bars.tasks) == 2
    bars.finish("load containers")
    assert bars.bars is not None and len(bars.bars.tasks) == 1
    bars.finish("events")
    assert bars.bars is None  # the display is stopped once no step waits
    bars.update("events", 1, 40, "requests")
    bars.close()  # a Ctrl+C mid-step: stopped all the same
    assert bars.bars is None
