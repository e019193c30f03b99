"""The at-risk table as a dispatcher reads it, on any terminal width: one rendering, used by
``freetime risk`` and ``freetime run``.

Contract of :func:`layout` and :func:`print_at_risk`:
- the container number, the risk level, the binding LFD with its source and the days left are
  never cut, whatever the width (below about 50 columns a line is longer than the terminal);
- the other columns are added by importance while they fit, first in their short form (a
  terminal's FIRMS code, a hold's first letters), then widened to their full form while the
  width allows; what does not fit is left out, and so is a column empty in every row shown
  (``wide=True`` shows every column in full);
- the reason goes on the same line when every shown reason fits there, otherwise on a line of
  its own under its container, cut with an ellipsis at the width: a container takes one line,
  or two;
- without a limit, a terminal shows what fits its height (leaving a line for the prompt);
  output that is not a terminal gets every row. The last line says how many are shown, how
  many more there are, and the projected demurrage of those shown.

Rows are those of :func:`flows.artifacts.at_risk_rows` (most urgent first).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.text import Text

Row = Mapping[str, Any]

LEVEL_STYLE = {"overdue": "bold red", "due_today": "red", "imminent": "yellow"}
GAP = 2  # spaces between columns
REASON_INDENT = 4  # a reason on its own line starts under the container, a little in
#: Lines around the rows: title, header, the total (with "N more"), and the shell's prompt
#: after the command (else the title scrolls off a full screen).
FRAME_LINES = 4


def _lfd(r: Row) -> str:
    lfd = str(r.get("lfd") or "no LFD")
    return f"{lfd} {r['lfd_source']}" if r.get("lfd_source") else lfd


def _days(r: Row) -> str:
    return "" if r.get("days_to_lfd") is None else str(r["days_to_lfd"])


def _opt(key: str) -> Callable[[Row], str]:
    return lambda r: "" if r.get(key) is None else str(r[key])


def _money(key: str) -> Callable[[Row], str]:
    def cell(r: Row) -> str:
        v = r.get(key)
        return "n/a" if v is None else f"{v:,.0f}"

    return cell


def _holds_short(r: Row) -> str:
    """``customs, freight`` -> ``cus+fre``: enough to tell which holds block the box."""
    names = [h.strip() for h in str(r.get("blocking_holds") or "").split(",") if h.strip()]
    return "+".join(n[:3].lower() for n in names)


def _ready(r: Row) -> str:
    v = r.get("ready_for_pickup")
    return "" if v is None else ("yes" if v else "no")


def _appointment(r: Row) -> str:
    v = r.get("pickup_appointment_at")
    return "" if not v else str(v).replace("T", " ")[:16]


@dataclass(frozen=True)
class Column:
    """One column: its header and cell in full form and, when it has one, a short form."""

    key: str
    header: str
    cell: Callable[[Row], str]
    right: bool = False
    short_header: str | None = None
    short_cell: Callable[[Row], str] | None = None


#: Never cut, always shown.
ESSENTIAL = (
    Column("container", "container", _opt("container")),
    Column("level", "level", _opt("risk_level")),
    Column("lfd", "LFD", _lfd),
    Column("days", "days", _days, right=True),
)
#: The others, most important first: the order they are added in as the width allows.
OPTIONAL = (
    Column("projected", "projected", _money("projected_demurrage"), right=True),
    Column(
        "terminal",
        "terminal",
        lambda r: str(r.get("terminal") or ""),
        short_header="term",
        short_cell=lambda r: str(r.get("terminal_code") or r.get("terminal") or ""),
    ),
    Column(
        "holds",
        "holds",
        lambda r: str(r.get("blocking_holds") or ""),
        short_cell=_holds_short,
    ),
    Column("wd", "wd", _opt("working_days_to_lfd"), right=True),
    Column("carrier", "line", _opt("carrier")),
    Column("port", "port", _opt("port")),
    Column("ready", "ready", _ready),
    Column("rank", "#", _opt("rank"), right=True),
    Column("accrued", "accrued", _money("accrued_demurrage"), right=True),
    Column("appointment", "appointment", _appointment),
)
#: Display order, left to right (``reason`` last).
ORDER = (
    "rank",
    "container",
    "level",
    "lfd",
    "days",
    "wd",
    "ready",
    "holds",
    "projected",
    "accrued",
    "terminal",
    "port",
    "carrier",
    "appointment",
)


@dataclass
class Shown:
    """A column as laid out: which form, its width."""

    column: Column
    short: bool
    width: int

    @property
    def header(self) -> str:
        c = self.column
        return (c.short_header or c.header) if self.short else c.header

    def cell(self, r: Row) -> str:
        c = self.column
        return (c.short_cell or c.cell)(r) if self.short else c.cell(r)


@dataclass
class Layout:
    """Columns in display order, and whether the reason shares the container's line."""

    columns: list[Shown]
    reason_inline: bool
    width: int  # the width laid out for

    @property
    def lines_per_row(self) -> int:
        return 1 if self.reason_inline else 2

    @property
    def keys(self) -> list[str]:
        return [s.column.key for s in self.columns]


