"""The suite's own xdist scheduling (tests/conftest.py): work units go out longest first, a
worker holds one unit ahead, and ``--store-durations`` keeps the seconds it orders by."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests import conftest
from tests.conftest import LongestFirst

pytestmark = pytest.mark.fast


class Worker:
    """What the scheduler sees of an xdist worker: the tests it was sent, by index."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def _scheduler(workers: list[Worker], collection: list[str], seconds: dict[str, float]) -> Any:
    config = SimpleNamespace(
        option=SimpleNamespace(loadscopereorder=True),
        getvalue=lambda name: [f"{len(workers)}*popen"],
    )
    sched = LongestFirst(config)  # type: ignore[arg-type]
    sched.seconds = seconds
    for w in workers:
        sched.add_node(w)
    for w in workers:
        sched.add_node_collection(w, collection)
    sched.schedule()
    return sched


COLLECTION = [
    "tests/test_a.py::test_short",
    "tests/test_a.py::test_long",
    "tests/test_b.py::test_one@tests/test_b.py",
    "tests/test_b.py::test_two@tests/test_b.py",
    "tests/test_c.py::test_medium",
    "tests/test_c.py::test_unknown",
]
SECONDS = {
    "tests/test_a.py::test_short": 1.0,
    "tests/test_a.py::test_long": 100.0,
    "tests/test_b.py::test_one": 30.0,
    "tests/test_b.py::test_two": 30.0,
    "tests/test_c.py::test_medium": 40.0,
}


def test_the_longest_units_go_out_first_and_a_group_stays_on_one_worker() -> None:
    one, two = Worker("gw0"), Worker("gw1")
    _scheduler([one, two], COLLECTION, SECONDS)
    # the long test first; the group (60 s together, ids carrying xdist's @group) second;
    # one holds a single test, which it cannot run before it knows the next: it gets one more
    assert one.sent == [1, 4]
    assert two.sent == [2, 3]


def test_a_worker_gets_more_only_when_down_to_the_test_it_holds() -> None:
    one, two = Worker("gw0"), Worker("gw1")
    sched = _scheduler([one, two], COLLECTION, SECONDS)
    sched._reschedule(one)  # two pending: nothing more until one of them is done
    assert one.sent == [1, 4]
    sched.mark_test_complete(two, 2)
    assert two.sent == [2, 3, 0]  # down to the test it holds: the next longest
    sched.mark_test_complete(one, 1)
    assert one.sent == [1, 4, 5]  # a test without a known duration counts half a second
    assert not sched.workqueue


def test_store_durations_writes_the_seconds_of_the_slow_tests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "durations.json"
    monkeypatch.setattr(conftest, "DURATIONS", target)
    monkeypatch.setattr(conftest, "_SECONDS", {"t.py::slow": 2.04, "t.py::quick": 0.3})
    config = SimpleNamespace(getoption=lambda name, default=None: True)
    conftest._store_durations(config)  # type: ignore[arg-type]
    assert json.loads(target.read_text()) == {"t.py::slow": 2.0}
    assert conftest._expected_seconds() == {"t.py::slow": 2.0}


def _another_test() -> None:
    pass


def test_a_grouped_test_is_named_with_its_group_for_the_controller(
    request: pytest.FixtureRequest,
) -> None:
    module = request.node.parent
    item = pytest.Function.from_parent(module, name="_another_test", callobj=_another_test)
    plain = item.nodeid
    conftest._name_group(item, "tests/test_x.py")
    assert item.nodeid == plain + "@tests/test_x.py"
    sched = LongestFirst(  # type: ignore[arg-type]
        SimpleNamespace(option=SimpleNamespace(), getvalue=lambda name: ["1*popen"])
    )
    assert sched._split_scope(item.nodeid) == "tests/test_x.py"
    assert conftest._test_id(item.nodeid) == plain
