"""The sandbox answers like the live API of 2026-10, over real HTTP.

Page caps and links, both LFD wire forms, ``import_deadlines.pod``, the internal ``updated_at``
and ``pod_eta_changed_at``, list filters, ``include`` under the cap, the active share and
upstream deletion. One module-scoped default server serves the read-only tests; tests that move
the world start their own.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from sandbox.thread import SandboxThread

pytestmark = pytest.mark.sandbox

CLOCK = "2026-11-20T12:00:00Z"
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
INSTANT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
LEGACY = ("pickup_lfd_terminal", "pickup_lfd_line", "pickup_lfd_rail")


@pytest.fixture(scope="module")
def stamps(sb: SandboxThread) -> dict[str, Any]:
    return sb.timestamps()


def scan(
    http: httpx.Client, path: str, params: Any = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Follow ``links.next`` from the first page; returns (bodies, primary resources)."""
    bodies: list[dict[str, Any]] = []
    resp = http.get(path, params=params)
    while True:
        assert resp.status_code == 200, resp.text
        body = resp.json()
        bodies.append(body)
        nxt = body["links"].get("next")
        if not nxt:
            return bodies, [x for b in bodies for x in b["data"]]
        resp = http.get(nxt)


def ids(resources: list[dict[str, Any]]) -> list[str]:
    return [r["id"] for r in resources]


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def lfd_day(value: str, tz: str) -> date:
    """The calendar day of an LFD in either wire form; an instant must be local midnight."""
    if DATE.match(value):
        return date.fromisoformat(value)
    assert INSTANT.match(value), value
    local = ts(value).astimezone(ZoneInfo(tz))
    assert (local.hour, local.minute, local.second) == (0, 0, 0), (value, tz)
    return local.date()


# ---- page caps, links, include ----------------------------------------------------------------
def test_containers_capped_at_50_without_meta_size(sb: SandboxThread, http: httpx.Client) -> None:
    body = http.get("/containers", params={"page[size]": 500}).json()
    assert len(body["data"]) == 50
    assert body["meta"] == {"total": 500}
    links = body["links"]
    assert links["current"] == f"{sb.base_url}/containers?page[number]=1&page[size]=50"
    assert links["next"] == f"{sb.base_url}/containers?page[number]=2&page[size]=50"
    assert links["last"] == f"{sb.base_url}/containers?page[number]=10&page[size]=50"
    assert len(http.get(links["last"]).json()["data"]) == 50
    small = http.get("/containers", params={"page[size]": 20}).json()
    assert len(small["data"]) == 20 and "page[size]=20" in small["links"]["last"]


def test_shipments_capped_at_100_with_meta_size(
    sb: SandboxThread, http: httpx.Client, truth: dict[str, Any]
) -> None:
    body = http.get("/shipments", params={"page[size]": 500}).json()
    total = len(truth["shipments"])
    assert total > 100
    assert len(body["data"]) == 100 and body["meta"] == {"total": total, "size": 100}
    assert body["links"]["current"] == f"{sb.base_url}/shipments?page[number]=1&page[size]=100"


def test_include_shipment_under_the_cap(http: httpx.Client, truth: dict[str, Any]) -> None:
    bodies, containers = scan(http, "/containers", {"include": "shipment", "page[size]": 100})
    assert len(bodies) == 10 and all(len(b["data"]) == 50 for b in bodies)
    assert sorted(ids(containers)) == sorted(ids(truth["containers"]))
    shipments = {s["id"]: s for s in truth["shipments"]}
    for b in bodies:
        wanted = {c["relationships"]["shipment"]["data"]["id"] for c in b["data"]}
        assert ids(b["included"]) == list(dict.fromkeys(ids(b["included"])))  # no duplicates
        assert set(ids(b["included"])) == wanted
        assert all(s == shipments[s["id"]] for s in b["included"])
        assert "include=shipment" in b["links"]["current"]