def _measure(column: Column, short: bool, rows: Sequence[Row]) -> Shown:
    probe = Shown(column, short, 0)
    probe.width = max([len(probe.header), *(len(probe.cell(r)) for r in rows)])
    return probe


def _total(shown: Sequence[Shown]) -> int:
    return sum(s.width for s in shown) + GAP * max(len(shown) - 1, 0)


def layout(rows: Sequence[Row], width: int, wide: bool = False) -> Layout:
    """Which columns the ``rows`` get at ``width`` columns (see the module docstring)."""
    reason_w = max([len("reason"), *(len(str(r.get("reason") or "")) for r in rows)])
    if wide:
        shown = [_measure(c, False, rows) for c in (*ESSENTIAL, *OPTIONAL)]
        return Layout(_ordered(shown), True, width)
    shown = [_measure(c, False, rows) for c in ESSENTIAL]
    optional = [(c, _measure(c, c.short_cell is not None, rows)) for c in OPTIONAL]
    inline = False
    # The reason joins the line when it fits after the three most important optional columns
    # in short form: better one line per container than every column.
    first = [s for _, s in optional[:3]]
    if _total([*shown, *first]) + GAP + reason_w <= width:
        inline = True
    budget = width - (GAP + reason_w if inline else 0)
    for c, s in optional:
        if not any(c.cell(r) for r in rows):  # nothing to show in it
            continue
        if _total([*shown, s]) <= budget:
            shown.append(s)
    for i, s in enumerate(shown):  # widen short forms, most important first, while they fit
        if s.short:
            full = _measure(s.column, False, rows)
            if _total([*shown[:i], full, *shown[i + 1 :]]) <= budget:
                shown[i] = full
    return Layout(_ordered(shown), inline, width)


def _ordered(shown: list[Shown]) -> list[Shown]:
    return sorted(shown, key=lambda s: ORDER.index(s.column.key))


def _line(lay: Layout, cells: Sequence[str], styles: Mapping[str, str]) -> Text:
    text = Text(no_wrap=True, overflow="ignore")
    for i, (s, cell) in enumerate(zip(lay.columns, cells, strict=True)):
        if i:
            text.append(" " * GAP)
        pad = " " * (s.width - len(cell))
        text.append(pad + cell if s.column.right else cell + pad, styles.get(s.column.key, ""))
    text.rstrip()
    return text


def render(
    rows: Sequence[Row], width: int, wide: bool = False, title: str | None = None
) -> list[Text]:
    """The lines of the table (title, header, rows), laid out for ``width`` columns."""
    lay = layout(rows, width, wide)
    lines: list[Text] = []
    if title:
        lines.append(Text(title, style="bold"))
    header = _line(lay, [s.header for s in lay.columns], {})
    if lay.reason_inline:
        header.append(" " * GAP + "reason")
    header.stylize("bold")
    lines.append(header)
    for r in rows:
        level = str(r.get("risk_level") or "")
        line = _line(lay, [s.cell(r) for s in lay.columns], {"level": LEVEL_STYLE.get(level, "")})
        reason = str(r.get("reason") or "")  # Text: API text is never read as markup
        if lay.reason_inline:
            line.append(" " * GAP + reason)
            lines.append(line)
        else:
            lines.append(line)
            below = Text(" " * REASON_INDENT + reason, style="dim", no_wrap=True)
            if not wide:
                below.truncate(max(width, REASON_INDENT + 8), overflow="ellipsis")
            lines.append(below)
    return lines


