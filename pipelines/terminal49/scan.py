"""Full list scans with reconciliation, paged by the size the API answers.

The API caps ``page[size]`` silently (containers at 50, shipments at 100) and says so only in
its answer: :class:`ListScan` asks for :data:`.settings.PAGE_SIZE`, takes the size in effect
from the first page (``meta.size``, else ``page[size]`` of its links, and the page's length)
and fetches the remaining pages concurrently. A list longer than ``meta.total`` promised (a
count that is too small, missing or not a number) is followed page by page while ``links.next``
is present and pages are full: a scan never ends with fewer records than the API served, and
says when the count and the pages disagree (:attr:`ScanStats.warnings`).

Containers are ordered "most recently refreshed first": a container refreshed while a client
pages jumps to page 1, so an offset scan can skip it (and see another twice). After the pass,
the scan re-reads from page 1 until it has seen as many distinct ids as ``meta.total``
reports, asking at a time only for the front pages the missing records can fill. Duplicates
are fine downstream (the newest fetch wins on merge); a missing record is not.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipelines.terminal49 import settings
from pipelines.terminal49.client import Terminal49Client
from pipelines.terminal49.pages import Claims, ParsedPage, parse_page

log = logging.getLogger("freetime.scan")

Filters = Mapping[str, str | Sequence[str]]


class ScanIncomplete(Exception):
    """Reconciliation could not find every record ``meta.total`` promised."""


@dataclass
class ScanStats:
    """What one scan did, for progress lines and summaries.

    ``total`` is the latest ``meta.total`` the API reported (0 while it reported none);
    ``warnings`` are one-line findings for the load summary (a count the pages contradict,
    records sent twice on a page).
    """

    kind: str
    pages: int = 0
    records: int = 0
    distinct: int = 0
    total: int = 0
    reconcile_pages: int = 0
    warnings: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set, repr=False)


ProgressCallback = Callable[[ScanStats], None]


def _parse_now(kind: str, claims: Claims | None, body: bytes) -> ParsedPage:
    return parse_page(body, kind, dt.datetime.now(dt.UTC), claims)


def filter_params(filters: Filters | None) -> dict[str, str | list[str]]:
    """Query parameters of list filters: ``{"created_at": ">=2026-11-23T00:00:00Z"}`` is sent as
    ``filter[created_at]=...``, a sequence ``{"updated_at": [">=2026-11-23"]}`` as the repeated
    key ``filter[updated_at][]=...``. A key already written ``filter[...]`` is kept as is.
    """
    params: dict[str, str | list[str]] = {}
    for name, value in (filters or {}).items():
        key = name if name.startswith("filter[") else f"filter[{name}]"
        if isinstance(value, str):
            params[key] = value
        else:
            params[key if key.endswith("[]") else f"{key}[]"] = [str(v) for v in value]
    return params


class ListScan:
    """Scan ``path`` page by page; iterate to get each page parsed and flattened.

    ``claims`` (shared by the scans of one load) skips included resources already taken.
    ``filters`` (see :func:`filter_params`) go with every request, reconciliation included;
    ``meta.total`` and the links then describe the filtered list.
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
        filters: Filters | None = None,
    ) -> None:
        self.client = client
        self.path = path
        self.include = include
        self.page_size = page_size
        #: the page size in effect, known from the first answer
        self.size = page_size
        self.max_reconcile_passes = max_reconcile_passes
        self.on_page = on_page
        self.stats = ScanStats(kind=kind)
        self._filters = filter_params(filters)
        self._parse = functools.partial(_parse_now, kind, claims)
        self._reported = False  # whether any page carried a usable meta.total
        self._duplicates = 0

    def _params(self, number: int) -> dict[str, Any]:
        params: dict[str, Any] = {"page[number]": number, "page[size]": self.page_size}
        if self.include:
            params["include"] = self.include
        return {**params, **self._filters}

    def _page(self, page: ParsedPage, *, reconciling: bool = False) -> ParsedPage:
        s = self.stats
        s.pages += 1
        s.reconcile_pages += reconciling
        s.records += len(page.ids)
        s.seen.update(page.ids)
        s.distinct = len(s.seen)
        self._duplicates += page.duplicates
        if page.total is not None:
            s.total, self._reported = page.total, True
        if self.on_page:
            self.on_page(s)
        return page

    def _fetch_many(
        self, params: Iterable[dict[str, Any]], *, reconciling: bool = False
    ) -> Iterator[ParsedPage]:
        """The page of each parameter set, fetched concurrently, in order."""
        for _, page in self.client.get_many(self.path, params, self._parse):
            yield self._page(page, reconciling=reconciling)

    def _full(self, page: ParsedPage) -> bool:
        """Whether the list goes on after ``page`` (its ``next`` link, and no short page)."""
        return page.has_next and page.served >= self.size > 0

    def __iter__(self) -> Iterator[ParsedPage]:
        first = self._page(self.client.get(self.path, self._params(1), self._parse))
        yield first
        self.size = self._size_in_effect(first)
        count = max(math.ceil(self.stats.total / self.size), first.last_page or 1)
        tail = first
        for tail in self._fetch_many(self._params(n) for n in range(2, count + 1)):
            yield tail
        yield from self._follow(tail, count)
        yield from self._reconcile()
        self._report()
        self.stats.seen = set()  # the count stays in ``distinct``; the ids are not needed now

    def _size_in_effect(self, first: ParsedPage) -> int:
        """The page size the API applied: what it says, unless a page followed by another
        carries fewer records (then that length); the size asked for when it says nothing."""
        size = first.size or self.page_size
        if first.has_next and first.served:
            size = min(size, first.served)
        return size

    def _follow(self, tail: ParsedPage, number: int) -> Iterator[ParsedPage]:
        """Pages past the count, while the last one is full and links to a next: a batch of
        ``concurrency`` at a time, until a page ends the list or a batch brings no new id."""
        while self._full(tail):
            batch = range(number + 1, number + 1 + self.client.concurrency)
            before = self.stats.distinct
            ended = False
            for page in self._fetch_many(self._params(n) for n in batch):
                yield page
                ended = ended or not self._full(page)
                tail = page
            number = batch[-1]
            if ended or self.stats.distinct == before:
                return

    def _missing(self) -> bool:
        return self._reported and self.stats.distinct < self.stats.total

    def _reconcile(self) -> Iterator[ParsedPage]:
        """Re-read from the front until every promised record has been seen."""
        for _ in range(self.max_reconcile_passes):
            if not self._missing():
                return
            yield from self._front()
        if self._missing():
            raise ScanIncomplete(
                f"{self.path}: saw {self.stats.distinct} distinct records of the "
                f"{self.stats.total} the API reports, after {self.max_reconcile_passes} "
                "reconciliation passes"
            )

    def _front(self) -> Iterator[ParsedPage]:
        """One pass over pages 1, 2, ... while records are missing and the list goes on.

        A record the pass skipped was refreshed meanwhile and moved to the front, so the
        missing records fill at least the first ``ceil(missing / size)`` pages: each batch asks
        for only as many pages as the records still missing can fill (concurrently), then
        counts again. With fewer missing records than a page holds, that is one page at a time.
        """
        number = 1
        while self._missing() and number <= self._page_count():
            missing = self.stats.total - self.stats.distinct
            last = min(number + math.ceil(missing / self.size), self._page_count() + 1)
            ended = False
            for page in self._fetch_many(
                (self._params(n) for n in range(number, last)), reconciling=True
            ):
                yield page
                ended = ended or not page.ids or not page.has_next
            if ended:
                return
            number = last

    def _page_count(self) -> int:
        return max(1, math.ceil(self.stats.total / self.size))

    def _report(self) -> None:
        """Warn (log and :attr:`ScanStats.warnings`) where the API contradicted itself."""
        s = self.stats
        found: list[str] = []
        if not self._reported:
            found.append(
                f"{self.path}: the API sent no record count (meta.total); "
                f"{s.distinct} records were served and loaded"
            )
        elif s.distinct > s.total:
            found.append(
                f"{self.path}: the API reported {s.total} records (meta.total) but served "
                f"{s.distinct}; all {s.distinct} were loaded"
            )
        if self._duplicates:
            found.append(
                f"{self.path}: {self._duplicates} records came twice on one page; "
                "the last copy of each was loaded"
            )
        for line in found:
            log.warning("%s", line)
        s.warnings.extend(found)
