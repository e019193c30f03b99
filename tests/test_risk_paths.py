"""compute_risk's fast paths (tables, hash joins, hourly dates) equal its generic paths.

The fast paths apply when the data's value ranges are small (phrase, cost and LFD-estimate
tables), when every zone has whole-hour offsets and every instant is inside the calendar window
(hourly local dates), and when key hashes are unique (hash joins). Each is switched off here and
the outputs compared on random data with NULLs, duplicates, odd zones and wide date ranges.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from pipelines.analytics import compute_risk, load_tariffs
from pipelines.analytics import risk as R

AS_OF = datetime(2025, 11, 14, 16, tzinfo=UTC)
US = ["America/Los_Angeles", "America/New_York", "America/Chicago", "UTC", "Bad/Zone", None]
ODD = ["Asia/Kolkata", "Pacific/Chatham"]  # offsets that are not whole hours
TARIFFS = """\
charge,carrier_scac,port_locode,equipment,free_days,free_basis,tiers,currency,source,as_of
demurrage,,,dry,5,working,1-5:220;6+:280,USD,x,2021-01-01
demurrage,,USLAX,dry,4,working,1-5:220.5;6+:280.25,USD,x,2021-01-01
demurrage,,USNYC,,7,calendar,1-2:99.9;3-3:12.34;4-10:50;11+:1.1,EUR,x,2021-01-01
demurrage,MAEU,,dry,,working,1-4:235;5-9:285;10+:335,USD,x,2019-01-01
demurrage,MSCU,,,0,working,1-1:1;2-3:0.1;4+:0.3,CAD,x,2019-01-01
detention,,,,4,calendar,1-4:150;5+:200,USD,x,2021-01-01
detention,,USCHI,,2,working,1+:77.7,USD,x,2021-01-01
"""


def _rnd(seed: int, mod: int) -> pl.Expr:
    return (pl.int_range(pl.len()).hash(seed) % mod).cast(pl.Int64)


def _pick(seed: int, values: list[object]) -> pl.Expr:
    return pl.lit(pl.Series(values)).gather(_rnd(seed, len(values)))


def _ts(seed: int, nulls: int = 3, wide: bool = False) -> pl.Expr:
    """Random instants (any second) in Oct-Dec 2025; ``wide``: 1 in 40 in 1965-2060."""
    base = int(datetime(2025, 10, 1, tzinfo=UTC).timestamp())
    secs = pl.lit(base) + _rnd(seed, 80 * 86400)
    if wide:
        far = pl.lit(int(datetime(1965, 1, 1, tzinfo=UTC).timestamp())) + _rnd(
            seed + 1, 95 * 365 * 86400)
        secs = pl.when(_rnd(seed + 2, 40) == 0).then(far).otherwise(secs)
    ts = (secs * 1_000_000).cast(pl.Datetime("us", "UTC"))
    return pl.when(_rnd(seed + 3, nulls) != 0).then(ts) if nulls else ts


def _frames(n: int, zones: list[str | None], wide: bool) -> dict[str, pl.LazyFrame]:
    c = pl.select(i=pl.int_range(n)).with_columns(
        id=pl.format("c{}", "i"), number=pl.format("N{}", "i"),
        shipment_id=pl.when(_rnd(1, 20) > 0).then(pl.format("s{}", _rnd(2, n // 2 + 20))),
        pod_terminal_id=_pick(3, ["t0", "t1", "t2", "tx", None]),
        equipment_type=_pick(4, ["dry", "reefer", None]),
        current_status=_pick(5, ["available", "on_rail", "awaiting_inland_transfer",
                                 "picked_up", "delivered", "empty_returned", None]),
        pod_timezone=_pick(6, zones), final_destination_timezone=_pick(7, [*zones, None, None]),
        empty_terminated_timezone=_pick(8, [*zones, None]),
        pod_rail_carrier_scac=pl.when(_rnd(9, 8) == 0).then(pl.lit("UPRR")),
        available_for_pickup=_pick(10, [True, False, None]),
        availability_known=_pick(11, [True, False, None]),
        fees_at_pod_terminal_known=_pick(13, [True, False, None]),
        pickup_lfd_terminal=_ts(20, 4, wide), pickup_lfd_rail=_ts(24),
        pickup_lfd_line=_ts(28, 2, wide), ind_facility_lfd_on=_ts(32, 6),
        pickup_appointment_at=_ts(36, 2, wide), pod_discharged_at=_ts(40, 5, wide),
        pod_full_out_at=pl.when(_rnd(47, 4) == 0).then(_ts(44, 0, wide)),
        final_destination_full_out_at=pl.when(_rnd(48, 6) == 0).then(_ts(49, 0)),
        empty_terminated_at=pl.when(_rnd(52, 8) == 0).then(_ts(53, 0, wide)),
        terminal_checked_at=_ts(56, 10),
        pod_rail_departed_at=pl.when(_rnd(64, 10) == 0).then(_ts(65, 0)),
        ind_ata_at=pl.when(_rnd(72, 10) == 0).then(_ts(73, 0)),
    ).drop("i")
    s = pl.select(i=pl.int_range(n // 2)).with_columns(
        id=pl.format("s{}", _rnd(80, n // 2)),  # duplicate shipment ids
        bill_of_lading_number=pl.format("BL{}", "i"),
        shipping_line_scac=_pick(81, ["MAEU", "maeu", "MSCU", None, "HLCU"]),
        port_of_discharge_locode=_pick(82, ["USLAX", "USNYC", "USHOU", None, "USCHI"]),
        destination_locode=_pick(83, [None, None, "USCHI", "USNYC"]),
        pod_timezone=_pick(85, zones), destination_timezone=_pick(86, zones),
        pod_eta_at=_ts(87, 5), pod_ata_at=_ts(90, 2), pod_original_eta_at=_ts(93, 5),
        line_tracking_stopped_at=pl.when(_rnd(97, 7) == 0).then(_ts(98, 0)),
    ).drop("i")
    h = pl.select(i=pl.int_range(n // 4)).select(
        container_id=pl.format("c{}", _rnd(100, n + 10)),
        name=_pick(101, ["customs", "USDA", "TMF", None]),
        status=_pick(102, ["hold", "pending", "released", None]),
    )
    f = pl.select(i=pl.int_range(n // 2)).select(
        container_id=pl.format("c{}", _rnd(110, n // 3)),
        type=_pick(111, ["demurrage", "total", "exam", None]),
        amount=pl.when(_rnd(112, 9) > 0).then(_rnd(113, 10**7).cast(pl.Float64) / 7),
    )
    t = pl.DataFrame({"id": ["t0", "t1", "t2", "t0"], "name": ["Zero", "One", None, "Dup"],
                      "nickname": ["Z", None, None, "D"], "firms_code": ["Y0", "Y1", None, "YD"]})
    return {"containers": c.lazy(), "shipments": s.lazy(), "container_holds": h.lazy(),
            "container_fees": f.lazy(), "terminals": t.lazy()}


@pytest.fixture(scope="module")
def tariffs(tmp_path_factory: pytest.TempPathFactory) -> pl.DataFrame:
    p: Path = tmp_path_factory.mktemp("tariffs") / "t.csv"
    p.write_text(TARIFFS)
    return load_tariffs(p)


def _generic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(R, "MAX_PHRASE_TABLE", 0)
    monkeypatch.setattr(R, "MAX_COST_TABLE", 0)
    monkeypatch.setattr(R, "HOURLY_DATES", False)
    monkeypatch.setattr(R, "HASH_JOIN", False)


@pytest.mark.parametrize(("zones", "wide", "as_of"), [
    (US, False, AS_OF),  # every fast path
    (US, False, datetime(2025, 3, 9, 10, 30, tzinfo=UTC)),  # DST change day
    (US, True, AS_OF),  # instants outside the window: local_date formula
    (US + ODD, False, AS_OF),  # half-hour zones: local_date formula
    (US + ODD, True, datetime(2012, 3, 11, 7, tzinfo=UTC)),
])
def test_fast_paths_equal_generic(
    monkeypatch: pytest.MonkeyPatch, tariffs: pl.DataFrame,
    zones: list[str | None], wide: bool, as_of: datetime,
) -> None:
    frames = _frames(3000, zones, wide)
    fast = compute_risk(frames, as_of, tariffs).collect()
    assert fast.height == 3000
    with monkeypatch.context() as m:
        _generic(m)
        generic = compute_risk(frames, as_of, tariffs).collect()
    assert_frame_equal(fast, generic, check_exact=True)


def test_hourly_dates_used_only_inside_window() -> None:
    zt = R.ZoneTable(["America/Chicago"])
    inside = int(datetime(2025, 1, 1, tzinfo=UTC).timestamp() * 1e6)
    outside = int(datetime(2050, 1, 1, tzinfo=UTC).timestamp() * 1e6)
    assert zt.hourly_dates(inside, inside + 3_600_000_000) is not None
    assert zt.hourly_dates(inside, outside) is None
    assert R.ZoneTable(["Asia/Kolkata"]).hourly_dates(inside, inside) is None


def test_hash_join_falls_back_to_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    left = pl.Series(["a", "b", None, "c", "a"])
    right = pl.Series(["c", None, "a", "x"])
    expect = [2, None, None, 0, 2]
    assert R._row_indexes([(left, right)])[0].to_list() == expect
    monkeypatch.setattr(R, "HASH_JOIN", False)
    assert R._row_indexes([(left, right)])[0].to_list() == expect


def test_hash_collision_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A left value hashing like a different right value must not match it, and right values
    sharing a hash must not be joined on it."""
    def weak_hash(key: pl.Expr) -> pl.Expr:
        return key.str.len_bytes().cast(pl.UInt64)  # "q" collides with "a", "b" with "a"

    monkeypatch.setattr(R, "_key_hash", weak_hash)
    left = pl.Series(["a", "q", "xyz", None])
    right = pl.Series(["xyz", "a"])
    assert R._row_indexes([(left, right)])[0].to_list() == [1, None, 0, None]
    # right hashes not unique ("a" and "b"), beside a pair whose hashes are fine
    pairs = [(pl.Series(["b", "zz", "a"]), pl.Series(["a", "b", "zz"])), (left, right)]
    got = [s.to_list() for s in R._row_indexes(pairs)]
    assert got == [[1, 2, 0], [1, None, 0, None]]


