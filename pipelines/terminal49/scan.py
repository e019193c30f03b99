"""Full list scans with reconciliation.

The API has no incremental filter and orders containers "most recently refreshed first": a
container refreshed while a client pages jumps to page 1, so an offset scan can skip it (and
see another twice). :class:`ListScan` pages the whole list concurrently, then re-reads from
page 1 until it has seen as many distinct ids as ``meta.total`` reports. Duplicates are fine
downstream (the newest fetch wins on merge); a missing record is not.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pipelines.terminal49 import settings
from pipelines.terminal49._idset import IdSet
from pipelines.terminal49.client import Terminal49Client
from pipelines.terminal49.pages import Claims, ParsedPage, parse_page


class ScanIncomplete(Exception):
    """Reconciliation could not find every record ``meta.total`` promised."""


@dataclass
class ScanStats:
    """What one scan did, for progress lines and summaries."""

    kind: str
    pages: int = 0
    records: int = 0
    distinct: int = 0
    total: int = 0
    reconcile_pages: int = 0
    seen: IdSet = field(default_factory=IdSet, repr=False)


ProgressCallback = Callable[[ScanStats], None]


def _parse_now(kind: str, claims: Claims | None, body: bytes) -> ParsedPage:
    return parse_page(body, kind, dt.datetime.now(dt.UTC), claims)


class ListScan:
    """Scan ``path`` page by page; iterate to get each page parsed and flattened.

    ``claims`` (shared by the scans of one load) skips included resources already taken.
    """

    def __init__(
        self,
        client: Terminal49Client,
        kind: str,
        path: str,
        include: str | None,
        *,
        page_size: int = settings.PAGE_SIZE,
        max_reconcile_passes: int = 3,
        on_page: ProgressCallback | None = None,
        claims: Claims | None = None,
        filters: dict[str, str] | None = None,
    ) -> None:
        self.filters = dict(filters or {})
        self.client = client
        self.path = path
        self.include = include
        self.page_size = page_size
        self.max_reconcile_passes = max_reconcile_passes
        self.on_page = on_page
        self.stats = ScanStats(kind=kind)
        self._parse = functools.partial(_parse_now, kind, claims)

    def _params(self, number: int) -> dict[str, Any]:
        params: dict[str, Any] = {"page[number]": number, "page[size]": self.page_size}
        if self.include:
            params["include"] = self.include
        return {**params, **self.filters}

    def _fetch(self, number: int) -> ParsedPage:
        return self._page(self.client.get(self.path, self._params(number), self._parse))

    def _page(self, page: ParsedPage) -> ParsedPage:
        s = self.stats
        s.pages += 1
        s.records += len(page.ids)
        s.seen.update(page.ids)
        s.distinct = len(s.seen)
        if page.total is not None:
            s.total = page.total
        if self.on_page:
            self.on_page(s)
        return page

    def __iter__(self) -> Iterator[ParsedPage]:
        first = self._fetch(1)
        yield first
        n_pages = max(1, math.ceil(self.stats.total / self.page_size)) if self.stats.total else 1
        if first.has_next or n_pages > 1:
            rest = (self._params(n) for n in range(2, n_pages + 1))
            for _, page in self.client.get_many(self.path, rest, self._parse):
                yield self._page(page)
        yield from self._reconcile()

    def _reconcile(self) -> Iterator[ParsedPage]:
        """Re-read from the front until every promised record has been seen."""
        for _ in range(self.max_reconcile_passes):
            if self.stats.distinct >= self.stats.total:
                return
            number = 1
            while self.stats.distinct < self.stats.total:
                page = self._fetch(number)
                self.stats.reconcile_pages += 1
                yield page
                if not page.ids or not page.has_next:
                    break
                number += 1
        if self.stats.distinct < self.stats.total:
            raise ScanIncomplete(
                f"{self.path}: saw {self.stats.distinct} distinct records of the "
                f"{self.stats.total} the API reports, after {self.max_reconcile_passes} "
                "reconciliation passes"
            )
