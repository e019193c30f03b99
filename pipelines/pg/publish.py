"""Publishing staged loads into ``terminal49`` on PostgreSQL, in one transaction.

The contract of :func:`pipelines.write.publish`, in PostgreSQL's dialect: every load dlt
completed in the writer's incoming schema and not yet published is merged table by table by
its rule in :data:`pipelines.write.MERGES` (the newest ``fetched_at`` of a key wins; a
container's holds and fees are replaced with it, a placeholder row standing for "reported,
and empty"); a complete full scan removes what the API no longer lists; history rows
(:mod:`pipelines.history`'s fields and texts), the table and column comments and the
``freetime_loads`` row are written in the same transaction. Any failure (a dropped connection
included) rolls it all back: readers see every table before or after the publish.

Only the rules are shared with the DuckDB path (imported, never restated); the SQL is
PostgreSQL's: ``DISTINCT ON`` for the newest row of a key, ``LATERAL (VALUES ...)`` for the
history pairs, temp tables dropped at commit.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from psycopg2.extensions import connection as Connection
from psycopg2.extensions import cursor as Cursor

from pipelines import history
from pipelines.config import DATASET, incoming_dataset
from pipelines.pg.reader import ensure_lookup_indexes
from pipelines.publish import transaction
from pipelines.publish.columns import NOT_PUBLISHED
from pipelines.publish.merge import LISTED, MERGES, Merge
from pipelines.publish.transaction import (
    LOADS_TABLE,
    SCAN_TABLE,
    ScanInfo,
    WriteSummary,
    history_context,
)
from pipelines.terminal49.docs import COLUMN_COMMENTS, TABLE_COMMENTS
from pipelines.warehouse import quote

#: PostgreSQL's type names (``format_type``) as the DuckDB names the flattener conforms to
DUCKDB_NAMES = {
    "bigint": "BIGINT",
    "integer": "INTEGER",
    "double precision": "DOUBLE",
    "boolean": "BOOLEAN",
    "character varying": "VARCHAR",
    "text": "VARCHAR",
    "jsonb": "JSON",
    "json": "JSON",
    "timestamp with time zone": "TIMESTAMP WITH TIME ZONE",
    "date": "DATE",
}
NUMERIC = ("bigint", "integer", "double precision", "numeric")
#: a table is analyzed in the publish that changed this many rows plus this share of it
#: (autovacuum's defaults: ``autovacuum_analyze_threshold``, ``..._scale_factor``)
ANALYZE_ROWS, ANALYZE_SHARE = 50, 0.1
#: the planner's cost of a random page read during a publish (see :func:`publish`)
RANDOM_PAGE_COST = 1.1
#: types whose equal values always have the same history text (:func:`text_sql`)
EQUAL_TEXT = (
    "bigint",
    "integer",
    "double precision",
    "boolean",
    "character varying",
    "text",
    "date",
    "timestamp with time zone",
)


def column_types(cur: Cursor, schema: str, table: str) -> dict[str, str]:
    """The columns of ``schema.table`` in order with their PostgreSQL types (empty when the
    table does not exist)."""
    cur.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped "
        "ORDER BY a.attnum",
        [schema, table],
    )
    return {name: typ for name, typ in cur.fetchall()}


def table_names(cur: Cursor, schema: str) -> set[str]:
    """The tables and views of ``schema`` (empty when it does not exist)."""
    cur.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", [schema]
    )
    return {r[0] for r in cur.fetchall()}


def _count(cur: Cursor, sql: str, params: Sequence[Any] = ()) -> int:
    """Run ``sql``: its first value when it returns rows, else the rows it touched."""
    cur.execute(sql, list(params))
    if cur.description is None:
        return max(int(cur.rowcount), 0)
    row = cur.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def pending_loads(cur: Cursor, slot: str) -> list[str]:
    """Loads dlt completed in staging slot ``slot``'s incoming schema and not yet published,
    oldest first."""
    inc = incoming_dataset(slot)
    if "_dlt_loads" not in table_names(cur, inc):
        return []
    done = ""
    if LOADS_TABLE in table_names(cur, DATASET):
        done = f"AND load_id NOT IN (SELECT load_id FROM {quote(DATASET)}.{LOADS_TABLE})"
    cur.execute(
        f"SELECT load_id FROM {quote(inc)}._dlt_loads WHERE status = 0 {done} ORDER BY load_id"
    )
    return [r[0] for r in cur.fetchall()]


def publish(
    con: Connection,
    writer: str,
    finish: Callable[[Cursor], None] | None = None,
    *,
    slot: str | None = None,
) -> WriteSummary:
    """Publish the pending loads of ``writer``'s staging ``slot`` (default: the slot named
    ``writer``) into ``terminal49``, all in one transaction (``finish`` runs inside it, last)."""
    out = WriteSummary()
    slot = slot or writer
    try:
        with con.cursor() as cur:
            loads = pending_loads(cur, slot)
            if not loads:
                con.rollback()
                return out
            # The merges join a load's rows (a temp table) to whole tables by their indexed
            # keys. With the default random_page_cost (4, a spinning disk's) the planner
            # reads every row of terminal49.containers by a hash join for each statement,
            # however few rows the load holds: at 100,000 containers an hourly load of a few
            # thousand paid that scan a dozen times. A warehouse is served from memory or
            # SSD (1.1 is the usual figure for both); a full load still gets hash joins.
            cur.execute(f"SET LOCAL random_page_cost = {RANDOM_PAGE_COST}")
            cur.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(DATASET)}")
            _ensure_loads_table(cur)
            for load_id in loads:
                _publish_load(cur, writer, slot, load_id, out)
                out.load_ids.append(load_id)
            _clear_incoming(cur, slot, loads)
            _analyze_changed(cur, out)
            apply_comments(cur, DATASET)
            from pipelines.pg.views import refresh_views  # the views read the merged tables

            refresh_views(cur)
            ensure_lookup_indexes(cur)  # what the tool server looks rows up by
            if finish is not None:
                finish(cur)
        con.commit()
    except BaseException:
        if not con.closed:
            con.rollback()
        raise
    return out


def _ensure_loads_table(cur: Cursor) -> None:
    # the DuckDB path's statement is plain SQL that PostgreSQL runs as it is
    transaction.ensure_loads_table(cast(Any, cur))


def _publish_load(cur: Cursor, writer: str, slot: str, load_id: str, out: WriteSummary) -> None:
    inc = incoming_dataset(slot)
    present = table_names(cur, inc)
    scan = _scan_info(cur, inc, load_id) if SCAN_TABLE in present else None
    before = (sum(out.written.values()), sum(out.skipped.values()), sum(out.removed.values()))
    ctx = history_context(writer, load_id, scan)
    for table, rule in MERGES.items():
        if table in present:
            _merge_table(cur, inc, table, rule, load_id, out, ctx)
    if scan is not None:
        for listed, children in LISTED.items():
            if listed in scan.complete_lists and listed in present:
                _remove_unlisted(cur, inc, listed, children, load_id, scan.started_at, out, ctx)
    cur.execute(
        f"INSERT INTO {quote(DATASET)}.{LOADS_TABLE} "
        "VALUES (%s, %s, %s, %s, %s, now(), %s, %s, %s, %s, %s)",
        [
            load_id,
            writer,
            scan.kind if scan else None,
            scan.started_at if scan else None,
            scan.api_started_at if scan else None,
            scan.window_from if scan else None,
            scan is not None,
            sum(out.written.values()) - before[0],
            sum(out.skipped.values()) - before[1],
            sum(out.removed.values()) - before[2],
        ],
    )


def _clear_incoming(cur: Cursor, slot: str, loads: Sequence[str]) -> None:
    """Remove the published ``loads``' rows from the slot's incoming tables: TRUNCATE a table
    that holds nothing else (a load dlt has not completed keeps its rows), so that the next
    load's rows are not read among a full load's dead ones (a DELETE left 100,000 dead rows
    that every later load scanned until autovacuum came). TRUNCATE is transactional: a
    rollback of the publish gives the rows back."""
    inc = incoming_dataset(slot)
    for table in sorted(table_names(cur, inc)):
        if table.startswith("_dlt_"):
            continue
        name = f"{quote(inc)}.{quote(table)}"
        others = _count(
            cur,
            f"SELECT count(*) FROM (SELECT 1 FROM {name} "
            "WHERE _dlt_load_id IS NULL OR _dlt_load_id <> ALL(%s) LIMIT 1) AS x",
            [list(loads)],
        )
        if others:
            cur.execute(f"DELETE FROM {name} WHERE _dlt_load_id = ANY(%s)", [list(loads)])
        else:
            cur.execute(f"TRUNCATE {name}")


def _analyze_changed(cur: Cursor, out: WriteSummary) -> int:
    """ANALYZE the tables of ``terminal49`` that this publish changed by as many rows as make
    autovacuum analyze them (:data:`ANALYZE_ROWS` and :data:`ANALYZE_SHARE` of the table), or
    that were never analyzed; how many. Autovacuum would do it a minute or more after the
    commit; until then the planner of the next publish has no statistics of a table a full
    load just filled, and joined an hourly load's rows to all of it by hash (seconds at
    100,000 containers). Only the columns the merges join on are analyzed; ANALYZE takes no
    lock a reader waits for."""
    changed: dict[str, int] = {}
    for counts in (out.written, out.removed):
        for table, n in counts.items():
            changed[table] = changed.get(table, 0) + n
    if not changed:
        return 0
    cur.execute(
        "SELECT c.relname, c.reltuples FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname = ANY(%s) ORDER BY 1",
        [DATASET, sorted(changed)],
    )
    stale = [
        table
        for table, tuples in cur.fetchall()
        if tuples < 0 or changed[table] >= ANALYZE_ROWS + ANALYZE_SHARE * tuples
    ]
    for table in stale:
        rule = MERGES.get(table, Merge())
        keys = {*rule.key, rule.version, rule.parent_key if rule.parent else None}
        have = column_types(cur, DATASET, table)
        # only what the merges join and compare on: the whole table (every JSON column
        # sampled) took seconds; autovacuum still analyzes it all later, as a column list
        # leaves its count of changed rows as it was
        columns = ", ".join(quote(c) for c in have if c in keys)
        cur.execute(
            f"ANALYZE {quote(DATASET)}.{quote(table)}" + (f" ({columns})" if columns else "")
        )
    return len(stale)


def _scan_info(cur: Cursor, inc: str, load_id: str) -> ScanInfo | None:
    cur.execute(
        "SELECT kind, started_at, window_from, complete_lists, api_started_at "
        f"FROM {quote(inc)}.{SCAN_TABLE} WHERE _dlt_load_id = %s LIMIT 1",
        [load_id],
    )
    row = cur.fetchone()
    if row is None:
        return None
    return ScanInfo(
        kind=row[0],
        started_at=row[1],
        window_from=row[2],
        complete_lists=tuple(x for x in (row[3] or "").split(",") if x),
        api_started_at=row[4],
    )


def _align_target(cur: Cursor, table: str, incoming: Mapping[str, str]) -> None:
    """Create ``terminal49.<table>`` like the incoming rows, or give it their new columns (a
    column whose type changed takes the new one; a value that does not convert fails the
    publish, which changes nothing)."""
    target = column_types(cur, DATASET, table)
    cols = {c: t for c, t in incoming.items() if c not in NOT_PUBLISHED}
    name = f"{quote(DATASET)}.{quote(table)}"
    if not target:
        defs = ", ".join(f"{quote(c)} {t}" for c, t in cols.items())
        cur.execute(f"CREATE TABLE {name} ({defs})")
        return
    for column, typ in cols.items():
        if column not in target:
            cur.execute(f"ALTER TABLE {name} ADD COLUMN {quote(column)} {typ}")
        elif target[column] != typ:
            from pipelines.pg.views import drop_views_over  # made again after the merge

            drop_views_over(cur, DATASET, table)
            cur.execute(
                f"ALTER TABLE {name} ALTER {quote(column)} TYPE {typ} USING {quote(column)}::{typ}"
            )


def _new_rows(cur: Cursor, src: str, rule: Merge, load_id: str) -> None:
    """Temp table ``_new``: the newest incoming row of each key of the load (a load can see a
    record twice; a job re-run after a kill can append the same rows twice)."""
    keys = ", ".join(quote(k) for k in rule.key)
    newest = f"{quote(rule.version)} DESC NULLS LAST, ctid DESC" if rule.version else "ctid DESC"
    cur.execute("DROP TABLE IF EXISTS _new")
    cur.execute(
        f"CREATE TEMP TABLE _new ON COMMIT DROP AS SELECT DISTINCT ON ({keys}) * FROM {src} "
        f"WHERE _dlt_load_id = %s ORDER BY {keys}, {newest}",
        [load_id],
    )


def _merge_table(
    cur: Cursor,
    inc: str,
    table: str,
    rule: Merge,
    load_id: str,
    out: WriteSummary,
    ctx: history.Context,
) -> None:
    incoming = column_types(cur, inc, table)
    _align_target(cur, table, incoming)
    src = f"{quote(inc)}.{quote(table)}"
    dst = f"{quote(DATASET)}.{quote(table)}"
    _new_rows(cur, src, rule, load_id)
    cols = ", ".join(quote(c) for c in incoming if c not in NOT_PUBLISHED)
    if rule.parent is not None:
        _merge_children(cur, table, rule, dst, incoming, cols, out, ctx)
        return
    record_rows(cur, table, incoming, ctx)
    on = " AND ".join(f"t.{quote(k)} = n.{quote(k)}" for k in rule.key)
    newer = f"t.{quote(rule.version)} > n.{quote(rule.version)}" if rule.version else "false"
    skipped = _count(
        cur,
        f"SELECT count(*) FROM _new n WHERE EXISTS (SELECT 1 FROM {dst} t WHERE {on} AND {newer})",
    )
    cur.execute(f"DELETE FROM {dst} t USING _new n WHERE {on} AND NOT ({newer})")
    inserted = _count(
        cur,
        f"INSERT INTO {dst} ({cols}) SELECT {cols} FROM _new n "
        f"WHERE NOT EXISTS (SELECT 1 FROM {dst} t WHERE {on})",
    )
    out.add(out.written, table, inserted)
    out.add(out.skipped, table, skipped)


def _merge_children(
    cur: Cursor,
    table: str,
    rule: Merge,
    dst: str,
    incoming: Mapping[str, str],
    cols: str,
    out: WriteSummary,
    ctx: history.Context,
) -> None:
    """Replace the children of every container whose newest fetch this load holds, unless the
    warehouse holds a newer version of that container (or of its children)."""
    pk, version = quote(rule.parent_key), quote(rule.version or "fetched_at")
    cur.execute("DROP TABLE IF EXISTS _owners")
    cur.execute(
        f"CREATE TEMP TABLE _owners ON COMMIT DROP AS SELECT {pk} AS owner, max({version}) AS v "
        f"FROM _new GROUP BY {pk}"
    )
    # only the rows of each container's newest fetch
    cur.execute(f"DELETE FROM _new n USING _owners o WHERE o.owner = n.{pk} AND n.{version} < o.v")
    # Two statements, not one WHERE EXISTS ... OR EXISTS: an OR of two EXISTS cannot become a
    # semi-join, so PostgreSQL scanned both tables once per owner (minutes for a full load
    # over a warehouse of 100,000 containers); each EXISTS alone is one hash semi-join.
    cur.execute(
        f"DELETE FROM _owners o WHERE EXISTS (SELECT 1 FROM {dst} t WHERE t.{pk} = o.owner "
        f"AND t.{version} > o.v)"
    )
    if rule.parent in table_names(cur, DATASET):
        parent = f"{quote(DATASET)}.{quote(rule.parent or '')}"
        cur.execute(
            f"DELETE FROM _owners o WHERE EXISTS (SELECT 1 FROM {parent} p "
            "WHERE p.id = o.owner AND p.fetched_at > o.v)"
        )
    kept = _count(cur, "SELECT count(*) FROM _owners")
    owners = _count(cur, f"SELECT count(DISTINCT {pk}) FROM _new")
    record_children(cur, table, incoming, ctx)
    cur.execute(f"DELETE FROM {dst} t USING _owners o WHERE t.{pk} = o.owner")
    real = "NOT coalesce(n._deleted, false)" if "_deleted" in incoming else "true"
    inserted = _count(
        cur,
        f"INSERT INTO {dst} ({cols}) SELECT {cols} FROM _new n "
        f"WHERE {real} AND n.{pk} IN (SELECT owner FROM _owners)",
    )
    out.add(out.written, table, inserted)
    out.add(out.skipped, table, owners - kept)


def _remove_unlisted(
    cur: Cursor,
    inc: str,
    table: str,
    children: Sequence[str],
    load_id: str,
    scan_started: dt.datetime,
    out: WriteSummary,
    ctx: history.Context,
) -> None:
    """After a complete full scan: remove the records of ``table`` (and their children) that
    the API no longer lists, unless they were written after the scan started."""
    dst = f"{quote(DATASET)}.{quote(table)}"
    cur.execute("DROP TABLE IF EXISTS _gone")
    cur.execute(
        f"CREATE TEMP TABLE _gone ON COMMIT DROP AS SELECT id FROM {dst} t "
        f"WHERE t.fetched_at < %s AND NOT EXISTS (SELECT 1 FROM {quote(inc)}.{quote(table)} i "
        "WHERE i._dlt_load_id = %s AND i.id = t.id)",
        [scan_started, load_id],
    )
    record_removed(cur, table, ctx, scan_started)
    removed = _count(cur, f"DELETE FROM {dst} WHERE id IN (SELECT id FROM _gone)")
    out.add(out.removed, table, removed)
    for child in children:
        if child in table_names(cur, DATASET):
            n = _count(
                cur,
                f"DELETE FROM {quote(DATASET)}.{quote(child)} "
                "WHERE container_id IN (SELECT id FROM _gone)",
            )
            out.add(out.removed, child, n)


# --- history, in PostgreSQL's dialect (fields and texts: pipelines.history) ------------------

HISTORY = f"{quote(DATASET)}.{history.HISTORY_TABLE}"
HISTORY_COLUMNS = (
    "entity, entity_id, field, old_value, new_value, observed_at, fetched_at, how, "
    "notification_id, load_id"
)


def text_sql(expr: str, pg_type: str) -> str:
    """``expr`` as the text history keeps, the same text as on DuckDB
    (:func:`pipelines.history.text_sql`): instants as ISO 8601 UTC, whole doubles with ``.0``."""
    if pg_type == "timestamp with time zone":
        return f"""to_char({expr} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')"""
    if pg_type == "double precision":
        return (
            f"CASE WHEN {expr} = trunc({expr}) AND abs({expr}) < 1e15 "
            f"THEN trunc({expr})::bigint::text || '.0' ELSE {expr}::text END"
        )
    return f"CAST({expr} AS text)"


def ensure_history(cur: Cursor) -> None:
    history.ensure_table(cast(Any, cur))  # plain SQL that PostgreSQL runs as it is


def _observed(columns: Mapping[str, str], ctx: history.Context, alias: str = "n") -> str:
    shifted = f"{alias}.fetched_at + INTERVAL '{ctx.clock_offset.total_seconds()} seconds'"
    if history.OBSERVED_COLUMN in columns:
        return f"coalesce({alias}.{history.OBSERVED_COLUMN}, {shifted})"
    return shifted


def _notification(columns: Mapping[str, str], alias: str = "n") -> str:
    if history.NOTIFICATION_COLUMN in columns:
        return f"{alias}.{history.NOTIFICATION_COLUMN}"
    return "NULL::varchar"


def record_rows(cur: Cursor, table: str, incoming: Mapping[str, str], ctx: history.Context) -> int:
    """:func:`pipelines.history.record_rows` on PostgreSQL: the changes of the rows of ``_new``
    that replace (or add to) ``terminal49.<table>``; call before the merge."""
    fields = history.tracked_columns(table, incoming)
    if table not in history.ENTITY or not fields:
        return 0
    ensure_history(cur)
    dst = f"{quote(DATASET)}.{quote(table)}"
    pairs = ", ".join(
        f"('{c}', {text_sql('t.' + quote(c), incoming[c])}, "
        f"{text_sql('n.' + quote(c), incoming[c])})"
        for c in fields
    )
    # the texts are made only for the rows where a tracked value changed (a few of an
    # hourly load's thousands): making 30 texts of each row cost more than the merge
    changed = " OR ".join(_differs(c, incoming[c]) for c in fields)
    return _count(
        cur,
        f"""
        INSERT INTO {HISTORY} ({HISTORY_COLUMNS})
        SELECT '{history.ENTITY[table]}', n.id, v.field, v.old, v.new, {_observed(incoming, ctx)},
               n.fetched_at, %s, {_notification(incoming)}, %s
        FROM _new n LEFT JOIN {dst} t ON t.id = n.id
        CROSS JOIN LATERAL (VALUES {pairs}) AS v(field, old, new)
        WHERE NOT EXISTS (SELECT 1 FROM {dst} x WHERE x.id = n.id AND x.fetched_at > n.fetched_at)
          AND ({changed})
          AND v.old IS DISTINCT FROM v.new
        """,
        [ctx.how, ctx.load_id],
    )


def _differs(column: str, pg_type: str) -> str:
    """SQL true when ``column`` of ``t`` and ``n`` may have different history texts: their
    values differ (their texts, for a type whose equal values can print apart)."""
    t, n = f"t.{quote(column)}", f"n.{quote(column)}"
    if pg_type in EQUAL_TEXT:
        return f"{t} IS DISTINCT FROM {n}"
    return f"{text_sql(t, pg_type)} IS DISTINCT FROM {text_sql(n, pg_type)}"


def record_children(
    cur: Cursor, table: str, incoming: Mapping[str, str], ctx: history.Context
) -> int:
    """:func:`pipelines.history.record_children` on PostgreSQL: the hold or fee changes of the
    containers in ``_owners`` whose rows are about to be replaced by those in ``_new``."""
    if table not in history.CHILD_FIELDS:
        return 0
    prefix, name, value = history.CHILD_FIELDS[table]
    if name not in incoming or value not in incoming:
        return 0
    ensure_history(cur)
    dst = f"{quote(DATASET)}.{quote(table)}"
    if incoming[value] in NUMERIC:
        agg = text_sql(f"sum({quote(value)})", "double precision")
    else:
        text = f"CAST({quote(value)} AS text)"
        agg = f"string_agg(DISTINCT {text}, ',' ORDER BY {text})"
    real = "NOT coalesce(n._deleted, false)" if "_deleted" in incoming else "true"
    return _count(
        cur,
        f"""
        INSERT INTO {HISTORY} ({HISTORY_COLUMNS})
        WITH new_rows AS (
            SELECT * FROM _new n WHERE {real}
              AND n.container_id IN (SELECT owner FROM _owners)
        ), stamp AS (
            SELECT n.container_id, min({_observed(incoming, ctx)}) AS observed_at,
                   min(n.fetched_at) AS fetched_at,
                   min({_notification(incoming)}) AS notification_id
            FROM _new n WHERE n.container_id IN (SELECT owner FROM _owners)
            GROUP BY n.container_id
        ), old AS (
            SELECT container_id, coalesce({quote(name)}, '?') AS k, {agg} AS v
            FROM {dst} WHERE container_id IN (SELECT owner FROM _owners) GROUP BY 1, 2
        ), new AS (
            SELECT container_id, coalesce({quote(name)}, '?') AS k, {agg} AS v
            FROM new_rows GROUP BY 1, 2
        )
        SELECT 'container', s.container_id, '{prefix}:' || coalesce(new.k, old.k), old.v,
               new.v, s.observed_at, s.fetched_at, %s, s.notification_id, %s
        FROM old FULL JOIN new ON old.container_id = new.container_id AND old.k = new.k
        JOIN stamp s ON s.container_id = coalesce(new.container_id, old.container_id)
        WHERE old.v IS DISTINCT FROM new.v
        """,
        [ctx.how, ctx.load_id],
    )


def record_removed(cur: Cursor, table: str, ctx: history.Context, scanned_at: dt.datetime) -> int:
    """:func:`pipelines.history.record_removed` on PostgreSQL, for the ids in ``_gone``."""
    if table not in history.ENTITY:
        return 0
    ensure_history(cur)
    return _count(
        cur,
        f"INSERT INTO {HISTORY} ({HISTORY_COLUMNS}) "
        f"SELECT '{history.ENTITY[table]}', id, 'listed', 'true', 'false', %s, %s, %s, NULL, %s "
        "FROM _gone",
        [scanned_at + ctx.clock_offset, scanned_at, ctx.how, ctx.load_id],
    )


# --- comments -------------------------------------------------------------------------------


def apply_comments(cur: Cursor, dataset: str) -> int:
    """:func:`pipelines.terminal49.docs.apply_comments` on PostgreSQL: write the comments of
    the tables and columns of ``dataset`` that exist, where they differ; how many."""
    cur.execute(
        "SELECT c.relname, a.attname, obj_description(c.oid, 'pg_class'), "
        "col_description(c.oid, a.attnum) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'v', 'p')",
        [dataset],
    )
    tables: dict[str, str | None] = {}
    columns: dict[tuple[str, str], str | None] = {}
    for table, column, table_text, column_text in cur.fetchall():
        tables[table] = table_text
        columns[table, column] = column_text
    statements = [
        (f"COMMENT ON TABLE {quote(dataset)}.{quote(table)} IS %s", text)
        for table, text in TABLE_COMMENTS.items()
        if table in tables and tables[table] != text
    ] + [
        (f"COMMENT ON COLUMN {quote(dataset)}.{quote(table)}.{quote(column)} IS %s", text)
        for table, named in COLUMN_COMMENTS.items()
        for column, text in named.items()
        if (table, column) in columns and columns[table, column] != text
    ]
    for sql, text in statements:
        cur.execute(sql, [text])
    return len(statements)