def test_per_container_groups_by_container_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Holds and fees rows grouped by their container's row: an id on two rows feeds both, rows
    of no container (or a NULL id) are left out, and hash collisions do not join wrong rows."""
    ids = pl.Series(["a", "b", None, "a", "q"])
    rows = pl.LazyFrame({"container_id": ["a", "b", "zz", None, "q", "a"],
                         "v": [1, 2, 4, 8, 16, 32]})

    def sums() -> dict[int, int]:
        (df,) = R._per_container(ids, [(rows, [pl.col("v").sum()])])
        assert df.columns == ["_row", "v"]
        return dict(df.iter_rows())

    expect = {0: 33, 1: 2, 3: 33, 4: 16}
    assert sums() == expect
    # one-byte ids all share this "hash": matched on it alone, "b" would take "a"'s rows
    monkeypatch.setattr(R, "_key_hash", lambda key: key.str.len_bytes().cast(pl.UInt64))
    assert sums() == expect
    monkeypatch.setattr(R, "HASH_JOIN", False)
    assert sums() == expect


def test_reason_codes_too_large_take_the_generic_path(
    monkeypatch: pytest.MonkeyPatch, tariffs: pl.DataFrame
) -> None:
    """Sentence codes that would not fit in Int64: each row's sentence is built as text."""
    frames = _frames(3000, US, False)
    fast = compute_risk(frames, AS_OF, tariffs).collect()
    plan = R.risk_plan(frames, AS_OF, tariffs)[1]
    assert "_reason_code" in plan[-2] and "risk_reason" in plan[-1]  # the coded path ran
    monkeypatch.setattr(R, "MAX_REASON_CODE", 10)
    plan = R.risk_plan(frames, AS_OF, tariffs)[1]
    assert "_reason_code" not in plan[-1] and "risk_reason" in plan[-1]
    generic = compute_risk(frames, AS_OF, tariffs).collect()
    assert_frame_equal(fast, generic, check_exact=True)


