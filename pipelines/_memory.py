"""Handing freed memory back to the system between the phases of a load.

Parsing pages in worker threads leaves freed memory in three allocators: Arrow's (mimalloc keeps
pages per thread), glibc's per-thread arenas (response bodies, large buffers) and Python's cyclic
garbage. None of it is live, but it counts in the process's resident memory until returned.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Callable, Iterator

import pyarrow as pa


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


def release_unused(collect_garbage: bool = False) -> None:
    """Return free memory of Arrow's pool and of the C heap to the system (a few ms).

    ``collect_garbage`` first runs a full garbage collection (tens of ms with a large heap).
    """
    if collect_garbage:
        gc.collect()
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


#: Allocations between two young-generation collections while pages are parsed (Python's
#: default is 700). See :func:`fewer_collections`.
SCAN_GC_THRESHOLD = 20_000


@contextlib.contextmanager
def fewer_collections(threshold: int = SCAN_GC_THRESHOLD) -> Iterator[None]:
    """Run the block with Python's cyclic collector triggered less often, then restore it.

    A parsed page is a tree of a few thousand dicts and lists without cycles (reference
    counting frees it), yet every 700 new ones start a collection that walks the young objects,
    and every tenth of those the older generation too: about 10% of a load's CPU. At 20,000 the
    collector (a load does make cyclic garbage) still runs, less often: a load of 100,000
    containers made 257 young collections instead of 5,839. 100,000 containers,
    medians of 3 alternating loads: 10.3 s of CPU instead of 11.3 s, 12.0 s instead of 13.0 s,
    same peak memory (a threshold of 100,000 saved about as much and raised the peak by 70 MB).
    """
    before = gc.get_threshold()
    gc.set_threshold(max(threshold, before[0]), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
