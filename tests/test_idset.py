"""The scan's compact id set counts exactly what a Python set of the ids counts."""

from __future__ import annotations

import random

import pytest

from pipelines.terminal49 import _idset
from pipelines.terminal49._idset import IdSet


@pytest.mark.parametrize("merge_at", [1, 7, 64, _idset.MERGE_AT])
def test_counts_distinct_ids_across_pages_and_merges(merge_at: int) -> None:
    rng = random.Random(merge_at)
    ids = [f"{rng.getrandbits(128):032x}" for _ in range(3000)] + [f"c{i}" for i in range(200)]
    ids_set: IdSet = IdSet(merge_at=merge_at)
    reference: set[str] = set()
    for _ in range(300):
        # repeats inside a page, and of ids seen on earlier pages (before and after a merge)
        page = rng.sample(ids, rng.randint(0, 40)) + rng.sample(ids, 3) * 2
        ids_set.update(page)
        reference.update(page)
        assert len(ids_set) == len(reference)
    assert len(reference) > 1000


def test_digests_sharing_their_first_64_bits_stay_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two ids whose digests differ only in the second half: both count, and each once."""

    def digest(record_id: str) -> bytes:  # the same first 8 bytes for every id
        return b"\x01" * 8 + record_id.encode().rjust(8, b"-")[-8:]

    monkeypatch.setattr(_idset, "_digest", digest)
    ids_set = IdSet(merge_at=2)
    ids_set.update(["a", "b", "c"])  # merged into the arrays: three equal first halves
    assert len(ids_set) == 3
    ids_set.update(["a", "c", "d"])  # two seen (found among equal first halves), one new
    assert len(ids_set) == 4
    ids_set.update(["d", "e"])
    assert len(ids_set) == 5


def test_any_string_counts_even_a_lone_surrogate() -> None:
    ids_set = IdSet()
    ids_set.update(["c\ud800", "c\ud800", "c"])  # not encodable as strict UTF-8
    assert len(ids_set) == 2
