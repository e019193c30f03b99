"""Full and incremental loads against the sandbox of today's API, over real HTTP.

- a full load under the 50-a-page cap asks for no more pages than the floor;
- after changes, an incremental load (records reordering under it) equals the ground truth,
  and asks for a fraction of the full load's pages;
- a change at 23:59 UTC the day before the watermark is not missed;
- a failed incremental load does not move the watermark;
- a complete full load removes a container deleted upstream, an interrupted one removes
  nothing;
- an API that ignores the filters still gives the right warehouse.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest

from pipelines.config import ApiSettings
from pipelines.load import LoadFailed, last_load_started, run_load
from pipelines.terminal49.scan import ScanStats
from sandbox.thread import SandboxThread
from tests.test_load_sandbox import assert_equals_ground_truth

pytestmark = pytest.mark.sandbox


def _api(sb: Any) -> ApiSettings:
    return ApiSettings(base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100_000)


def _ids(db: Path, table: str) -> set[str]:
    with duckdb.connect(str(db), read_only=True) as con:
        return {r[0] for r in con.execute(f"SELECT id FROM terminal49.{table}").fetchall()}


@pytest.fixture(scope="module")
def sb() -> Any:
    with SandboxThread(
        containers=1200, seed=17, clock="2026-11-20T23:58:00Z", active_share=0.1
    ) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def first_load(sb: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, Any]:
    """The sandbox's first load (a full one), made before any test moves its clock, with its
    summary and the ground truth it was made against: copy the file to write."""
    db = tmp_path_factory.mktemp("first") / "w.duckdb"
    truth = sb.ground_truth()
    return db, run_load(db, _api(sb)), truth


def _copy(first_load: tuple[Path, Any, Any], tmp_path: Path) -> Path:
    db = tmp_path / "w.duckdb"
    shutil.copyfile(first_load[0], db)
    return db


def test_full_then_incremental_loads_equal_the_ground_truth(
    sb: Any, first_load: tuple[Path, Any, Any], tmp_path: Path
) -> None:
    db = _copy(first_load, tmp_path)
    _, full, truth = first_load
    floor = math.ceil(len(truth["containers"]) / 50) + math.ceil(len(truth["shipments"]) / 100)
    assert full.kind == "full" and full.window_from is None
    assert full.requests == floor, (full.requests, floor)
    assert_equals_ground_truth(db, truth)
    watermark = last_load_started(db)
    assert watermark is not None and watermark.isoformat().startswith("2026-11-20T23:58")

    # a minute later, at 23:59 UTC of the watermark's day, containers are refreshed...
    sb.advance(minutes=1)
    sb.refresh(count=20)
    stamps = sb.timestamps()["containers"]
    late = {cid for cid, at in stamps.items() if at["updated_at"].startswith("2026-11-20T23:59")}
    assert late
    # ...and again over the next hours, with records moving to the front while we page
    sb.advance(hours=3)
    perturbed = 0

    def on_page(stats: ScanStats) -> None:
        nonlocal perturbed
        if stats.kind == "containers" and stats.pages == 1:
            sb.advance(minutes=30)
            sb.refresh(count=40)
            perturbed += 1

    incremental = run_load(db, _api(sb), on_page=on_page)
    assert perturbed == 1
    assert incremental.kind == "incremental"
    assert str(incremental.window_from) == "2026-11-19"  # the watermark's UTC date minus one
    assert incremental.requests < full.requests / 2, (incremental.requests, full.requests)
    assert_equals_ground_truth(db, sb.ground_truth())
    with duckdb.connect(str(db), read_only=True) as con:  # the 23:59 refreshes landed
        checked = dict(
            con.execute(
                "SELECT id, strftime(terminal_checked_at AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M') "
                "FROM terminal49.containers"
            ).fetchall()
        )
    truth_checked = {
        c["id"]: (c["attributes"].get("terminal_checked_at") or "")[:16]
        for c in sb.ground_truth()["containers"]
    }
    assert {cid: checked[cid] or "" for cid in late} == {cid: truth_checked[cid] for cid in late}
    # the next incremental load's window starts from this load's day
    assert last_load_started(db) > watermark  # type: ignore[operator]


def test_a_failed_incremental_load_keeps_the_watermark(
    sb: Any, first_load: tuple[Path, Any, Any], tmp_path: Path
) -> None:
    db = _copy(first_load, tmp_path)
    before = last_load_started(db)
    sb.advance(hours=1)
    broken = ApiSettings(base_url=sb.base_url, api_key="wrong-key", rate_limit_per_minute=100_000)
    with pytest.raises(LoadFailed):
        run_load(db, broken)
    assert last_load_started(db) == before
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM terminal49.freetime_loads").fetchall() == [(1,)]


def test_a_full_load_removes_what_the_api_no_longer_lists(tmp_path: Path) -> None:
    with SandboxThread(containers=300, seed=23, clock="2026-11-20T12:00:00Z") as sb:
        db = tmp_path / "w.duckdb"
        run_load(db, _api(sb))
        gone = sb.ground_truth()["containers"][5]["id"]
        sb.delete_container(gone)
        # an interrupted full scan removes nothing
        with pytest.raises(LoadFailed):
            run_load(db, _api(sb), full=True, transport=_FailAfter(3))
        assert gone in _ids(db, "containers")
        # an incremental one neither
        assert run_load(db, _api(sb)).removed == {}
        assert gone in _ids(db, "containers")
        # a complete full scan does, with the container's holds and fees
        summary = run_load(db, _api(sb), full=True)
        assert summary.removed.get("containers") == 1
        assert gone not in _ids(db, "containers")
        with duckdb.connect(str(db), read_only=True) as con:
            left = con.execute(
                "SELECT count(*) FROM terminal49.container_fees WHERE container_id = ?", [gone]
            ).fetchall()
            # and history keeps that it happened, in that load
            removal = con.execute(
                "SELECT entity, field, old_value, new_value, how, load_id "
                "FROM terminal49.history WHERE entity_id = ? AND field = 'listed'",
                [gone],
            ).fetchall()
        assert left == [(0,)]
        assert removal == [("container", "listed", "true", "false", "full", summary.load_id)]
        assert_equals_ground_truth(db, sb.ground_truth())


class _FailAfter(httpx.HTTPTransport):
    """Real HTTP, until the ``n``-th request: then the API answers 404 for good."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.left = n

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.left -= 1
        if self.left < 0:
            return httpx.Response(404, json={"errors": [{"status": "404", "title": "Not Found"}]})
        return super().handle_request(request)


class _IgnoresFilters(httpx.HTTPTransport):
    """Real HTTP to an API that, like the live one with an unknown key, ignores every filter."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        params = [(k, v) for k, v in request.url.params.multi_items() if not k.startswith("filter")]
        request.url = request.url.copy_with(params=params)
        return super().handle_request(request)


def test_an_api_that_ignores_the_filters_still_gives_the_right_warehouse(
    sb: Any, tmp_path: Path
) -> None:
    db = tmp_path / "w.duckdb"
    run_load(db, _api(sb), transport=_IgnoresFilters())
    sb.advance(hours=6)
    summary = run_load(db, _api(sb), transport=_IgnoresFilters())
    assert summary.kind == "incremental"
    assert_equals_ground_truth(db, sb.ground_truth())
