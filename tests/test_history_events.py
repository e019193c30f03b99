"""Transport events from the API, only for the containers that need them (real sandbox)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from pipelines.config import ApiSettings
from pipelines.history.transport_events import containers_needing_events, fetch_transport_events
from pipelines.load import run_load
from pipelines.terminal49.client import Terminal49Client
from sandbox.thread import SandboxThread

pytestmark = pytest.mark.sandbox


def rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_events_are_asked_for_changed_containers_only(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    with SandboxThread(containers=60, seed=11, clock="2030-05-01T00:00:00Z") as sb:
        api = ApiSettings.resolve(
            base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100_000
        )
        client = Terminal49Client(api.base_url, api.api_key or "", rate_limit_per_minute=None)
        with client:
            run_load(path, api, full=True)
            # a first sighting is no change: nothing to ask for
            assert containers_needing_events(path) == []
            assert fetch_transport_events(path, client).requests == 0
            sb.advance(hours=96)
            run_load(path, api)
            changed = {
                r[0]
                for r in rows(
                    path,
                    "SELECT DISTINCT entity_id FROM terminal49.history "
                    "WHERE field = 'current_status' AND old_value IS NOT NULL",
                )
            }
            assert changed
            sb.reset_stats()
            summary = fetch_transport_events(path, client)
            asked = set(containers_needing_events(path, 10_000))
            assert summary.requests == summary.containers >= len(changed)
            assert summary.containers < 60  # never the whole account
            assert sb.stats()["requests"] == summary.requests
            # the warehouse holds exactly what the API lists for each container asked for
            truth: dict[str, set[tuple[str, Any]]] = {}
            stored = rows(
                path,
                "SELECT container_id, id, invalidated_at IS NOT NULL "
                "FROM terminal49.transport_events",
            )
            for cid in changed:
                doc = client.get_json(f"/containers/{cid}/transport_events")
                truth[cid] = {
                    (e["id"], e["attributes"]["invalidated_at"] is not None) for e in doc["data"]
                }
            got: dict[str, set[tuple[str, Any]]] = {}
            for cid, eid, inv in stored:
                got.setdefault(cid, set()).add((eid, inv))
            assert {c: got.get(c, set()) for c in changed} == truth
            # nothing changed since: the next run asks for nothing
            assert asked == set()
            assert fetch_transport_events(path, client).requests == 0


def test_events_are_asked_for_the_containers_at_risk(tmp_path: Path) -> None:
    from datetime import datetime

    from pipelines.analytics import AT_RISK_LEVELS, publish_risk

    path = tmp_path / "w.duckdb"
    clock = "2026-11-20T12:00:00Z"
    with SandboxThread(containers=200, seed=11, clock=clock) as sb:
        run_load(
            path,
            ApiSettings(base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100_000),
            full=True,
        )
    publish_risk(path, as_of=datetime.fromisoformat(clock.replace("Z", "+00:00")))
    levels = ", ".join(f"'{x}'" for x in AT_RISK_LEVELS)
    at_risk = {
        r[0]
        for r in rows(
            path,
            f"SELECT container_id FROM analytics.demurrage_risk WHERE risk_level IN ({levels})",
        )
    }
    assert at_risk  # the account has boxes at risk at that moment
    assert set(containers_needing_events(path, 10_000)) == at_risk