def test_holds_mask_equals_list_aggregation(
    monkeypatch: pytest.MonkeyPatch, tariffs: pl.DataFrame
) -> None:
    """Holds as per-container bit masks (NULL names, duplicates, both statuses) give the same
    lists and reasons as aggregating lists, the path taken when names outnumber the bits."""
    frames = _frames(3000, US, False)
    holds = frames["container_holds"].collect()
    assert holds["name"].null_count() and holds.is_duplicated().any()  # the cases are there
    masked = compute_risk(frames, AS_OF, tariffs).collect()
    assert masked.filter(pl.col("blocking_holds").list.len() > 1).height > 0
    monkeypatch.setattr(R, "_MASK_BITS", 4)  # 3 names and NULL need 8 bits: lists instead
    listed = compute_risk(frames, AS_OF, tariffs).collect()
    assert_frame_equal(masked, listed, check_exact=True)


def test_join_rows_are_put_back_in_left_order() -> None:
    """The joins run without keeping the left order; the row indexes come back in it."""
    shuffled = pl.DataFrame({"_l": [3, 0, 2, 1], "_i": [None, 7, 5, 9]},
                            schema={"_l": pl.UInt32, "_i": pl.UInt32})
    assert R._in_left_order(shuffled, 4).to_list() == [7, 9, 5, None]
    ordered = shuffled.sort("_l")
    assert R._in_left_order(ordered, 4).to_list() == [7, 9, 5, None]


