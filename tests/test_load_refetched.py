"""A container fetched twice in one load: its newest fetch decides its holds and fees too.

Reconciliation re-reads from page 1, where a refreshed container has moved, so one load can hold
two versions of a container. The container row takes the newest (``fetched_at``); its holds and
fees must come from that same fetch, not be a mix of both.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import reference_json

from pipelines.config import ApiSettings
from pipelines.load import run_load

pytestmark = pytest.mark.fast

KEY = "refetched-secret-key-0001"
HOLD = {"name": "customs", "status": "hold", "description": "CBP hold"}
FEE = {"type": "demurrage", "amount": 150.0, "currency_code": "USD"}


def _container(cid: str, holds: list[Any], fees: list[Any]) -> dict[str, Any]:
    doc = reference_json("responses/container-with-shipment.json")
    c = copy.deepcopy(doc["data"])
    c["id"] = cid
    c["attributes"]["number"] = f"MSCU{cid[-4:]}"
    c["attributes"]["holds_at_pod_terminal"] = holds
    c["attributes"]["fees_at_pod_terminal"] = fees
    c["relationships"] = {"shipment": {"data": None}}
    return c


def _body(data: list[Any], total: int) -> bytes:
    return json.dumps(
        {"data": data, "included": [], "meta": {"total": total}, "links": {"self": "x"}}
    ).encode()


def _serve(first: list[dict[str, Any]], then: list[dict[str, Any]]):
    """Page 1 of /containers shows ``first`` once (fewer than meta.total promises), then
    ``then``: the scan must re-read it and sees the containers in both."""
    served = {"containers": 0}
    ctype = {"Content-Type": "application/vnd.api+json"}

    def handler(path: str, query: dict[str, str], headers: dict[str, str]):
        if headers.get("Authorization") != f"Token {KEY}":
            return 401, ctype, b'{"errors":[{"status":"401","title":"Unauthorized"}]}'
        if path == "/v2/containers":
            served["containers"] += 1
            page = first if served["containers"] == 1 else then
            return 200, ctype, _body(page, len(then))
        if path == "/v2/shipments":
            return 200, ctype, _body([], 0)
        return 404, {"Content-Type": "text/html"}, b"<html>not found</html>"

    return handler


def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_a_hold_cleared_between_two_fetches_in_one_load_is_gone(loopback, tmp_path: Path) -> None:
    a_then = _container("c-aaaa", [HOLD], [FEE, {**FEE, "type": "total"}])
    a_now = _container("c-aaaa", [], [FEE])
    b = _container("c-bbbb", [HOLD], [])
    server = loopback(_serve([a_then], [b, a_now]))
    db = tmp_path / "w.duckdb"

    summary = run_load(db, ApiSettings(base_url=server.base_url, api_key=KEY))

    assert summary.reconcile_pages == 1  # the container was really fetched twice
    assert _rows(db, "SELECT id FROM terminal49.containers ORDER BY id") == [
        ("c-aaaa",),
        ("c-bbbb",),
    ]
    # the newest fetch of c-aaaa has no hold and one fee: nothing of the older one is left
    assert _rows(
        db, "SELECT container_id, name FROM terminal49.container_holds ORDER BY container_id"
    ) == [("c-bbbb", "customs")]
    assert _rows(
        db,
        "SELECT container_id, type FROM terminal49.container_fees ORDER BY container_id, position",
    ) == [("c-aaaa", "demurrage")]


def test_a_hold_set_between_two_fetches_in_one_load_is_there(loopback, tmp_path: Path) -> None:
    a_then = _container("c-aaaa", [], [])
    a_now = _container("c-aaaa", [HOLD, {**HOLD, "name": "freight"}], [])
    server = loopback(_serve([a_then], [_container("c-bbbb", [], []), a_now]))
    db = tmp_path / "w.duckdb"

    run_load(db, ApiSettings(base_url=server.base_url, api_key=KEY))

    assert _rows(db, "SELECT name FROM terminal49.container_holds ORDER BY position") == [
        ("customs",),
        ("freight",),
    ]


def test_a_container_fetched_twice_in_one_load_is_one_row_of_its_newest_fetch(
    loopback, tmp_path: Path
) -> None:
    a_then = _container("c-aaaa", [], [])
    a_then["attributes"]["available_for_pickup"] = False
    a_now = _container("c-aaaa", [], [])
    a_now["attributes"]["available_for_pickup"] = True
    b = _container("c-bbbb", [], [])
    c = _container("c-cccc", [], [])
    server = loopback(_serve([a_then], [a_now, b, c]))
    db = tmp_path / "w.duckdb"

    run_load(db, ApiSettings(base_url=server.base_url, api_key=KEY))

    assert _rows(db, "SELECT id, available_for_pickup FROM terminal49.containers ORDER BY id") == [
        ("c-aaaa", True),
        ("c-bbbb", False),
        ("c-cccc", False),
    ]
