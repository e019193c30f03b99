"""The transport events step keeps to its per-run request budget and goes round the
containers at risk across runs (real sandbox, real warehouse)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from pipelines.analytics import publish_risk
from pipelines.config import ApiSettings
from pipelines.history.transport_events import (
    REQUEST_BUDGET,
    containers_needing_events,
    fetch_transport_events,
)
from pipelines.load import run_load
from pipelines.terminal49.client import Terminal49Client
from sandbox.thread import SandboxThread

CLOCK = "2026-11-20T12:00:00Z"


def test_events_keep_to_the_budget_and_rotate(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    with SandboxThread(containers=200, seed=11, clock=CLOCK) as sb:
        api = ApiSettings(base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100_000)
        run_load(path, api, full=True)
        publish_risk(path, as_of=datetime.fromisoformat(CLOCK.replace("Z", "+00:00")))
        needing = containers_needing_events(path)
        assert len(needing) > 2 * 7  # enough at risk for three runs of 7
        assert containers_needing_events(path, 7) == needing[:7]
        assert 0 < REQUEST_BUDGET <= 60  # the budget docs/scheduling.md states: 40
        with Terminal49Client(api.base_url, api.api_key or "", rate_limit_per_minute=None) as c:
            asked: list[list[str]] = []
            seen: list[tuple[int, int]] = []
            for _ in range(3):
                before = containers_needing_events(path)
                sb.reset_stats()
                s = fetch_transport_events(
                    path, c, max_containers=7, on_request=lambda d, t: seen.append((d, t))
                )
                assert s.requests == s.containers == 7 == sb.stats()["requests"]
                assert s.deferred == len(before) - 7
                asked.append(before[:7])
        # three runs, three different sets: the rotation reaches the containers left over
        assert len({cid for run in asked for cid in run}) == 21
        assert seen[:7] == [(i, 7) for i in range(1, 8)]  # progress after each request
