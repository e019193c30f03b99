"""The few SQL phrases that DuckDB and PostgreSQL spell differently, for the views.

The views of ``analytics`` and ``terminal49`` (:mod:`pipelines.analytics.publish`,
:mod:`pipelines.history.views`) are written once; where the two dialects differ, the SQL asks
a :class:`Dialect` for the phrase (:data:`DUCKDB` or :data:`POSTGRES`). Each method returns
an expression with the same value and type on both, so a query over a view reads the same on
either warehouse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: DuckDB type names that PostgreSQL spells otherwise
_PG_TYPES = {"DOUBLE": "DOUBLE PRECISION", "TIMESTAMPTZ": "TIMESTAMPTZ", "VARCHAR": "VARCHAR"}
_DATE_TEXT = r"'^\d{4}-\d{2}-\d{2}$'"
_INSTANT_TEXT = r"'^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}'"


@dataclass(frozen=True)
class Dialect:
    """One warehouse's spelling; ``postgres`` false is DuckDB's."""

    postgres: bool

    def type(self, duckdb_type: str) -> str:
        """A DuckDB type name as this dialect writes it (``DOUBLE``: ``DOUBLE PRECISION``)."""
        return _PG_TYPES.get(duckdb_type, duckdb_type) if self.postgres else duckdb_type

    def group_by(self, exprs: Sequence[str]) -> str:
        """``GROUP BY`` every non-aggregate column ``exprs`` of the SELECT."""
        return f"GROUP BY {', '.join(exprs)}" if self.postgres else "GROUP BY ALL"

    def local_text(self, instant: str, zone: str) -> str:
        """The wall-clock time of ``instant`` in ``zone`` as ``YYYY-MM-DD HH:MM:SS`` text."""
        local = f"timezone({zone}, {instant})"
        if self.postgres:
            return f"to_char({local}, 'YYYY-MM-DD HH24:MI:SS')"
        return f"strftime({local}, '%Y-%m-%d %H:%M:%S')"

    def date_text(self, day: str) -> str:
        """A DATE as ``YYYY-MM-DD`` text."""
        return f"to_char({day}, 'YYYY-MM-DD')" if self.postgres else f"strftime({day}, '%Y-%m-%d')"

    def number_text(self, number: str) -> str:
        """A DOUBLE as DuckDB writes it (``470.0``, ``12.5``)."""
        if self.postgres:
            return (
                f"CASE WHEN {number} = trunc({number}) AND abs({number}) < 1e15 "
                f"THEN trunc({number})::bigint::text || '.0' ELSE {number}::text END"
            )
        return f"CAST({number} AS VARCHAR)"

    def json_list(self, fields: Mapping[str, str]) -> str:
        """Aggregate: a JSON list (as text) of one object per row, ``{key: expression}``."""
        if self.postgres:
            pairs = ", ".join(f"'{k}', {v}" for k, v in fields.items())
            return f"CAST(json_agg(json_build_object({pairs})) AS VARCHAR)"
        pairs = ", ".join(f"'{k}': {v}" for k, v in fields.items())
        return f"CAST(to_json(list({{{pairs}}})) AS VARCHAR)"

    def try_date(self, text: str) -> str:
        """``text`` as a DATE when it is ``YYYY-MM-DD``, else NULL."""
        if self.postgres:
            return f"CASE WHEN {text} ~ {_DATE_TEXT} THEN CAST({text} AS DATE) END"
        return f"TRY_CAST({text} AS DATE)"

    def try_instant(self, text: str) -> str:
        """``text`` as a TIMESTAMPTZ when it reads as one, else NULL."""
        if self.postgres:
            return f"CASE WHEN {text} ~ {_INSTANT_TEXT} THEN CAST({text} AS TIMESTAMPTZ) END"
        return f"TRY_CAST({text} AS TIMESTAMPTZ)"

    def days_between(self, earlier: str, later: str) -> str:
        """Whole days from DATE ``earlier`` to DATE ``later`` (BIGINT)."""
        if self.postgres:
            return f"CAST({later} - {earlier} AS BIGINT)"
        return f"date_diff('day', {earlier}, {later})"

    def minutes_between(self, earlier: str, later: str) -> str:
        """Minute boundaries crossed from instant ``earlier`` to ``later`` (BIGINT)."""
        if self.postgres:
            return (
                f"CAST(floor(extract(epoch FROM {later}) / 60) "
                f"- floor(extract(epoch FROM {earlier}) / 60) AS BIGINT)"
            )
        return f"date_diff('minute', {earlier}, {later})"

    def first_by(self, value: str, order: str) -> str:
        """Aggregate: the non-NULL ``value`` of the row with the least ``order``."""
        if self.postgres:
            return f"(array_agg({value} ORDER BY {order}) FILTER (WHERE {value} IS NOT NULL))[1]"
        return f"arg_min({value}, {order})"

    def last_by(self, value: str, order: str) -> str:
        """Aggregate: the non-NULL ``value`` of the row with the greatest ``order``."""
        if self.postgres:
            return (
                f"(array_agg({value} ORDER BY {order} DESC) FILTER (WHERE {value} IS NOT NULL))[1]"
            )
        return f"arg_max({value}, {order})"

    def round(self, number: str, digits: int) -> str:
        """A DOUBLE rounded to ``digits`` decimals, still a DOUBLE."""
        if self.postgres:
            return f"CAST(round(CAST({number} AS NUMERIC), {digits}) AS DOUBLE PRECISION)"
        return f"round({number}, {digits})"

    def split_contains(self, text: str, item: str) -> str:
        """Whether the comma-separated ``text`` lists ``item`` (a SQL literal)."""
        if self.postgres:
            return f"{item} = ANY(string_to_array({text}, ','))"
        return f"list_contains(string_split({text}, ','), {item})"

    def records_type(self, fields: Mapping[str, str]) -> str:
        """The type of a list of records ``{field: DuckDB type}``: a STRUCT list on DuckDB,
        ``JSONB`` (an array of objects) on PostgreSQL; both read as a list of dicts."""
        if self.postgres:
            return "JSONB"
        return "STRUCT(" + ", ".join(f"{k} {v}" for k, v in fields.items()) + ")[]"

    def records_length(self, column: str) -> str:
        """How many records a :meth:`records_type` column holds."""
        return f"jsonb_array_length({column})" if self.postgres else f"len({column})"


DUCKDB = Dialect(postgres=False)
POSTGRES = Dialect(postgres=True)