def test_local_dates_null_instant_and_null_zone() -> None:
    """A NULL instant has no date; a NULL zone index counts as UTC, in both date paths."""
    zt = R.ZoneTable(["America/Chicago"])
    ts = [datetime(2025, 3, 9, 3, 30, tzinfo=UTC), None, datetime(2025, 3, 9, 3, 30, tzinfo=UTC)]
    df = pl.DataFrame({"ts": ts, "z": [1, 1, None]},
                      schema={"ts": pl.Datetime("us", "UTC"), "z": pl.Int32})
    lo = int(datetime(2025, 3, 1, tzinfo=UTC).timestamp() * 1e6)
    hourly = zt.hourly_dates(lo, lo + 30 * 86_400_000_000)
    assert hourly is not None
    want = [datetime(2025, 3, 8).date(), None, datetime(2025, 3, 9).date()]
    for local_date in (zt.local_date, hourly):
        got = df.select(local_date(pl.col("ts"), pl.col("z"))).to_series().to_list()
        assert got == want


def test_add_working_days_skips_weekends_and_holidays_and_keeps_nulls() -> None:
    """Fri 7 Nov 2025 + 1 working day is Mon 10 Nov; Mon 10 Nov + 1 is Wed 12 Nov (Tue 11 Nov
    is Veterans Day); + 3 from Fri 7 Nov is Thu 13 Nov (Mon 10, Wed 12, Thu 13). A NULL day or
    count gives NULL."""
    cal = R.working_calendar()
    df = pl.DataFrame(
        {"d": [date(2025, 11, 7), date(2025, 11, 10), date(2025, 11, 7), None, date(2025, 11, 7)],
         "n": [1, 1, 3, 1, None]},
        schema={"d": pl.Date, "n": pl.Int32},
    )
    got = df.select(cal.add_working_days(pl.col("d"), pl.col("n"))).to_series().to_list()
    assert got == [date(2025, 11, 10), date(2025, 11, 12), date(2025, 11, 13), None, None]
