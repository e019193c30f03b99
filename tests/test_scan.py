"""List scans over real HTTP against crafted list pages (``LoopbackServer``).

The API caps ``page[size]`` silently and its counts can be wrong: a scan pages by the size the
answers show, follows ``links.next`` past a count that is too small or missing, never ends
with fewer records than were served, and lets the last copy of a record sent twice win whole.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import duckdb
import orjson
import pytest
from conftest import Handler, LoopbackServer

from pipelines.config import ApiSettings
from pipelines.load import run_load
from pipelines.terminal49.client import MalformedBody, Terminal49Client
from pipelines.terminal49.scan import ListScan, ScanStats

pytestmark = pytest.mark.fast

MISSING = object()


def _container(n: int, number: str | None = None, holds: list[str] | None = None) -> Any:
    holds_rows = [{"name": h, "status": "hold", "description": None} for h in holds or []]
    return {
        "id": f"c{n}",
        "type": "container",
        "attributes": {"number": number or f"TEST{n:07d}", "holds_at_pod_terminal": holds_rows},
        "relationships": {},
    }


class FakeList:
    """A JSON:API list endpoint over ``records``, ``page[size]`` capped at ``cap``.

    ``size_shows_in``: "meta" (``meta.size``, as shipments), "links" (``page[size]`` of
    ``links.current``/``links.last`` only, as containers) or "length" (only ``links.next``:
    the page's length is all there is). ``total`` replaces ``meta.total`` (MISSING drops it).
    """

    def __init__(
        self,
        records: list[Any],
        cap: int,
        *,
        size_shows_in: str = "links",
        total: Any = None,
        last_link: bool = True,
    ) -> None:
        self.records = records
        self.cap = cap
        self.size_shows_in = size_shows_in
        self.total = total
        self.last_link = last_link
        #: called with the page number once a page is served (to move records meanwhile)
        self.after: Callable[[int], None] = lambda number: None

    def __call__(self, path: str, query: dict[str, str], headers: dict[str, str]) -> Any:
        number = int(query.get("page[number]", 1))
        size = min(int(query.get("page[size]", 30)), self.cap)
        items = self.records[(number - 1) * size : number * size]
        pages = max(1, math.ceil(len(self.records) / size))

        def link(n: int) -> str:
            return (
                "http://api.test/v2"
                + path
                + "?"
                + urlencode({"page[number]": n, "page[size]": size})
            )

        links: dict[str, Any] = {"self": link(number)}
        if self.size_shows_in != "length":
            links["current"] = link(number)
        if number < pages:
            links["next"] = link(number + 1)
        if self.last_link and self.size_shows_in != "length" and pages > 1:
            links["last"] = link(pages)
        meta: dict[str, Any] = {"total": len(self.records)}
        if self.total is MISSING:
            del meta["total"]
        elif self.total is not None:
            meta["total"] = self.total
        if self.size_shows_in == "meta":
            meta["size"] = size
        body = orjson.dumps({"data": items, "links": links, "meta": meta})
        self.after(number)
        return 200, {"Content-Type": "application/vnd.api+json"}, body


def _scan(
    loopback: Callable[[Handler], LoopbackServer], fake: FakeList, **options: Any
) -> tuple[ListScan, list[str], LoopbackServer]:
    server = loopback(fake)
    client = Terminal49Client(server.base_url, "k", rate_limit_per_minute=None)
    try:
        scan = ListScan(client, "containers", "/containers", None, **options)
        ids = [i for page in scan for i in page.ids]
    finally:
        client.close()
    return scan, ids, server


@pytest.mark.parametrize(("cap", "shows_in"), [(50, "links"), (50, "length"), (100, "meta")])
def test_a_capped_page_size_costs_one_request_a_page(
    loopback: Callable[[Handler], LoopbackServer], cap: int, shows_in: str
) -> None:
    records = [_container(n) for n in range(237)]
    scan, ids, server = _scan(loopback, FakeList(records, cap, size_shows_in=shows_in))
    assert sorted(ids) == sorted(r["id"] for r in records)
    assert len(server.requests) == math.ceil(237 / cap)
    assert all("page%5Bsize%5D=100" in r for r in server.requests)  # asks the most, is capped
    assert scan.stats.warnings == [] and scan.stats.reconcile_pages == 0


@pytest.mark.parametrize("last_link", [True, False])
@pytest.mark.parametrize("total", [100, MISSING, "250"], ids=["smaller", "missing", "string"])
def test_a_count_that_lies_does_not_truncate_the_scan(
    loopback: Callable[[Handler], LoopbackServer], total: Any, last_link: bool
) -> None:
    records = [_container(n) for n in range(250)]
    fake = FakeList(records, 100, total=total, last_link=last_link)
    scan, ids, _ = _scan(loopback, fake)
    assert sorted(ids) == sorted(r["id"] for r in records)
    if total == 100:
        assert scan.stats.warnings == [
            "/containers: the API reported 100 records (meta.total) but served 250; "
            "all 250 were loaded"
        ]
    elif total is MISSING:
        assert scan.stats.warnings == [
            "/containers: the API sent no record count (meta.total); "
            "250 records were served and loaded"
        ]
    else:
        assert scan.stats.warnings == [] and scan.stats.total == 250


def test_a_list_that_never_ends_stops_when_pages_bring_nothing_new(
    loopback: Callable[[Handler], LoopbackServer],
) -> None:
    page = orjson.dumps(
        {
            "data": [_container(n) for n in range(3)],
            "links": {"next": "http://api.test/v2/containers?page%5Bnumber%5D=2"},
            "meta": {"total": 1},
        }
    )
    server = loopback(lambda path, query, headers: (200, {}, page))
    client = Terminal49Client(server.base_url, "k", rate_limit_per_minute=None)
    scan = ListScan(client, "containers", "/containers", None)
    assert {i for p in scan for i in p.ids} == {"c0", "c1", "c2"}
    client.close()
    assert len(server.requests) <= 1 + client.concurrency


def test_filters_go_with_every_page_reconciliation_included(
    loopback: Callable[[Handler], LoopbackServer],
) -> None:
    records = [_container(n) for n in range(120)]
    fake = FakeList(records, 50)

    def refresh(number: int) -> None:
        # c99 is refreshed once page 1 has been served: it moves to the front, and pages 2
        # and 3 (offsets 50-119) no longer hold it
        if number == 1 and records[0]["id"] != "c99":
            records.insert(0, records.pop(99))

    fake.after = refresh
    filters = {
        "updated_at": [">=2026-11-23", "<=2026-11-30"],
        "created_at": ">=2026-11-23T00:00:00Z",
    }
    scan, ids, server = _scan(loopback, fake, filters=filters)
    assert set(ids) == {f"c{n}" for n in range(120)}
    assert scan.stats.reconcile_pages >= 1 and scan.stats.distinct == 120
    assert len(server.requests) == 3 + scan.stats.reconcile_pages
    for request in server.requests:
        query = parse_qs(urlsplit(request).query)
        assert query["filter[updated_at][]"] == [">=2026-11-23", "<=2026-11-30"]
        assert query["filter[created_at]"] == [">=2026-11-23T00:00:00Z"]
        assert "filter[updated_at]" not in query


def test_a_record_sent_twice_on_a_page_loads_whole_from_its_last_copy(
    loopback: Callable[[Handler], LoopbackServer], tmp_path: Path
) -> None:
    records = [
        _container(1, "FIRST000001", ["customs"]),
        _container(2),
        _container(1, "LAST0000001", ["freight", "usda"]),
    ]
    containers = FakeList(records, 50, total=2)

    def api(path: str, query: dict[str, str], headers: dict[str, str]) -> Any:
        if path.endswith("/shipments"):
            return 200, {}, b'{"data": [], "meta": {"total": 0}}'
        return containers(path, query, headers)

    server = loopback(api)
    progress: dict[str, ScanStats] = {}
    db = tmp_path / "freetime.duckdb"
    run_load(
        db,
        ApiSettings(base_url=server.base_url, api_key="k", rate_limit_per_minute=100_000),
        on_page=lambda s: progress.__setitem__(s.kind, s),
    )
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT id, number FROM terminal49.containers ORDER BY id").fetchall()
        holds = con.execute(
            "SELECT name FROM terminal49.container_holds WHERE container_id = 'c1' "
            "ORDER BY position"
        ).fetchall()
    finally:
        con.close()
    assert rows == [("c1", "LAST0000001"), ("c2", "TEST0000002")]
    assert holds == [("freight",), ("usda",)]
    assert progress["containers"].warnings == [
        "/containers: 1 records came twice on one page; the last copy of each was loaded"
    ]


def test_a_page_that_is_not_json_api_fails_at_once(
    loopback: Callable[[Handler], LoopbackServer],
) -> None:
    server = loopback(lambda path, query, headers: (200, {}, b'{"errors": []}'))
    with (
        Terminal49Client(server.base_url, "k", rate_limit_per_minute=None) as client,
        pytest.raises(MalformedBody, match="not a JSON:API document"),
    ):
        list(ListScan(client, "containers", "/containers", None))
    assert len(server.requests) == 1


class RefreshingList(FakeList):
    """The live API's container list: most recently refreshed first, and about one list
    request in seven sees a container refreshed meanwhile (it moves to the front). ``served``
    holds the ids of each page in the order the pages were served."""

    def __init__(self, count: int, seed: int) -> None:
        super().__init__([_container(n) for n in range(count)], 50)
        self.ids = {r["id"] for r in self.records}
        self.served: list[set[str]] = []
        self.moved = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def __call__(self, path: str, query: dict[str, str], headers: dict[str, str]) -> Any:
        with self._lock:
            status, head, body = super().__call__(path, query, headers)
            self.served.append({r["id"] for r in orjson.loads(body)["data"]})
            if self._rng.random() < 1 / 7:
                self.records.insert(0, self.records.pop(self._rng.randrange(len(self.records))))
                self.moved += 1
        return status, head, body


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reconciliation_reads_one_front_page_for_a_few_refreshed_records(
    loopback: Callable[[Handler], LoopbackServer], seed: int
) -> None:
    # pages one at a time: only a refresh can hide a record, and it moves it to page 1
    fake = RefreshingList(3000, seed)
    server = loopback(fake)
    with Terminal49Client(
        server.base_url, "k", rate_limit_per_minute=None, concurrency=1
    ) as client:
        scan = ListScan(client, "containers", "/containers", None)
        ids = {i for page in scan for i in page.ids}
    assert ids == fake.ids
    assert len(server.requests) <= 60 + math.ceil(fake.moved / 50)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_reconciliation_stops_at_the_page_that_brings_the_last_missing_record(
    loopback: Callable[[Handler], LoopbackServer], seed: int
) -> None:
    # pages four at a time: a refresh can also push a record onto a page already served
    fake = RefreshingList(3000, seed)
    scan, ids, _ = _scan(loopback, fake)
    assert set(ids) == fake.ids
    if scan.stats.reconcile_pages:
        assert fake.served[-1] - set().union(*fake.served[:-1])
