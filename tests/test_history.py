"""History over real HTTP: a container walked through its life by loads and webhooks."""

from __future__ import annotations

import datetime as dt
import shutil
import sys
from pathlib import Path
from typing import Any

import duckdb
import httpx
import orjson
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from history_walk import CONTAINER, START, Walk, views  # noqa: E402

from pipelines.config import ApiSettings  # noqa: E402
from pipelines.history import tracked_columns  # noqa: E402
from pipelines.load import run_load  # noqa: E402
from pipelines.webhooks.apply import apply_inbox  # noqa: E402
from pipelines.webhooks.inbox import Inbox, notification_from_doc  # noqa: E402
from pipelines.write import LoadFailed  # noqa: E402
from sandbox.thread import SandboxThread  # noqa: E402


def rows(path: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def as_text(value: Any) -> str | None:
    """A value as history writes it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(value)


def changes_of(path: Path, cid: str) -> list[tuple[Any, ...]]:
    """The changes loads and webhooks recorded for ``cid``: the rows of the walk's risk runs
    (``how = 'risk'``, the binding LFD the alerts desk's risk runs derived) are left out."""
    return rows(
        path,
        "SELECT field, old_value, new_value, observed_at, how, notification_id "
        "FROM terminal49.history WHERE entity_id = ? AND how <> 'risk' "
        "ORDER BY observed_at, field",
        [cid],
    )


def test_each_change_is_recorded_once_in_order_with_old_and_new(walked: Walk) -> None:
    """History holds exactly the changes the warehouse went through, step by step: replaying
    the snapshots taken after each load or webhook apply gives the same list."""
    expected: list[tuple[str, str | None, str | None, dt.datetime]] = []
    previous: dict[str, str | None] = {}
    for (at, _how), snap in zip(walked.steps, walked.snapshots, strict=True):
        values = {c: as_text(snap[c]) for c in tracked_columns("containers", snap)}
        values.update({f"hold:{n}": s for n, s in snap["holds"]})
        for name in sorted(set(values) | {k for k in previous if k.startswith("hold:")}):
            old, new = previous.get(name), values.get(name)
            if old != new:
                expected.append((name, old, new, at))
        previous = values
    got = [
        (f, o, n, at)
        for f, o, n, at, _, _ in changes_of(walked.duckdb_path, CONTAINER)
        if not f.startswith("fee:")
    ]
    # observed_at is the API's clock when the row was read: within seconds of the step's clock
    assert [(f, o, n) for f, o, n, _ in got] == [(f, o, n) for f, o, n, _ in expected]
    for (_, _, _, seen), (_, _, _, step) in zip(got, expected, strict=True):
        assert step <= seen < step + dt.timedelta(minutes=5)


def test_the_life_of_the_container_reads_as_it_happened(walked: Walk) -> None:
    changes = changes_of(walked.duckdb_path, CONTAINER)
    by_field: dict[str, list[tuple[Any, ...]]] = {}
    for c in changes:
        by_field.setdefault(c[0], []).append(c)
    statuses = [(o, n) for _, o, n, *_ in by_field["current_status"]]
    assert statuses == [
        (None, "on_ship"),
        ("on_ship", "not_available"),
        ("not_available", "available"),
        ("available", "picked_up"),
        ("picked_up", "dropped"),
        ("dropped", "empty_returned"),
    ]
    # first version: what the full load found, old value NULL
    seen, how = by_field["current_status"][0][3:5]
    assert how == "full" and START <= seen < START + dt.timedelta(minutes=5)
    assert [(o, n) for _, o, n, *_ in by_field["hold:customs"]] == [(None, "hold"), ("hold", None)]
    # the terminal moved the LFD one day earlier (Los Angeles: local midnight is 08:00 UTC)
    lfd = [(o, n) for _, o, n, *_ in by_field["pickup_lfd_terminal"]]
    assert [(o and o[:10], n and n[:10]) for o, n in lfd] == [
        (None, "2030-01-11"),
        ("2030-01-11", "2030-01-10"),
    ]
    assert [n for _, _, n, *_ in by_field["pod_discharged_at"]] == ["2030-01-07T19:36:00Z"]
    assert [n for _, _, n, *_ in by_field["pod_full_out_at"]] == ["2030-01-16T20:05:00Z"]
    assert [n for _, _, n, *_ in by_field["empty_terminated_at"]] == ["2030-01-26T12:11:00Z"]
    # how: each webhook row names a notification the warehouse keeps; loads name none
    notified = {
        r[0] for r in rows(walked.duckdb_path, "SELECT id FROM terminal49.webhook_notifications")
    }
    for _, _, _, _, how, nid in changes:
        assert how in ("full", "incremental", "webhook")
        assert (nid is not None) == (how == "webhook")
        assert nid is None or nid in notified
    assert {c[4] for c in changes} == {"full", "incremental", "webhook"}


def test_the_walks_risk_runs_record_each_binding_lfd_change_once(walked: Walk) -> None:
    """The rows :func:`changes_of` leaves out: the alerts desk ran risk after each of its
    steps (tests/history_walk.py); history holds the container's binding LFD posted, moved a
    day earlier, and cleared once picked up, each once, at the clock of the risk run that
    derived it, however many risk runs followed."""
    got = rows(
        walked.duckdb_path,
        "SELECT field, old_value, new_value, observed_at, notification_id FROM "
        "terminal49.history WHERE entity_id = ? AND how = 'risk' ORDER BY observed_at, field",
        [CONTAINER],
    )
    posted, moved, cleared = (
        dt.datetime(2030, 1, 8, 12, tzinfo=dt.UTC),
        dt.datetime(2030, 1, 11, tzinfo=dt.UTC),
        dt.datetime(2030, 1, 17, tzinfo=dt.UTC),
    )
    assert got == [
        ("binding_basis", None, "terminal", posted, None),
        ("lfd_binding", None, "2030-01-11", posted, None),
        ("lfd_binding", "2030-01-11", "2030-01-10", moved, None),
        ("binding_basis", "terminal", None, cleared, None),
        ("lfd_binding", "2030-01-10", None, cleared, None),
    ]


def test_shipment_etas_are_tracked(walked: Walk) -> None:
    etas = rows(
        walked.duckdb_path,
        "SELECT field, old_value, new_value FROM terminal49.history h "
        "JOIN terminal49.containers c ON c.shipment_id = h.entity_id "
        "WHERE h.entity = 'shipment' AND c.id = ? ORDER BY observed_at",
        [CONTAINER],
    )
    fields = [f for f, _, _ in etas]
    assert "pod_eta_at" in fields and "pod_ata_at" in fields
    assert etas[0][1] is None


def test_webhooks_applied_again_add_nothing(walked: Walk, tmp_path: Path) -> None:
    path = tmp_path / "walk.duckdb"  # the walk is shared: apply to a copy
    for suffix in ("", ".wal"):
        if Path(f"{walked.duckdb_path}{suffix}").exists():
            shutil.copyfile(f"{walked.duckdb_path}{suffix}", f"{path}{suffix}")
    count = "SELECT count(*) FROM terminal49.history"
    before = rows(path, count)
    inbox_path = tmp_path / "again.sqlite"
    with Inbox(inbox_path) as inbox:
        for received, bodies in walked.bodies:  # redelivered: stamped as first received
            inbox.add_many(
                [notification_from_doc(orjson.loads(b), b) for b in bodies], received_at=received
            )
    summary = apply_inbox(path, inbox_path)
    assert summary.notifications == sum(len(b) for _, b in walked.bodies) > 0
    assert rows(path, count) == before


class FailAfter(httpx.BaseTransport):
    """Real HTTP until ``n`` requests were sent, then a dropped connection."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.n -= 1
        if self.n < 0:
            raise httpx.ConnectError("dropped", request=request)
        return self.inner.handle_request(request)


@pytest.mark.sandbox
def test_repeated_and_failed_loads_add_nothing(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    count = "SELECT count(*) FROM terminal49.history"
    with SandboxThread(containers=40, seed=7, clock="2030-03-01T00:00:00Z") as sb:
        api = ApiSettings.resolve(
            base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100_000
        )
        run_load(path, api, full=True)
        first = rows(path, count)[0][0]
        assert first > 0
        run_load(path, api, full=True)
        run_load(path, api)
        assert rows(path, count)[0][0] == first
        changed = sb.advance(hours=72)["changed_containers"]
        assert changed
        with pytest.raises(LoadFailed):
            run_load(path, api, full=True, transport=FailAfter(1), max_attempts=1)
        assert rows(path, count)[0][0] == first
        run_load(path, api, full=True)
    after = rows(path, count)[0][0]
    assert after > first
    kinds = rows(path, "SELECT DISTINCT how FROM terminal49.history ORDER BY 1")
    assert kinds == [("full",)]
    # every change joins a published load
    orphans = rows(
        path,
        "SELECT count(*) FROM terminal49.history WHERE load_id NOT IN "
        "(SELECT load_id FROM terminal49.freetime_loads)",
    )
    assert orphans == [(0,)]


# -- the views -------------------------------------------------------------------------------
def view(
    path: Path, name: str, where: str = "", params: list[Any] | None = None
) -> list[dict[str, Any]]:
    with duckdb.connect(str(path), read_only=True) as con:
        cur = con.execute(f"SELECT * FROM terminal49.{name} {where}", params or [])
        names = [d[0] for d in cur.description or []]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def test_lfd_changes_view(walked: Walk) -> None:
    got = [
        (r["source"], r["change"], r["old_lfd"], r["new_lfd"], r["days_moved"], r["how"])
        for r in view(
            walked.duckdb_path,
            "lfd_changes",
            "WHERE container_id = ? AND source = 'pickup_lfd_terminal' ORDER BY observed_at",
            [CONTAINER],
        )
    ]
    # posted on 2030-01-11 (Los Angeles) seen by a load; moved a day earlier, seen by a webhook
    assert got == [
        ("pickup_lfd_terminal", "posted", None, dt.date(2030, 1, 11), None, "incremental"),
        ("pickup_lfd_terminal", "moved", dt.date(2030, 1, 11), dt.date(2030, 1, 10), -1, "webhook"),
    ]


@pytest.fixture(scope="module")
def charged(walked: Walk, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the walk's warehouse after a risk run at the walk's end (the risk run
    publishes the charge engine's tables, which the charge views read)."""
    from pipelines.analytics import publish_risk

    path = tmp_path_factory.mktemp("charged") / "walk.duckdb"
    shutil.copy(walked.duckdb_path, path)
    publish_risk(path, as_of=START + dt.timedelta(hours=480))
    return path


def test_free_time_used_view(charged: Path) -> None:
    rows = view(
        charged, "free_time_used", "WHERE container_id = ? ORDER BY party, charge", [CONTAINER]
    )
    # the sandbox posts the terminal's LFD only; the line's demurrage has no day
    assert [(r["party"], r["charge"]) for r in rows] == [
        ("line", "demurrage"),
        ("line", "detention"),
        ("terminal", "demurrage"),
    ]
    assert rows[0]["lfd_date"] is None and rows[0]["days_charged"] == 0
    row = rows[2]
    utc = dt.UTC
    assert row["discharged_at"] == dt.datetime(2030, 1, 7, 19, 36, tzinfo=utc)
    # available from +170h06 (hold cleared); seen by the webhook step at 2030-01-15 00:00
    assert row["first_available_at"] == dt.datetime(2030, 1, 15, tzinfo=utc)
    assert (row["lfd_date"], row["lfd_basis"]) == (dt.date(2030, 1, 10), "pickup_lfd_terminal")
    # discharged 2030-01-07 11:36 local: free days 01-08 .. 01-10
    assert (row["free_time_start"], row["free_time_end"], row["free_days"]) == (
        dt.date(2030, 1, 8),
        dt.date(2030, 1, 10),
        3,
    )
    assert (row["chargeable_until"], row["end_reason"]) == (dt.date(2030, 1, 16), "full out")
    assert row["picked_up_at"] == dt.datetime(2030, 1, 16, 20, 5, tzinfo=utc)
    assert row["empty_returned_at"] == dt.datetime(2030, 1, 26, 12, 11, tzinfo=utc)
    # charged: 01-11 .. 01-16 (out at 12:05 local on the 16th); under the customs hold and not
    # available until seen cleared at 2030-01-15 00:00 UTC = 01-14 16:00 local: 01-11 .. 01-14
    assert (
        row["days_charged"],
        row["days_charged_not_available"],
        row["days_charged_before_first_seen"],
    ) == (6, 4, 0)
    days = view(
        charged,
        "charged_days",
        "WHERE container_id = ? AND party = 'terminal' ORDER BY day",
        [CONTAINER],
    )
    assert [(d["day"].day, d["day_number"], d["reasons"]) for d in days] == [
        (11, 1, "customs hold, not available"),
        (12, 2, "customs hold, not available"),
        (13, 3, "customs hold, not available"),
        (14, 4, "customs hold, not available"),
        (15, 5, None),
        (16, 6, None),
    ]


def test_charge_views_wait_for_a_risk_run(walked: Walk) -> None:
    """A load alone publishes no charges: the charge views appear with the first risk run
    (the walk's alerts desk runs risk after its first load)."""
    charge_views = {"free_time_used", "charged_days"}
    after_load = walked.views_after_load
    assert "lfd_changes" in after_load and not charge_views & after_load
    assert charge_views <= views(walked.duckdb_path)


def test_eta_reliability_view_of_the_walk(walked: Walk) -> None:
    # the sandbox's ETA is exact: first ETA 2030-01-07 13:20 = arrival
    (row,) = view(
        walked.duckdb_path,
        "eta_reliability",
        "WHERE carrier_scac = 'EGLV' AND port_locode = 'USTIW'",
    )
    assert row["arrival_month"] == dt.date(2030, 1, 1)
    assert (row["mean_delay_days"], row["mean_abs_error_days"]) == (0, 0)


@pytest.mark.fast
def test_eta_reliability_by_hand(tmp_path: Path) -> None:
    """Crafted history: A's first ETA 2.5 days early, B's half a day late; C was first seen
    after it arrived (no forecast to judge); D arrived in another month."""
    from pipelines.history import ensure_table
    from pipelines.history.views import create_views

    path = tmp_path / "eta.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE SCHEMA terminal49")
        con.execute(
            "CREATE TABLE terminal49.containers (id VARCHAR, number VARCHAR, pod_timezone VARCHAR)"
        )
        con.execute(
            "CREATE TABLE terminal49.shipments (id VARCHAR, shipping_line_scac VARCHAR, "
            "port_of_discharge_locode VARCHAR, pod_ata_at TIMESTAMPTZ)"
        )
        con.execute(
            "INSERT INTO terminal49.shipments VALUES "
            "('A', 'MAEU', 'USNYC', '2030-02-03 12:00:00+00'), "
            "('B', 'MAEU', 'USNYC', '2030-02-09 12:00:00+00'), "
            "('C', 'MAEU', 'USNYC', '2030-02-05 00:00:00+00'), "
            "('D', 'MAEU', 'USNYC', '2030-03-02 00:00:00+00')"
        )
        ensure_table(con)
        for sid, old, new, seen in [
            ("A", None, "2030-02-01T00:00:00Z", "2030-01-20"),
            ("A", "2030-02-01T00:00:00Z", "2030-02-03T00:00:00Z", "2030-01-30"),
            ("B", None, "2030-02-10T00:00:00Z", "2030-01-25"),
            ("C", None, "2030-02-05T00:00:00Z", "2030-02-06"),
            ("D", None, "2030-03-01T00:00:00Z", "2030-02-20"),
        ]:
            con.execute(
                "INSERT INTO terminal49.history VALUES ('shipment', ?, 'pod_eta_at', ?, "
                "?, ?, NULL, 'full', NULL, 'l1')",
                [sid, old, new, seen],
            )
        create_views(con)
    got = view(tmp_path / "eta.duckdb", "eta_reliability", "ORDER BY arrival_month")
    assert [
        (
            r["arrival_month"],
            r["shipments"],
            r["mean_delay_days"],
            r["mean_abs_error_days"],
            r["share_within_1_day"],
        )
        for r in got
    ] == [
        (dt.date(2030, 2, 1), 2, 1.0, 1.5, 0.5),
        (dt.date(2030, 3, 1), 1, 1.0, 1.0, 1.0),
    ]


@pytest.mark.fast
def test_views_are_made_before_any_shipment_arrived(tmp_path: Path) -> None:
    """A load writes no column that no record has filled: with no shipment arrived yet there is
    no ``pod_ata_at`` (nor a carrier), and the views (made by every risk run) are made all the
    same; the ETA view is empty."""
    from pipelines.history import ensure_table
    from pipelines.history.views import create_views

    path = tmp_path / "early.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE SCHEMA terminal49")
        con.execute(
            "CREATE TABLE terminal49.containers (id VARCHAR, number VARCHAR, pod_timezone VARCHAR)"
        )
        con.execute("CREATE TABLE terminal49.shipments (id VARCHAR, pod_eta_at TIMESTAMPTZ)")
        con.execute("INSERT INTO terminal49.shipments VALUES ('A', '2030-02-01 00:00:00+00')")
        ensure_table(con)
        con.execute(
            "INSERT INTO terminal49.history VALUES ('shipment', 'A', 'pod_eta_at', NULL, "
            "'2030-02-01T00:00:00Z', '2030-01-20', NULL, 'full', NULL, 'l1')"
        )
        create_views(con)
    assert view(path, "eta_reliability", "") == []


