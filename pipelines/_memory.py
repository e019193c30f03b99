"""Handing freed memory back to the system between the phases of a load.

Parsing pages in worker threads leaves freed memory in three allocators: Arrow's (mimalloc keeps
pages per thread), glibc's per-thread arenas (response bodies, large buffers) and Python's cyclic
garbage. None of it is live, but it counts in the process's resident memory until returned.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Callable

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
