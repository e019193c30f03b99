"""Working days: Monday to Friday minus the observed US federal holidays.

Contract
--------
* :func:`us_federal_holidays` computes the observed federal holidays of a year from the rules
  (5 U.S.C. 6103 and the OPM observed-date rule: a Saturday holiday is observed the Friday before,
  a Sunday holiday the Monday after). Nothing is hardcoded per year. Juneteenth counts from 2021.
* :class:`WorkingCalendar` counts and adds working days on polars Date expressions with polars'
  business-day functions, the holidays of :data:`HOLIDAY_YEARS` given as their holiday list
  (outside those years only weekends are skipped).
"""

from __future__ import annotations

import calendar
import functools
from collections.abc import Iterable
from datetime import date, timedelta

import polars as pl

#: The years whose holidays the shared calendar knows.
HOLIDAY_YEARS = range(2000, 2071)


def _nth_weekday(year: int, month: int, weekday: int, n: int) -> date:
    """The n-th ``weekday`` (Mon=0) of a month; n = -1 for the last one."""
    if n > 0:
        first = date(year, month, 1)
        return first + timedelta(days=(weekday - first.weekday()) % 7 + 7 * (n - 1))
    last = date(year, month, calendar.monthrange(year, month)[1])
    return last - timedelta(days=(last.weekday() - weekday) % 7)


def _observed(d: date) -> date:
    """OPM rule: Saturday -> Friday before, Sunday -> Monday after."""
    if d.weekday() == 5:
        return d - timedelta(days=1)
    if d.weekday() == 6:
        return d + timedelta(days=1)
    return d


def _actual_holidays(year: int) -> list[date]:
    days = [
        date(year, 1, 1),  # New Year's Day
        _nth_weekday(year, 1, 0, 3),  # Birthday of Martin Luther King, Jr.
        _nth_weekday(year, 2, 0, 3),  # Washington's Birthday
        _nth_weekday(year, 5, 0, -1),  # Memorial Day
        date(year, 7, 4),  # Independence Day
        _nth_weekday(year, 9, 0, 1),  # Labor Day
        _nth_weekday(year, 10, 0, 2),  # Columbus Day
        date(year, 11, 11),  # Veterans Day
        _nth_weekday(year, 11, 3, 4),  # Thanksgiving Day
        date(year, 12, 25),  # Christmas Day
    ]
    if year >= 2021:
        days.append(date(year, 6, 19))  # Juneteenth National Independence Day
    return days


def us_federal_holidays(year: int) -> list[date]:
    """Observed US federal holidays falling in ``year``, sorted.

    The observed date can cross a year boundary (New Year's Day on a Saturday is observed on
    31 December of the year before), so neighbouring years are computed and filtered.
    """
    out = {_observed(d) for y in (year - 1, year, year + 1) for d in _actual_holidays(y)}
    return sorted(d for d in out if d.year == year)


class WorkingCalendar:
    """Working days: Monday to Friday minus ``holidays`` (default: the observed US federal
    holidays of :data:`HOLIDAY_YEARS`)."""

    def __init__(self, holidays: Iterable[date] | None = None) -> None:
        if holidays is None:
            holidays = [d for y in HOLIDAY_YEARS for d in us_federal_holidays(y)]
        self.holidays = sorted(set(holidays))
        self._holiday_set = frozenset(self.holidays)

    def is_working(self, d: date) -> bool:
        """True on Mon-Fri that are not a holiday."""
        return d.weekday() < 5 and d not in self._holiday_set

    def working_days_between(self, start: pl.Expr, end: pl.Expr) -> pl.Expr:
        """Working days in ``(start, end]``; negative (those in ``(end, start]``) when ``end`` is
        before ``start``. NULL when either is NULL."""
        # polars counts the days in [a, b) when a <= b, and minus those in (b, a] when b < a:
        # (start, end] is [start + 1, end + 1); minus (end, start] is (end, start] as it is
        forward = (end >= start).cast(pl.Int32)
        return pl.business_day_count(
            _add_days(start, forward), _add_days(end, forward), holidays=self.holidays
        )

    def add_working_days(self, day: pl.Expr, n: pl.Expr | int) -> pl.Expr:
        """The ``n``-th working day after ``day`` (``day`` itself need not be a working day; with
        ``n`` = 0 the last working day on or before it). NULL when either is NULL."""
        # rolling a non-working day back to the working day before it leaves the days after it
        # unchanged: the 1st working day after Saturday is the 1st after Friday
        return day.dt.add_business_days(n, holidays=self.holidays, roll="backward")

    def working_day_after(self, day: date, n: int) -> date:
        """:meth:`add_working_days` of one date."""
        out: date = pl.select(self.add_working_days(pl.lit(day), n)).item()
        return out


def _add_days(day: pl.Expr, n: pl.Expr) -> pl.Expr:
    """A Date expression plus ``n`` calendar days."""
    return (day.cast(pl.Int32) + n).cast(pl.Date)


@functools.lru_cache(maxsize=1)
def working_calendar() -> WorkingCalendar:
    """The shared US federal working-day calendar (built once per process)."""
    return WorkingCalendar()
