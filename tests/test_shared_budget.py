"""One budget for the key: writers of a warehouse pace through one shared window.

- two full loads at once, as separate processes, against a sandbox that allows 40 requests a
  window (6 s here, the API's minute in the other tests), draw no 429 between them, and say how
  long they waited for the budget;
- the shared window itself: processes together never exceed the limit, and a yielding sender
  (the full scan) leaves room to the others.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.terminal49._ratelimit import SharedWindowLimiter, budget_file
from sandbox.thread import SandboxThread
from tests.test_load_sandbox import assert_equals_ground_truth

REPO = Path(__file__).resolve().parents[1]
CLOCK = "2026-11-20T12:00:00Z"


#: the same rule (a rolling window, its budget shared, Retry-After honoured) in a tenth of the
#: time: a 6 s window on both sides, the sandbox's and the client's (the API's is 60 s)
WINDOW_S = 6
LIMIT = 40


def test_two_loads_at_once_against_the_limit_draw_no_429(tmp_path: Path) -> None:
    with SandboxThread(
        containers=1000, seed=41, clock=CLOCK, rate_limit=LIMIT, rate_window=WINDOW_S
    ) as sb:
        db = tmp_path / "w.duckdb"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERMINAL49_")}
        env["TERMINAL49_API_KEY"] = sb.api_key
        env["TERMINAL49_RATE_LIMIT"] = str(LIMIT)
        env["TERMINAL49_RATE_WINDOW_SECONDS"] = str(WINDOW_S)
        args = [sys.executable, "-m", "freetime_cli.main", "load", "--full"]
        args += ["--duckdb", str(db), "--base-url", sb.base_url]
        procs = [
            subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=600)[0] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        stats = sb.stats()
        assert stats["requests"] > LIMIT  # together they needed more than a window's budget
        assert "429" not in stats["by_status"], stats
        # "..., 1.3s waited for the key's budget, 7.1s" (the console may wrap the line)
        said = r"([\d.]+)s\s+waited\s+for\s+the\s+key's\s+budget,\s+([\d.]+)s"
        found = [re.search(said, o) for o in outs]
        assert all(found), outs
        waited = [(float(m[1]), float(m[2])) for m in found if m]
        # one of them waited for the other's share (a sixth of the window, as 10 s of 60)
        assert max(w for w, _ in waited) > WINDOW_S / 6, outs
        assert all(w <= total for w, total in waited), outs  # wall time, not thread-seconds
        assert_equals_ground_truth(db, sb.ground_truth())


@pytest.mark.fast
def test_a_shared_window_holds_every_sender_and_the_full_scan_yields(tmp_path: Path) -> None:
    now = [1000.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    path = budget_file(tmp_path, "http://api/v2", "secret-key")
    assert "secret-key" not in path.name

    def limiter(yielding: bool) -> SharedWindowLimiter:
        return SharedWindowLimiter(
            path, 8, 60.0, 0.0, yielding=yielding, clock=lambda: now[0], sleep=sleep
        )

    scan, sync = limiter(True), limiter(False)
    for _ in range(6):  # alone, the full scan may use the whole window, evenly spaced
        scan.acquire()
    assert slept == [pytest.approx(7.5)] * 5  # 60 s / 8
    sync.acquire()  # the sync sends: for a while the scan keeps a quarter free for it
    paced = scan.waited_s
    scan.acquire()  # 7 > 8 - 8 // 4: the scan waits until the sync has been quiet 10 s
    assert scan.waited_s - paced == pytest.approx(10.05, abs=0.01)
    sync.acquire()
    sync.acquire()  # the window is full (8): the sync waits for the first sends to expire
    assert sync.waited_s > 0
    sent = json.loads(path.read_text())["sent"]
    assert all(len([u for u in sent if t - 60 < u <= t]) <= 8 for t in sent)


@pytest.mark.fast
def test_the_full_scan_sends_nothing_while_another_writer_waits_for_the_window(
    tmp_path: Path,
) -> None:
    now = [1000.0]
    path = budget_file(tmp_path, "http://api/v2", "secret-key")

    class ScanWaits(Exception):
        pass

    def scan_sleep(seconds: float) -> None:
        raise ScanWaits

    scan = SharedWindowLimiter(
        path, 8, 60.0, 0.0, yielding=True, clock=lambda: now[0], sleep=scan_sleep
    )
    seen: list[str] = []

    def sync_sleep(seconds: float) -> None:
        assert len(seen) < 3, seen  # a scan that takes every freed slot would starve the sync
        now[0] += seconds  # a slot of the window frees: the scan asks for it first
        try:
            scan.acquire()
            seen.append("scan sent")
        except ScanWaits:
            seen.append("scan waited")

    sync = SharedWindowLimiter(path, 8, 60.0, 0.0, clock=lambda: now[0], sleep=sync_sleep)
    for _ in range(8):  # alone, the full scan fills the window (a tenth of 8 is none)
        scan.acquire()
        now[0] += 7.5  # its pace: 60 s / 8
    now[0] = 1055.0  # the window holds 8 sends until 1060
    sync.acquire()  # the window is full: the sync waits for its first slot
    assert seen == ["scan waited"]  # the slot that freed went to the waiting sync
    sent = json.loads(path.read_text())["sent"]
    assert sent[-1] == now[0] and len(sent) == 8