@pytest.mark.fast
def test_binding_lfd_changes_are_recorded_after_a_risk_run(tmp_path: Path) -> None:
    """Crafted risk runs: the binding LFD posted, unchanged, moved two days later by the
    POD facility, then cleared (the box picked up) and still cleared; each change once, with
    its basis, in lfd_changes."""
    from pipelines.history import record_binding
    from pipelines.history.views import create_views

    path = tmp_path / "b.duckdb"
    runs = [
        ("r1", "2030-01-01", "2030-01-10", "pickup_lfd_terminal"),
        ("r2", "2030-01-02", "2030-01-10", "pickup_lfd_terminal"),
        ("r3", "2030-01-03", "2030-01-12", "pod_facility"),
        ("r4", "2030-01-04", None, None),
        ("r5", "2030-01-05", None, None),
    ]
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE SCHEMA terminal49")
        con.execute("CREATE SCHEMA analytics")
        con.execute(
            "CREATE TABLE terminal49.containers AS SELECT 'c1' AS id, "
            "'ABCU1234567' AS number, 'America/New_York' AS pod_timezone"
        )
        added = []
        for run_id, at, lfd, source in runs:
            con.execute(
                "CREATE OR REPLACE TABLE analytics.demurrage_risk AS SELECT 'c1' AS "
                "container_id, CAST(? AS DATE) AS lfd_date, ? AS lfd_source",
                [lfd, source],
            )
            added.append(record_binding(con, run_id, dt.datetime.fromisoformat(at + "T00:00Z")))
        create_views(con)
    assert added == [2, 0, 2, 2, 0]
    got = view(path, "lfd_changes", "WHERE source = 'lfd_binding' ORDER BY observed_at")
    assert [
        (r["change"], r["old_lfd"], r["new_lfd"], r["days_moved"], r["binding_basis"], r["how"])
        for r in got
    ] == [
        ("posted", None, dt.date(2030, 1, 10), None, "pickup_lfd_terminal", "risk"),
        ("moved", dt.date(2030, 1, 10), dt.date(2030, 1, 12), 2, "pod_facility", "risk"),
        ("withdrawn", dt.date(2030, 1, 12), None, None, "pod_facility", "risk"),
    ]


