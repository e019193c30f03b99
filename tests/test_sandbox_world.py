"""In-process checks of the world model: determinism, change points, advance and refresh."""

from __future__ import annotations

import orjson
import pytest

from sandbox import world as W
from sandbox.model import Account
from sandbox.render import Renderer

pytestmark = pytest.mark.fast

CLOCK = 1795176000  # 2026-11-20T12:00:00Z


def _render_all(acct: Account) -> dict[str, bytes]:
    r = Renderer(acct)
    return {
        acct.container_ids[i]: orjson.dumps(r.container(i)) for i in range(len(acct.container_ids))
    }


def test_generation_is_deterministic() -> None:
    a, b = Account.generate(300, 9, CLOCK), Account.generate(300, 9, CLOCK)
    assert a.containers.data == b.containers.data and a.container_ids == b.container_ids
    assert _render_all(a) == _render_all(b)
    assert Account.generate(300, 10, CLOCK).container_ids != a.container_ids


def test_render_only_changes_at_change_points() -> None:
    acct = Account.generate(200, 4, CLOCK)
    r = Renderer(acct)
    for i in range(0, 200, 3):
        row = acct.crow(i)
        pts = [p for p in W.change_points(row) if CLOCK - 60 * W.DAY < p < CLOCK + 60 * W.DAY]
        for p, q in zip(pts, pts[1:], strict=False):
            if q - p < 2:
                continue
            acct.clock = p
            at_p = r.container(i)
            acct.clock = q - 1
            assert r.container(i) == at_p, (i, p, q)
    acct.clock = CLOCK


def test_advance_refreshes_exactly_the_changed_containers() -> None:
    acct = Account.generate(400, 6, CLOCK)
    before = _render_all(acct)
    changed, new = acct.advance(36 * 3600)
    after = _render_all(acct)
    really = {k for k in before if before[k] != after[k]}
    assert really and len(really) <= changed
    front = set(acct.container_ids[i] for i in acct.order[: changed + new])
    assert really <= front
    assert len(after) == len(before) + new


def test_refresh_moves_chosen_containers_to_front() -> None:
    acct = Account.generate(100, 6, CLOCK)
    acct.clock += 3600
    chosen = acct.refresh(10)
    assert sorted(acct.order[:10]) == chosen
    assert all(acct.containers.get(i, "refreshed") == acct.clock for i in chosen)


def test_lfd_local_midnight_across_dst() -> None:
    # 2026-11-01: US DST ends. LFD dates either side encode at 04:00Z and 05:00Z in New York.
    ny = "America/New_York"
    before = W.lfd_after(CLOCK - 25 * W.DAY, 0, ny)  # 2026-10-26
    after = W.lfd_after(CLOCK, 0, ny)  # 2026-11-20
    assert before % W.DAY == 4 * 3600 and after % W.DAY == 5 * 3600
