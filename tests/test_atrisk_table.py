"""The at-risk table at 80, 100 and 160 columns (rich's console width): the container number,
the level and the binding LFD with its source are never cut; narrow terminals get one or two
lines a container and what fits their height; filters and limits refuse bad values."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from freetime_cli.atrisk_table import (
    Filters,
    layout,
    parse_limit,
    print_at_risk,
    render,
    rows_that_fit,
    total_line,
)
from pipelines.analytics import AT_RISK_LEVELS

pytestmark = pytest.mark.fast

TERMINALS = [
    ("Oakland International Container Terminal", "Z985", "USOAK"),
    ("Barbours Cut Container Terminal", "S787", "USHOU"),
    ("Pier [A] /bold", "Y258", "USLAX"),
]
SOURCES = ["line", "terminal", "pod_line_calculated", "rail"]


def rows(n: int = 40) -> list[dict[str, object]]:
    out = []
    for i in range(n):
        name, firms, port = TERMINALS[i % len(TERMINALS)]
        level = AT_RISK_LEVELS[min(i // 15, len(AT_RISK_LEVELS) - 1)]
        out.append(
            {
                "rank": i + 1,
                "container": f"MSCU{1000000 + i * 7919:07d}",
                "risk_level": level,
                "lfd": f"2026-11-{10 + i % 15:02d}",
                "lfd_source": SOURCES[i % len(SOURCES)],
                "days_to_lfd": -12 + i,
                "working_days_to_lfd": -9 + i,
                "terminal": name,
                "terminal_code": firms,
                "port": port,
                "carrier": ["MAEU", "HLCU", "CMDU"][i % 3],
                "reason": f"LFD passed {12 - i} days ago at {firms} (line); not available; "
                "customs hold; [red] no appointment before the gate closes on Friday",
                "projected_demurrage": None if i % 5 == 0 else 1000.0 + 10 * i,
                "accrued_demurrage": 500.0,
                "currency": "USD",
                "blocking_holds": "customs, freight" if i % 4 == 0 else "",
                "ready_for_pickup": i % 2 == 0,
                "pickup_appointment_at": None,
            }
        )
    return out


def _print(width: int, data: list[dict[str, object]], **kw: object) -> list[str]:
    buf = io.StringIO()
    con = Console(
        file=buf,
        width=width,
        height=24,
        force_terminal=True,
        color_system=None,
        legacy_windows=False,
    )
    print_at_risk(con, data, title="At-risk containers", **kw)  # type: ignore[arg-type]
    return buf.getvalue().splitlines()


def _container_lines(lines: list[str], data: list[dict[str, object]]) -> dict[str, str]:
    found = {}
    for r in data:
        hits = [line for line in lines if str(r["container"]) in line]
        if hits:
            found[str(r["container"])] = hits[0]
    return found


@pytest.mark.parametrize("width", [80, 100, 160])
def test_nothing_essential_is_cut_at_any_width(width: int) -> None:
    data = rows()
    lines = _print(width, data, limit=0)
    assert all(len(line) <= width for line in lines), [x for x in lines if len(x) > width]
    found = _container_lines(lines, data)
    assert set(found) == {str(r["container"]) for r in data}
    for r in data:
        line = found[str(r["container"])]
        # the whole number, the whole level, the LFD and its source and the days, on its line
        assert re.search(rf"\b{r['risk_level']}\b", line), line
        assert f"{r['lfd']} {r['lfd_source']}" in line, line
        assert re.search(rf"(^|\s){r['days_to_lfd']}(\s|$)", line), line
    assert "…" not in " ".join(found.values())  # a cut shows an ellipsis: none in these lines


def test_80_columns_hold_ten_containers_in_24_lines() -> None:
    data = rows()
    lines = _print(80, data)  # no limit: what fits a 24-line terminal, and the prompt after
    assert len(lines) <= 23
    assert len(_container_lines(lines, data)) >= 10
    assert lines[-1].startswith(f"10 shown, {len(data) - 10} more (--limit 0: all); projected")
    assert layout(data[:10], 80).lines_per_row == 2
    # the reason, on its own line, is the part cut to the width
    assert any(line.startswith("    LFD passed") and line.endswith("…") for line in lines)


def test_wider_terminals_show_more_columns_in_longer_forms() -> None:
    data = rows(12)
    keys = {w: layout(data, w).keys for w in (80, 100, 160)}
    assert set(keys[80]) < set(keys[100]) <= set(keys[160])
    assert {"container", "level", "lfd", "days", "projected", "terminal"} <= set(keys[80])
    short80 = {s.column.key: s.short for s in layout(data, 80).columns}
    assert short80["terminal"]  # the FIRMS code, not the name
    lines80 = _print(80, data, limit=0)
    assert "Z985" in "\n".join(lines80) and "Oakland International" not in "\n".join(lines80)
    wide = layout(data, 80, wide=True)
    assert wide.reason_inline and not any(s.short for s in wide.columns)
    assert {"appointment", "accrued", "rank", "ready"} <= set(wide.keys)  # even empty ones
    text = "\n".join(_print(80, data, limit=0, wide=True))
    assert "Oakland International Container Terminal" in text  # --wide: every column in full
    assert "no appointment before the gate closes on Friday" in text


def test_one_line_a_container_when_the_reasons_fit() -> None:
    data = [dict(r, reason="LFD passed") for r in rows(10)]
    assert layout(data, 100).lines_per_row == 1
    lines = _print(100, data, limit=0)
    assert len(lines) == 1 + 1 + 10 + 1  # title, header, rows, total
    assert lines[1].rstrip().endswith("reason")


def test_api_text_is_printed_as_it_is_not_as_markup() -> None:
    data = rows(3)
    text = "\n".join(_print(160, data, limit=0))
    assert "[red] no appointment" in text and "Pier [A] /bold" in text
    assert render(data, 160, title="[b]x[/b]")[0].plain == "[b]x[/b]"


def test_limit_and_total_of_what_is_shown() -> None:
    data = rows(20)
    lines = _print(160, data, limit=3)
    assert len(_container_lines(lines, data)) == 3
    # rows 0..2: 0 is uncosted, 1 and 2 cost 1,010 and 1,020
    assert lines[-1] == (
        "3 shown, 17 more (--limit 0: all); projected demurrage 2,030 USD, 1 uncosted"
    )
    assert total_line(data, 20) == "20 shown; projected demurrage 17,600 USD, 4 uncosted"
    big = [dict(r, projected_demurrage=123_456_789.0) for r in data[:10]]
    assert len(total_line(big, 123_456, 60)) <= 60 < len(total_line(big, 123_456))
    assert rows_that_fit(data, 80, 24) == 10 and rows_that_fit(data, 80, 24, reserve=4) == 8
    not_a_terminal = Console(file=io.StringIO(), width=80, height=24)
    print_at_risk(not_a_terminal, data, title="t")
    assert "more" not in not_a_terminal.file.getvalue()  # type: ignore[attr-defined]


def test_filters_by_port_terminal_and_carrier() -> None:
    data = rows(30)
    assert {r["port"] for r in Filters.parse(port=" uslax").apply(data)} == {"USLAX"}
    by_code = Filters.parse(terminal="z985").apply(data)
    by_name = Filters.parse(terminal="oakland").apply(data)
    assert by_code == by_name and by_code and {r["terminal_code"] for r in by_code} == {"Z985"}
    both = Filters.parse(port="USOAK", carrier="maeu").apply(data)
    assert both and all(r["carrier"] == "MAEU" and r["port"] == "USOAK" for r in both)
    assert Filters.parse().apply(data) == data and not Filters.parse()
    assert Filters.parse(port="USOAK", carrier="MAEU").describe() == "port USOAK, carrier MAEU"


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"port": "LA"}, "--port 'LA' is not a UN/LOCODE"),
        ({"port": "US LAX"}, "not a UN/LOCODE"),
        ({"carrier": "MAERSK1"}, "--carrier 'MAERSK1' is not a carrier SCAC"),
        ({"terminal": "  "}, "--terminal is empty"),
    ],
)
def test_bad_filters_are_one_line(kw: dict[str, str], needle: str) -> None:
    with pytest.raises(ValueError, match=re.escape(needle)) as info:
        Filters.parse(**kw)
    assert "\n" not in str(info.value)


def test_limit_values() -> None:
    assert parse_limit(None) is None and parse_limit("0") == 0 and parse_limit(" 12 ") == 12
    for bad, needle in (("-1", "negative"), ("ten", "not a whole number")):
        with pytest.raises(ValueError, match=needle):
            parse_limit(bad)