@pytest.mark.fast
def test_lfd_contract_columns_are_tracked_and_the_pod_deadline_binds(tmp_path: Path) -> None:
    """Columns of the LFD contract (DATE LFDs, pod_lfd_*, has_pod_deadlines, *_wire): tracked
    by pattern, and with POD deadlines the unified one binds (no fallback)."""
    from pipelines.history import ensure_table
    from pipelines.history.views import create_views

    columns = [
        "id",
        "pickup_lfd",
        "pickup_lfd_wire",
        "pickup_lfd__raw",
        "import_deadlines",
        "pod_lfd_line_current",
        "pod_lfd_unified",
        "pod_lfd_unified_selection",
        "pod_lfd_facility_manual",
        "has_pod_deadlines",
        "ssl_lfd",
        "ssl_lfd_wire",
    ]
    assert tracked_columns("containers", columns) == [
        "pickup_lfd",
        "pod_lfd_line_current",
        "pod_lfd_unified",
        "pod_lfd_unified_selection",
        "pod_lfd_facility_manual",
        "has_pod_deadlines",
        "ssl_lfd",
    ]
    path = tmp_path / "pod.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE SCHEMA terminal49")
        con.execute("""CREATE TABLE terminal49.containers AS SELECT * FROM (VALUES
            ('c1', 'ABCU1', 'America/New_York', TIMESTAMPTZ '2030-01-02 15:00:00+00',
             TIMESTAMPTZ '2030-01-10 18:00:00+00', DATE '2030-01-06', true,
             DATE '2030-01-07', 'facility'),
            ('c2', 'ABCU2', 'America/New_York', TIMESTAMPTZ '2030-01-02 15:00:00+00',
             TIMESTAMPTZ '2030-01-10 18:00:00+00', DATE '2030-01-06', true, NULL, NULL),
            ('c3', 'ABCU3', 'America/New_York', TIMESTAMPTZ '2030-01-02 15:00:00+00',
             TIMESTAMPTZ '2030-01-10 18:00:00+00', DATE '2030-01-06', false, NULL, NULL))
            t(id, number, pod_timezone, pod_discharged_at, pod_full_out_at, pickup_lfd_terminal,
              has_pod_deadlines, pod_lfd_unified, pod_lfd_unified_selection)""")
        ensure_table(con)
        con.execute("""INSERT INTO terminal49.history VALUES
            ('container', 'c1', 'current_status', NULL, 'available',
             '2030-01-01 00:00:00+00', NULL, 'full', NULL, 'l1'),
            ('container', 'c1', 'pod_lfd_unified', NULL, '2030-01-06',
             '2030-01-03 00:00:00+00', NULL, 'incremental', NULL, 'l2'),
            ('container', 'c1', 'pod_lfd_unified_selection', NULL, 'facility',
             '2030-01-03 00:00:00+00', NULL, 'incremental', NULL, 'l2'),
            ('container', 'c1', 'pod_lfd_unified', '2030-01-06', '2030-01-07',
             '2030-01-05 00:00:00+00', NULL, 'webhook', 'n1', 'l3')""")
        create_views(con)
    moves = [
        (r["source"], r["change"], r["days_moved"])
        for r in view(path, "lfd_changes", "ORDER BY observed_at")
    ]
    assert moves == [("pod_lfd_unified", "posted", None), ("pod_lfd_unified", "moved", 1)]
    from pipelines.analytics import publish_risk

    publish_risk(path, as_of=dt.datetime(2030, 1, 12, tzinfo=dt.UTC))
    got = {
        r["container_id"]: (r["lfd_date"], r["lfd_source"], r["lfd_basis"], r["days_charged"])
        for r in view(path, "free_time_used", "WHERE party = 'terminal'")
    }
    # out 2030-01-10 13:00 New York: c1 charged 01-08 .. 01-10; c2's POD deadline is unknown,
    # so nothing is charged (no fallback to the terminal's LFD); c3 has no POD deadlines
    assert got == {
        "c1": (dt.date(2030, 1, 7), "pod_facility", "pod_lfd_unified", 3),
        "c2": (None, "pod", "pod_lfd_unified", 0),
        "c3": (dt.date(2030, 1, 6), "terminal", "pickup_lfd_terminal", 4),
    }
