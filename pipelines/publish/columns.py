"""A warehouse table takes the columns and types of the rows published into it.

New columns are added; a column whose declared type changed is converted in place, with the
one conversion that needs care: an LFD an older warehouse holds as an instant becomes the
local calendar date it names (:func:`converted`).
"""

from __future__ import annotations

from collections.abc import Mapping

import duckdb

from pipelines import history
from pipelines.config import DATASET
from pipelines.terminal49 import settings
from pipelines.warehouse import column_types, quote

#: placeholder marks and what only history reads: they never reach terminal49
NOT_PUBLISHED = ("_deleted", history.NOTIFICATION_COLUMN, history.OBSERVED_COLUMN)


def align_target(con: duckdb.DuckDBPyConnection, table: str, incoming: Mapping[str, str]) -> None:
    """Create ``terminal49.<table>`` like the incoming rows, or give it their new columns and
    types (a declared type that changed: see :func:`converted`)."""
    target = column_types(con, DATASET, table)
    cols = {c: t for c, t in incoming.items() if c not in NOT_PUBLISHED}
    name = f"{quote(DATASET)}.{quote(table)}"
    if not target:
        defs = ", ".join(f"{quote(c)} {t}" for c, t in cols.items())
        con.execute(f"CREATE TABLE {name} ({defs})")
        return
    for column, typ in cols.items():
        if column not in target:
            con.execute(f"ALTER TABLE {name} ADD COLUMN {quote(column)} {typ}")
        elif target[column] != typ:
            using = converted(con, table, column, target, typ)
            con.execute(f"ALTER TABLE {name} ALTER {quote(column)} TYPE {typ} USING {using}")


def converted(
    con: duckdb.DuckDBPyConnection,
    table: str,
    column: str,
    target: Mapping[str, str],
    typ: str,
) -> str:
    """How the rows a warehouse holds take a declared column's new type ``typ``.

    An LFD an older warehouse holds as an instant (TIMESTAMPTZ) becomes the calendar date of
    that instant in its record's zone, as a load reads an instant LFD (:mod:`.flatten`): in
    UTC, local midnight east of UTC falls on the day before, and a one-day LFD change that
    never happened would enter history. Other values are cast; one that does not convert
    becomes NULL.
    """
    cast = f"TRY_CAST({quote(column)} AS {typ})"
    zone_names = settings.LFD_ZONES.get(column) if table == "containers" else None
    if not zone_names or typ != "DATE" or target[column] != "TIMESTAMP WITH TIME ZONE":
        return cast
    zone = "coalesce(" + ", ".join([*(quote(z) for z in zone_names if z in target), "'UTC'"]) + ")"
    names = [
        r[0]
        for r in con.execute(
            f"SELECT DISTINCT {zone} FROM {quote(DATASET)}.{quote(table)}"
        ).fetchall()
    ]
    # known names, read from DuckDB's list: a failed statement would abort the transaction
    zones = {r[0] for r in con.execute("SELECT name FROM pg_timezone_names()").fetchall()}
    known = [n for n in names if n in zones]
    if not known:  # no record names a zone DuckDB knows: none of its instants names a date
        return f"CAST(NULL AS {typ})"
    listed = ", ".join("'" + n.replace("'", "''") + "'" for n in known)
    # a zone name DuckDB does not know gives NULL, as a load gives an instant in an unknown zone
    local = f"CAST(timezone({zone}, {quote(column)}) AS DATE)"
    return f"CASE WHEN {zone} IN ({listed}) THEN {local} END"
