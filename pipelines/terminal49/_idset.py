"""A set of record ids in 16 bytes each, for scans that count distinct records.

A scan of 1,000,000 containers keeps about 1,400,000 ids (its shipments too) to check what it
saw against ``meta.total``. As a Python ``set`` of the id strings that is about 165 MB, the
biggest part of the loader's memory that grows with the account. :class:`IdSet` keeps a 128-bit
BLAKE2b digest of each id in two sorted ``uint64`` arrays instead (about 23 MB for the same
ids), plus a small set of the digests not yet put into the arrays. It costs about 1.5 us of
CPU per id (1,000,000 containers: 2 s of a 2-minute load; peak RSS 560 MB instead of 705 MB).

Two different ids share a 128-bit digest with a probability of about ``n**2 / 2**129`` (about
3e-27 for 1,400,000 ids): the count is exact in practice.
"""

from __future__ import annotations

from collections.abc import Iterable
from hashlib import blake2b

import numpy as np

#: Digests kept in the small set before they go into the arrays: the set costs about 80 bytes
#: per digest, and each insertion copies the arrays once.
MERGE_AT = 1 << 16


def _digest(record_id: str) -> bytes:
    # surrogatepass: any str hashes (an id with a lone surrogate must not fail the scan)
    return blake2b(record_id.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _halves(digests: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    pairs = np.frombuffer(b"".join(digests), dtype="<u8").reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


class IdSet:
    """Distinct ids seen so far: ``update`` with a page's ids, ``len`` for the count."""

    def __init__(self, merge_at: int = MERGE_AT) -> None:
        self._hi = np.empty(0, dtype=np.uint64)  # sorted (``lo`` in the same order)
        self._lo = np.empty(0, dtype=np.uint64)
        self._recent: set[bytes] = set()
        self._merge_at = merge_at

    def __len__(self) -> int:
        return int(self._hi.size) + len(self._recent)

    def update(self, ids: Iterable[str]) -> None:
        """Add ``ids`` (repeats, within them or of earlier ones, count once)."""
        new = list({_digest(i) for i in ids} - self._recent)
        if new and self._hi.size:
            new = [d for d, seen in zip(new, self._in_arrays(new), strict=True) if not seen]
        self._recent.update(new)
        if len(self._recent) >= self._merge_at:
            self._merge()

    def _in_arrays(self, digests: list[bytes]) -> np.ndarray:
        """Whether each digest is in the sorted arrays."""
        hi, lo = _halves(digests)
        left = np.searchsorted(self._hi, hi, side="left")
        right = np.searchsorted(self._hi, hi, side="right")
        found = np.zeros(len(digests), dtype=bool)
        one = (right - left) == 1  # the usual case: at most one digest with these 64 bits
        found[one] = self._lo[left[one]] == lo[one]
        for k in np.flatnonzero((right - left) > 1):
            found[k] = bool((self._lo[left[k] : right[k]] == lo[k]).any())
        return found

    def _merge(self) -> None:
        """Insert the small set's digests into the arrays (one pass over them)."""
        hi, lo = _halves(list(self._recent))
        order = np.argsort(hi)
        hi, lo = hi[order], lo[order]
        at = np.searchsorted(self._hi, hi)
        self._hi, self._lo = np.insert(self._hi, at, hi), np.insert(self._lo, at, lo)
        self._recent = set()