def rows_that_fit(rows: Sequence[Row], width: int, height: int, reserve: int = 0) -> int:
    """How many of ``rows`` a ``width`` x ``height`` screen shows, keeping ``reserve`` lines
    for what is printed around the table (at least one row)."""
    room = height - reserve - FRAME_LINES
    probe = list(rows[: max(height, 1)])
    per_row = layout(probe, width).lines_per_row
    return max(1, min(len(rows), room // per_row))


def total_line(shown: Sequence[Row], of: int, width: int = 10_000) -> str:
    """``10 shown, 88 more (--limit 0: all); projected demurrage 12,345 USD, 2 uncosted``: what
    is shown, what is not, and the projected demurrage of what is shown; shorter words when
    the line would not fit ``width``."""
    costs = [r.get("projected_demurrage") for r in shown]
    total = sum(float(c) for c in costs if c is not None)
    found = {r.get("currency") for r in shown if r.get("currency")}
    currency = f" {found.pop()}" if len(found) == 1 else ""
    uncosted = sum(1 for c in costs if c is None)
    more = of - len(shown)
    for long in (True, False):
        head = f"{len(shown)} shown" + (
            f", {more:,} more" + (" (--limit 0: all)" if long else "") if more else ""
        )
        cost = ("projected demurrage " if long else "projected ") + f"{total:,.0f}{currency}"
        line = f"{head}; {cost}" + (f", {uncosted} uncosted" if uncosted else "")
        if len(line) <= width:
            break
    return line


def print_at_risk(
    console: Console,
    rows: Sequence[Row],
    *,
    title: str,
    limit: int | None = None,
    wide: bool = False,
    reserve: int = 0,
) -> None:
    """Print ``rows`` (most urgent first) on ``console``, at its width.

    ``limit``: rows to show (0: all); None: what fits a terminal's height (``reserve``: lines
    printed around the table), every row when the console is not a terminal.
    """
    if limit is None:
        limit = (
            rows_that_fit(rows, console.width, console.height, reserve)
            if (console.is_terminal)
            else 0
        )
    shown = list(rows) if limit == 0 else list(rows[:limit])
    for line in render(shown, console.width, wide, title):
        console.print(line, crop=False, soft_wrap=True)
    console.print(total_line(shown, len(rows), console.width), highlight=False, soft_wrap=True)


# -- filters -------------------------------------------------------------------------------------

_LOCODE = re.compile(r"^[A-Z]{2}[A-Z2-9]{3}$")
_SCAC = re.compile(r"^[A-Z]{2,4}$")


@dataclass(frozen=True)
class Filters:
    """What ``--port``, ``--terminal`` and ``--carrier`` ask for (None: anything)."""

    port: str | None = None
    terminal: str | None = None
    carrier: str | None = None

    @classmethod
    def parse(
        cls, port: str | None = None, terminal: str | None = None, carrier: str | None = None
    ) -> Filters:
        """Normalised filters. Raises ValueError, with a message for the user, on a value
        that cannot be a port (UN/LOCODE), a carrier (SCAC) or a terminal."""
        p = port.strip().upper() if port is not None else None
        if p is not None and not _LOCODE.match(p):
            raise ValueError(f"--port {port!r} is not a UN/LOCODE (5 characters, e.g. USLAX)")
        c = carrier.strip().upper() if carrier is not None else None
        if c is not None and not _SCAC.match(c):
            raise ValueError(
                f"--carrier {carrier!r} is not a carrier SCAC (2-4 letters, e.g. MAEU)"
            )
        t = terminal.strip() if terminal is not None else None
        if t is not None and not t:
            raise ValueError("--terminal is empty: give a FIRMS code (e.g. Y258) or part of a name")
        return cls(p, t, c)

    def __bool__(self) -> bool:
        return any((self.port, self.terminal, self.carrier))

    def matches(self, r: Row) -> bool:
        if self.port and r.get("port") != self.port:
            return False
        if self.carrier and str(r.get("carrier") or "").upper() != self.carrier:
            return False
        if self.terminal:
            t = self.terminal.lower()
            name = str(r.get("terminal") or "").lower()
            code = str(r.get("terminal_code") or "").lower()
            if t != code and t not in name:
                return False
        return True

    def apply(self, rows: Sequence[Row]) -> list[Row]:
        return [r for r in rows if self.matches(r)]

    def describe(self) -> str:
        asked = (("port", self.port), ("terminal", self.terminal), ("carrier", self.carrier))
        return ", ".join(f"{k} {v}" for k, v in asked if v)


def parse_limit(text: str | None) -> int | None:
    """``--limit``: None (fit the screen), 0 (all) or a positive count. Raises ValueError."""
    if text is None:
        return None
    try:
        n = int(text.strip())
    except ValueError:
        raise ValueError(f"--limit {text!r} is not a whole number (0 shows all)") from None
    if n < 0:
        raise ValueError(f"--limit {n} is negative: give a count, or 0 to show all")
    return n