# ---- LFD wire forms and import_deadlines.pod --------------------------------------------------
def _lfd_values(c: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(field, value, zone) of every non-null LFD value of a container's attributes."""
    pod_tz = c["pod_timezone"]
    rail_tz = c["final_destination_timezone"] or pod_tz
    d = c["import_deadlines"]
    out = [
        ("pickup_lfd", c["pickup_lfd"], pod_tz),
        ("ssl_lfd", c["ssl_lfd"], pod_tz),
        ("ind_facility_lfd_on", c["ind_facility_lfd_on"], rail_tz),
        ("pickup_lfd_terminal", d["pickup_lfd_terminal"], pod_tz),
        ("pickup_lfd_line", d["pickup_lfd_line"], pod_tz),
        ("pickup_lfd_rail", d["pickup_lfd_rail"], rail_tz),
    ]
    pod = d.get("pod") or {}
    for src in ("line", "facility"):
        for k in ("original", "current", "calculated"):
            out.append((f"pod.{src}.{k}", (pod.get(src) or {}).get(k), pod_tz))
    for k in ("original_value", "current_value"):
        out.append((f"pod.unified.{k}", (pod.get("unified") or {}).get(k), pod_tz))
    return [(f, v, z) for f, v, z in out if v is not None]


def test_lfds_in_both_wire_forms_in_their_zones(truth: dict[str, Any]) -> None:
    forms: dict[str, set[str]] = {}
    for c in (x["attributes"] for x in truth["containers"]):
        for field, value, zone in _lfd_values(c):
            lfd_day(value, zone)  # an instant is local midnight of the field's zone
            kind = "date" if DATE.match(value) else "instant"
            forms.setdefault(field.split(".")[0], set()).add(kind)
    for field in ("pickup_lfd", "ssl_lfd", "ind_facility_lfd_on", *LEGACY, "pod"):
        assert forms[field] == {"date", "instant"}, field


def test_a_bare_date_is_the_same_day_as_the_instant_it_replaces(truth: dict[str, Any]) -> None:
    # Rail containers whose rail LFD is a bare date while the pod values are instants (the mixed
    # form): the coalesced pickup_lfd, re-expressed in the POD zone, names the same day.
    seen = 0
    for c in (x["attributes"] for x in truth["containers"]):
        d = c["import_deadlines"]
        if d["pickup_lfd_rail"] and not d["pickup_lfd_line"] and not d["pickup_lfd_terminal"]:
            rail = lfd_day(d["pickup_lfd_rail"], c["final_destination_timezone"])
            assert lfd_day(c["pickup_lfd"], c["pod_timezone"]) == rail
            assert c["ind_facility_lfd_on"] == d["pickup_lfd_rail"]
            seen += 1
    assert seen > 0


def test_pod_deadlines_shape_and_every_combination(truth: dict[str, Any]) -> None:
    cs = [x["attributes"] for x in truth["containers"]]
    with_pod = [c for c in cs if "pod" in c["import_deadlines"]]
    without = [c for c in cs if "pod" not in c["import_deadlines"]]
    assert with_pod and without
    # The newer containers carry it.
    assert max(c["created_at"] for c in without) < min(c["created_at"] for c in with_pod)
    selections, withheld, manual, disagree, calculated = set(), 0, 0, 0, 0
    for c in with_pod:
        d = c["import_deadlines"]
        pod = d["pod"]
        assert set(pod) == {"line", "facility", "unified"}
        for src in ("line", "facility"):
            assert set(pod[src]) == {"original", "current", "calculated", "manual"}
            assert isinstance(pod[src]["manual"], bool)
        u = pod["unified"]
        assert set(u) == {
            "original_value",
            "original_selection",
            "current_value",
            "current_selection",
        }
        assert (u["current_value"] is None) == (u["current_selection"] is None)
        tz = c["pod_timezone"]
        if u["current_value"] is None:
            withheld += bool(pod["line"]["current"] or pod["facility"]["current"])
            continue
        selections.add(u["current_selection"])
        day = lfd_day(u["current_value"], tz)
        chosen = {
            "facility": pod["facility"]["current"],
            "line": pod["line"]["current"],
            "line_calculated": pod["line"]["calculated"],
        }[u["current_selection"]]
        assert chosen is not None and lfd_day(chosen, tz) == day
        calculated += pod["line"]["calculated"] is not None
        if pod["facility"]["manual"]:
            manual += 1
            assert lfd_day(pod["facility"]["original"], tz) < day
            assert u["original_value"] == pod["facility"]["original"]
            assert u["original_selection"] == "facility"
        legacy = [lfd_day(d[k], tz) for k in ("pickup_lfd_terminal", "pickup_lfd_line") if d[k]]
        disagree += any(x != day for x in legacy)
    assert selections == {"facility", "line", "line_calculated"}
    assert withheld and manual and disagree and calculated


# ---- filters ----------------------------------------------------------------------------------
def _utc_day(text: str) -> date:
    return ts(text).date()


def _expect(stamps: dict[str, Any], truth: dict[str, Any], field: str, pred: Any) -> list[str]:
    """Container ids in list order whose ``field`` (``updated_at`` or ``created_at``) UTC date
    satisfies ``pred``."""
    created = {c["id"]: c["attributes"]["created_at"] for c in truth["containers"]}

    def value(cid: str) -> str:
        return str(
            stamps["containers"][cid]["updated_at"] if field == "updated_at" else created[cid]
        )

    return [cid for cid in stamps["order"] if pred(_utc_day(value(cid)))]


@pytest.fixture(scope="module")
def listed(http: httpx.Client, stamps: dict[str, Any]) -> dict[str, Any]:
    _, cs = scan(http, "/containers", {"page[size]": 50})
    stamps["order"] = ids(cs)
    return stamps


@pytest.mark.parametrize(
    ("expr", "pred"),
    [
        ("2026-11-20", lambda d: d == date(2026, 11, 20)),
        ("=2026-11-20", lambda d: d == date(2026, 11, 20)),
        (">=2026-11-19", lambda d: d >= date(2026, 11, 19)),
        (">2026-11-19", lambda d: d > date(2026, 11, 19)),
        ("<2026-11-01", lambda d: d < date(2026, 11, 1)),
        ("<=2026-11-01", lambda d: d <= date(2026, 11, 1)),
        ("today", lambda d: d == date(2026, 11, 20)),
        (">=3.days.ago", lambda d: d >= date(2026, 11, 17)),
        ("<1.day.from_now", lambda d: d < date(2026, 11, 21)),
        ("2026-11-18,2026-11-20", lambda d: d in (date(2026, 11, 18), date(2026, 11, 20))),
        ("@exists", lambda d: True),
    ],
)
def test_container_updated_at_filter(
    http: httpx.Client, truth: dict[str, Any], listed: dict[str, Any], expr: str, pred: Any
) -> None:
    want = _expect(listed, truth, "updated_at", pred)
    assert want  # each case selects something
    bodies, got = scan(http, "/containers", {"filter[updated_at]": expr, "page[size]": 50})
    assert ids(got) == want
    assert all(b["meta"] == {"total": len(want)} for b in bodies)
    if len(bodies) > 1:
        assert "filter[updated_at]=" in bodies[0]["links"]["next"]
        assert "filter[updated_at]=" in bodies[0]["links"]["last"]


def test_repeated_key_is_and_and_created_at(
    http: httpx.Client, truth: dict[str, Any], listed: dict[str, Any]
) -> None:
    lo, hi = date(2026, 11, 10), date(2026, 11, 19)
    want = _expect(listed, truth, "updated_at", lambda d: lo <= d <= hi)
    bodies, got = scan(
        http,
        "/containers",
        [("filter[updated_at][]", ">=2026-11-10"), ("filter[updated_at][]", "<=2026-11-19")],
    )
    assert want and ids(got) == want and bodies[0]["meta"]["total"] == len(want)
    assert bodies[0]["links"]["current"].count("filter[updated_at][]=") == 2
    created = _expect(listed, truth, "created_at", lambda d: d >= date(2026, 11, 1))
    assert created
    _, got = scan(http, "/containers", {"filter[created_at]": ">=2026-11-01"})
    assert ids(got) == created
    both = set(created) & set(
        _expect(listed, truth, "updated_at", lambda d: d == date(2026, 11, 20))
    )
    _, got = scan(
        http, "/containers", {"filter[created_at]": ">=2026-11-01", "filter[updated_at]": "today"}
    )
    assert set(ids(got)) == both


def test_unknown_filters_ignored_bad_values_400_eta_filters_500(http: httpx.Client) -> None:
    plain = http.get("/containers", params={"page[size]": 50}).json()
    odd = http.get(
        "/containers",
        params={"page[size]": 50, "filter[colour]": "red", "filter[updated_since]": "2026-11-20"},
    ).json()
    assert odd["data"] == plain["data"] and odd["meta"] == {"total": 500}
    ships = http.get("/shipments", params={"filter[updated_at]": ">=2026-11-20T00:00:00Z"})
    assert ships.json()["meta"]["total"] == http.get("/shipments").json()["meta"]["total"]
    for key in ("filter[pod_eta_at]", "filter[pod_ata_at]"):
        r = http.get("/containers", params={key: ">=2026-11-01"})
        assert r.status_code == 500 and r.json()["errors"][0]["status"] == "500"
    for path, key, value in (
        ("/containers", "filter[updated_at]", "yesterday"),
        ("/containers", "filter[created_at][]", ">=2026-13-01"),
        ("/shipments", "filter[created_at]", ">=2026-10-01"),
        ("/shipments", "filter[created_at]", ">=2026-10-01T00:00:00"),
        ("/shipments", "filter[pod_eta_changed_at]", "<=2026-11-01T00:00:00Z"),
    ):
        r = http.get(path, params={key: value})
        assert r.status_code == 400, (key, value)
        assert r.json()["errors"][0]["source"]["parameter"] == key


def test_shipment_timestamp_filters(
    http: httpx.Client, truth: dict[str, Any], stamps: dict[str, Any]
) -> None:
    _, listing = scan(http, "/shipments", {"page[size]": 100})
    order = ids(listing)
    attrs = {s["id"]: s["attributes"] for s in truth["shipments"]}
    bound = "2026-11-10T06:30:00Z"
    want = [s for s in order if ts(attrs[s]["created_at"]) >= ts(bound)]
    bodies, got = scan(http, "/shipments", {"filter[created_at]": f">={bound}"})
    assert want and ids(got) == want
    assert bodies[0]["meta"] == {"total": len(want), "size": 30}
    _, got = scan(http, "/shipments", {"filter[created_at]": "<2026-11-10T06:30:00+00:00"})
    assert ids(got) == [s for s in order if s not in want]
    since = "2026-11-01T00:00:00Z"
    eta = [
        s
        for s in order
        if attrs[s]["line_tracking_stopped_at"] is None
        and attrs[s]["pod_ata_at"] is None
        and ts(stamps["shipments"][s]["pod_eta_changed_at"]) >= ts(since)
    ]
    assert eta and len(eta) < len(order)
    bodies, got = scan(
        http, "/shipments", {"filter[pod_eta_changed_at]": f">={since}", "page[size]": 5}
    )
    assert ids(got) == eta and bodies[0]["meta"]["total"] == len(eta)
    assert "filter[pod_eta_changed_at]=" in bodies[0]["links"]["next"]
    # pod_eta_at is what changed: a slipped ETA shows the original before the change.
    slipped = [
        s
        for s in eta
        if attrs[s]["pod_original_eta_at"]
        and attrs[s]["pod_eta_at"] != attrs[s]["pod_original_eta_at"]
    ]
    assert slipped


def test_internal_timestamps_are_not_in_payloads(
    truth: dict[str, Any], stamps: dict[str, Any]
) -> None:
    assert all("updated_at" not in c["attributes"] for c in truth["containers"])
    assert all(
        "updated_at" not in s["attributes"] and "pod_eta_changed_at" not in s["attributes"]
        for s in truth["shipments"]
    )
    assert set(stamps["containers"]) == set(ids(truth["containers"]))
    assert set(stamps["shipments"]) == set(ids(truth["shipments"]))
    assert all(c["updated_at"] <= CLOCK for c in stamps["containers"].values())
    assert all(
        s["updated_at"] <= CLOCK and s["pod_eta_changed_at"] <= CLOCK
        for s in stamps["shipments"].values()
    )


# ---- the world moves (own servers) ---------------------------------------------------------------
def test_updated_at_moves_on_refresh_and_advance() -> None:
    with SandboxThread(containers=200, seed=11, clock=CLOCK) as p:
        t0, g0 = p.timestamps(), p.ground_truth()
        p.advance(minutes=1)
        p.refresh(count=7)
        t1, g1 = p.timestamps(), p.ground_truth()
        moved = {k for k, v in t1["containers"].items() if v != t0["containers"][k]}
        assert len(moved) >= 7
        assert all(t1["containers"][k]["updated_at"] == "2026-11-20T12:01:00Z" for k in moved)
        res = p.advance(hours=24)
        t2, g2 = p.timestamps(), p.ground_truth()
        before = {c["id"]: c for c in g1["containers"]}
        changed = {c["id"] for c in g2["containers"] if c["id"] in before and c != before[c["id"]]}
        assert changed and res["changed_containers"] >= len(changed)
        for cid, v in t2["containers"].items():
            if cid in changed or cid not in before:
                assert v["updated_at"] == res["clock"] == "2026-11-21T12:01:00Z"
            elif v != t1["containers"][cid]:
                assert v["updated_at"] == res["clock"]
        sb1 = {s["id"]: s for s in g1["shipments"]}
        for s in g2["shipments"]:
            if s["id"] in sb1 and s != sb1[s["id"]]:
                assert t2["shipments"][s["id"]]["updated_at"] == res["clock"]
        # A container keeps its wire form over time.
        for c in g2["containers"]:
            old = before.get(c["id"])
            new_v, old_v = c["attributes"]["pickup_lfd"], old and old["attributes"]["pickup_lfd"]
            if new_v and old_v:
                assert bool(DATE.match(new_v)) == bool(DATE.match(old_v))
        assert g0["clock"] == CLOCK


def test_stored_utc_date_is_compared_not_the_ports_date() -> None:
    # 23:59 UTC on the 19th; an hour later it is the 20th in UTC but still the 19th at every
    # US port: the filter follows the UTC date.
    with SandboxThread(containers=150, seed=5, clock="2026-11-19T23:59:00Z") as p:
        c = p.client
        p.refresh(count=6)
        late = {
            k
            for k, v in p.timestamps()["containers"].items()
            if v["updated_at"] == "2026-11-19T23:59:00Z"
        }
        assert len(late) >= 6

        def listed(expr: str) -> set[str]:
            body = c.get(
                f"{p.base_url}/containers", params={"filter[updated_at]": expr, "page[size]": 50}
            ).json()
            found = {x["id"] for x in body["data"]}
            while body["links"].get("next"):
                body = c.get(body["links"]["next"]).json()
                found |= {x["id"] for x in body["data"]}
            return found

        assert late <= listed("2026-11-19") and not late & listed(">=2026-11-20")
        assert late <= listed("today")
        res = p.advance(minutes=60)
        assert res["clock"] == "2026-11-20T00:59:00Z"
        fresh = {
            k for k, v in p.timestamps()["containers"].items() if v["updated_at"] == res["clock"]
        }
        assert fresh
        assert fresh <= listed("2026-11-20") and not fresh & listed("<=2026-11-19")
        still = late - fresh  # refreshed at 23:59 and unchanged since
        assert still and still <= listed("1.days.ago") and not still & listed("today")


def test_active_share_settled_book_changes_little() -> None:
    with SandboxThread(containers=1000, seed=3, clock=CLOCK, active_share=0.1) as p:
        g = p.ground_truth()
        now = ts(CLOCK)
        settled = [
            c
            for c in g["containers"]
            if c["attributes"]["current_status"] == "empty_returned"
            and now - ts(c["attributes"]["empty_terminated_at"]) >= timedelta(days=30)
        ]
        assert len(settled) >= 850
        t0 = p.timestamps()
        res = p.advance(hours=24)
        assert 0 < res["changed_containers"] <= 120
        t1 = p.timestamps()
        moved = [k for k in t0["containers"] if t1["containers"][k] != t0["containers"][k]]
        assert len(moved) == res["changed_containers"]
        after = {c["id"]: c for c in p.ground_truth()["containers"]}
        assert all(after[c["id"]] == c for c in settled)
    with SandboxThread(containers=1000, seed=3, clock=CLOCK) as p:
        assert p.advance(hours=24)["changed_containers"] > 200  # the default book is busier


def test_delete_removes_a_container_upstream() -> None:
    with SandboxThread(containers=80, seed=2, clock=CLOCK) as p:
        c = p.client
        g = p.ground_truth()
        victim = g["containers"][5]
        sid = victim["relationships"]["shipment"]["data"]["id"]
        assert p.delete_container(victim["id"])["deleted"] == victim["id"]
        body = c.get(f"{p.base_url}/containers", params={"page[size]": 50}).json()
        assert body["meta"] == {"total": 79}
        listed = {x["id"] for x in body["data"]}
        listed |= {x["id"] for x in c.get(body["links"]["next"]).json()["data"]}
        assert victim["id"] not in listed and len(listed) == 79
        assert c.get(f"{p.base_url}/containers/{victim['id']}").status_code == 404
        assert victim["id"] not in {x["id"] for x in p.ground_truth()["containers"]}
        ship = c.get(f"{p.base_url}/shipments/{sid}", params={"include": "containers"}).json()
        assert victim["id"] not in {
            x["id"] for x in ship["data"]["relationships"]["containers"]["data"]
        }
        assert victim["id"] not in {x["id"] for x in ship.get("included", [])}
        gone = c.post(f"{p.admin_url}/delete", params={"container": victim["id"]})
        assert gone.status_code == 404
        assert p.advance(hours=12)["clock"] == "2026-11-21T00:00:00Z"
        assert victim["id"] not in {x["id"] for x in p.ground_truth()["containers"]}
