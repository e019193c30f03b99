"""History over real HTTP: a container walked through its life by loads and webhooks."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import Any

import duckdb
import httpx
import orjson
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from history_walk import CONTAINER, START, Walk, walk  # noqa: E402

from pipelines.config import ApiSettings  # noqa: E402
from pipelines.history import tracked_columns  # noqa: E402
from pipelines.load import run_load  # noqa: E402
from pipelines.webhooks.apply import apply_inbox  # noqa: E402
from pipelines.webhooks.inbox import Inbox, notification_from_doc  # noqa: E402
from pipelines.write import LoadFailed  # noqa: E402
from sandbox.testing import SandboxProcess  # noqa: E402


@pytest.fixture(scope="module")
def walked(tmp_path_factory: pytest.TempPathFactory) -> Walk:
    return walk(tmp_path_factory.mktemp("walk"))


def rows(path: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def as_text(value: Any) -> str | None:
    """A value as history writes it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(value)


def changes_of(path: Path, cid: str) -> list[tuple[Any, ...]]:
    return rows(
        path,
        "SELECT field, old_value, new_value, observed_at, how, notification_id "
        "FROM terminal49.history WHERE entity_id = ? ORDER BY observed_at, field",
        [cid],
    )


def test_each_change_is_recorded_once_in_order_with_old_and_new(walked: Walk) -> None:
    """History holds exactly the changes the warehouse went through, step by step: replaying
    the snapshots taken after each load or webhook apply gives the same list."""
    expected: list[tuple[str, str | None, str | None, dt.datetime]] = []
    previous: dict[str, str | None] = {}
    for (at, _how), snap in zip(walked.steps, walked.snapshots, strict=True):
        values = {c: as_text(snap[c]) for c in tracked_columns("containers", snap)}
        values.update({f"hold:{n}": s for n, s in snap["holds"]})
        for name in sorted(set(values) | {k for k in previous if k.startswith("hold:")}):
            old, new = previous.get(name), values.get(name)
            if old != new:
                expected.append((name, old, new, at))
        previous = values
    got = [
        (f, o, n, at)
        for f, o, n, at, _, _ in changes_of(walked.duckdb_path, CONTAINER)
        if not f.startswith("fee:")
    ]
    # observed_at is the API's clock when the row was read: within seconds of the step's clock
    assert [(f, o, n) for f, o, n, _ in got] == [(f, o, n) for f, o, n, _ in expected]
    for (_, _, _, seen), (_, _, _, step) in zip(got, expected, strict=True):
        assert step <= seen < step + dt.timedelta(minutes=5)


def test_the_life_of_the_container_reads_as_it_happened(walked: Walk) -> None:
    changes = changes_of(walked.duckdb_path, CONTAINER)
    by_field: dict[str, list[tuple[Any, ...]]] = {}
    for c in changes:
        by_field.setdefault(c[0], []).append(c)
    statuses = [(o, n) for _, o, n, *_ in by_field["current_status"]]
    assert statuses == [
        (None, "on_ship"),
        ("on_ship", "not_available"),
        ("not_available", "available"),
        ("available", "picked_up"),
        ("picked_up", "dropped"),
        ("dropped", "empty_returned"),
    ]
    # first version: what the full load found, old value NULL
    seen, how = by_field["current_status"][0][3:5]
    assert how == "full" and START <= seen < START + dt.timedelta(minutes=5)
    assert [(o, n) for _, o, n, *_ in by_field["hold:customs"]] == [(None, "hold"), ("hold", None)]
    # the terminal moved the LFD one day earlier (Los Angeles: local midnight is 08:00 UTC)
    lfd = [(o, n) for _, o, n, *_ in by_field["pickup_lfd_terminal"]]
    assert [(o and o[:10], n and n[:10]) for o, n in lfd] == [
        (None, "2030-01-11"),
        ("2030-01-11", "2030-01-10"),
    ]
    assert [n for _, _, n, *_ in by_field["pod_discharged_at"]] == ["2030-01-07T19:36:00Z"]
    assert [n for _, _, n, *_ in by_field["pod_full_out_at"]] == ["2030-01-16T20:05:00Z"]
    assert [n for _, _, n, *_ in by_field["empty_terminated_at"]] == ["2030-01-26T12:11:00Z"]
    # how: each webhook row names a notification the warehouse keeps; loads name none
    notified = {r[0] for r in rows(walked.duckdb_path,
                                   "SELECT id FROM terminal49.webhook_notifications")}
    for _, _, _, _, how, nid in changes:
        assert how in ("full", "incremental", "webhook")
        assert (nid is not None) == (how == "webhook")
        assert nid is None or nid in notified
    assert {c[4] for c in changes} == {"full", "incremental", "webhook"}


def test_shipment_etas_are_tracked(walked: Walk) -> None:
    etas = rows(
        walked.duckdb_path,
        "SELECT field, old_value, new_value FROM terminal49.history h "
        "JOIN terminal49.containers c ON c.shipment_id = h.entity_id "
        "WHERE h.entity = 'shipment' AND c.id = ? ORDER BY observed_at",
        [CONTAINER],
    )
    fields = [f for f, _, _ in etas]
    assert "pod_eta_at" in fields and "pod_ata_at" in fields
    assert etas[0][1] is None


def test_webhooks_applied_again_add_nothing(walked: Walk, tmp_path: Path) -> None:
    count = "SELECT count(*) FROM terminal49.history"
    before = rows(walked.duckdb_path, count)
    inbox_path = tmp_path / "again.sqlite"
    with Inbox(inbox_path) as inbox:
        for received, bodies in walked.bodies:  # redelivered: stamped as first received
            inbox.add_many(
                [notification_from_doc(orjson.loads(b), b) for b in bodies], received_at=received
            )
    summary = apply_inbox(walked.duckdb_path, inbox_path)
    assert summary.notifications == sum(len(b) for _, b in walked.bodies) > 0
    assert rows(walked.duckdb_path, count) == before


class FailAfter(httpx.BaseTransport):
    """Real HTTP until ``n`` requests were sent, then a dropped connection."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.n -= 1
        if self.n < 0:
            raise httpx.ConnectError("dropped", request=request)
        return self.inner.handle_request(request)


def test_repeated_and_failed_loads_add_nothing(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    count = "SELECT count(*) FROM terminal49.history"
    with SandboxProcess(containers=40, seed=7, clock="2030-03-01T00:00:00Z") as sb:
        api = ApiSettings.resolve(
            base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100_000
        )
        run_load(path, api, full=True)
        first = rows(path, count)[0][0]
        assert first > 0
        run_load(path, api, full=True)
        run_load(path, api)
        assert rows(path, count)[0][0] == first
        changed = sb.advance(hours=72)["changed_containers"]
        assert changed
        with pytest.raises(LoadFailed):
            run_load(path, api, full=True, transport=FailAfter(1), max_attempts=1)
        assert rows(path, count)[0][0] == first
        run_load(path, api, full=True)
    after = rows(path, count)[0][0]
    assert after > first
    kinds = rows(path, "SELECT DISTINCT how FROM terminal49.history ORDER BY 1")
    assert kinds == [("full",)]
    # every change joins a published load
    orphans = rows(path, "SELECT count(*) FROM terminal49.history WHERE load_id NOT IN "
                         "(SELECT load_id FROM terminal49.freetime_loads)")
    assert orphans == [(0,)]
