"""The views of ``analytics`` and ``terminal49`` on PostgreSQL, and the risk run's alerts.

The views are those of the DuckDB warehouse, from the same SQL
(:func:`pipelines.analytics.publish.view_selects`, :func:`pipelines.history.views.view_selects`)
in PostgreSQL's dialect (:data:`pipelines.dialect.POSTGRES`): the same names, columns and
types. A view is recreated only when its SQL changed (its comment carries a digest of the
SQL), so a risk run that changes no view takes no lock a reader of the view would wait for.

The alerts are :func:`pipelines.alerts.rules.raise_alerts`, run unchanged by an in-process
DuckDB over the rows it compares (the new risk rows, the previous ones, the references and the
keys already raised), and the new outbox rows are inserted into ``analytics.alert_outbox`` in
the risk publish's transaction.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime
from typing import Any

import duckdb
import polars as pl

from pipelines.analytics.publish import view_selects as analytics_selects
from pipelines.config import ANALYTICS_SCHEMA as A
from pipelines.config import DATASET as T
from pipelines.dialect import POSTGRES
from pipelines.history.views import view_selects as history_selects
from pipelines.warehouse import quote

log = logging.getLogger("freetime.pg.views")

#: a view's comment: this prefix and the digest of the SQL it was created from
MARK = "freetime view "


def columns_of(cur: Any, schema: str, table: str) -> dict[str, str]:
    """``{column: PostgreSQL type}`` of ``schema.table`` in order (empty when absent)."""
    cur.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        f"WHERE table_schema = '{schema}' AND table_name = '{table}' ORDER BY ordinal_position"
    )
    return {c: t for c, t in cur.fetchall()}


def create_views(cur: Any, types: dict[str, dict[str, str]], *, analytics: bool = True) -> int:
    """Inside the caller's transaction: create or replace every view the tables allow
    (``types``: the ``terminal49`` columns by their DuckDB type names; ``analytics`` false:
    the views of ``terminal49`` only); how many changed."""
    selects = analytics_selects(types, POSTGRES) if analytics else []
    selects += history_selects(lambda s, t: columns_of(cur, s, t), POSTGRES)
    changed = 0
    for name, sql in selects:
        mark = MARK + hashlib.sha256(sql.encode()).hexdigest()[:16]
        cur.execute(f"SELECT obj_description(to_regclass('{name}'), 'pg_class')")
        row = cur.fetchone()
        if row is not None and row[0] == mark:
            continue
        # a view's columns can change (a column dlt added): replace it whole
        cur.execute(f"DROP VIEW IF EXISTS {name} CASCADE")
        cur.execute(f"CREATE VIEW {name} AS {sql}")
        cur.execute(f"COMMENT ON VIEW {name} IS '{mark}'")
        changed += 1
    return changed


def refresh_views(cur: Any) -> int:
    """After a load's publish, in its transaction: :func:`create_views` for the tables as they
    are now (the analytics views once a risk run published its table); how many changed."""
    from pipelines.pg.publish import DUCKDB_NAMES

    cur.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        f"WHERE table_schema = '{T}' ORDER BY table_name, ordinal_position"
    )
    types: dict[str, dict[str, str]] = {}
    for table, column, typ in cur.fetchall():
        types.setdefault(table, {})[column] = DUCKDB_NAMES.get(typ, typ.upper())
    return create_views(cur, types, analytics=bool(columns_of(cur, A, "demurrage_risk")))


def drop_views_over(cur: Any, schema: str, table: str) -> None:
    """Drop the views that read ``schema.table`` (and those over them), so that a column of it
    can change type; :func:`refresh_views` creates them again in the same transaction."""
    cur.execute(
        "SELECT DISTINCT v.oid::regclass::text FROM pg_depend d "
        "JOIN pg_rewrite r ON r.oid = d.objid JOIN pg_class v ON v.oid = r.ev_class "
        "WHERE d.classid = 'pg_rewrite'::regclass "
        f"AND d.refobjid = '{quote(schema)}.{quote(table)}'::regclass AND v.relkind = 'v'"
    )
    for (name,) in cur.fetchall():
        cur.execute(f"DROP VIEW IF EXISTS {name} CASCADE")


def raise_alerts(
    cur: Any, risk: pl.DataFrame, previous: pl.DataFrame | None, as_of: datetime
) -> int:
    """Inside the caller's transaction: append to ``analytics.alert_outbox`` the alerts that
    the new risk rows ``risk`` raise against ``previous`` (the rows they replace; None for
    the first publish), by :func:`pipelines.alerts.rules.raise_alerts`; how many."""
    from pipelines.alerts.rules import OUTBOX, OUTBOX_DDL
    from pipelines.alerts.rules import raise_alerts as rules
    from pipelines.pg.read import frame as _frame

    cur.execute(OUTBOX_DDL.replace(" DOUBLE,", " DOUBLE PRECISION,"))
    if previous is None:
        return 0  # the first publish compares with nothing (as the rules): nothing to read
    mem = duckdb.connect()
    try:
        mem.execute("SET TimeZone = 'UTC'")
        mem.execute(f"CREATE SCHEMA {A}")
        mem.execute(f"CREATE SCHEMA {T}")
        tables = {f"{A}.demurrage_risk": risk, f"{A}.demurrage_risk_previous": previous}
        for table in ("containers", "shipments"):
            have = columns_of(cur, T, table)
            if "id" not in have:
                continue
            cols = ["id"] + [c for c in ("shipment_id",) if c in have and table == "containers"]
            if "ref_numbers" in have:
                cols.append("CAST(ref_numbers AS text) AS ref_numbers")
            tables[f"{T}.{table}"] = _frame(cur, f"SELECT {', '.join(cols)} FROM {T}.{table}")
        for name, frame in tables.items():
            if frame is None:
                continue
            mem.register("_frame", frame.to_arrow())
            json = ", CAST(ref_numbers AS JSON) AS ref_numbers" if "ref_numbers" in frame else ""
            exclude = " EXCLUDE (ref_numbers)" if json else ""
            mem.execute(f"CREATE TABLE {name} AS SELECT *{exclude}{json} FROM _frame")
            mem.unregister("_frame")
        mem.execute(OUTBOX_DDL)
        raised = _frame(cur, f"SELECT seq, alert_key, container_id, kind, value FROM {OUTBOX}")
        mem.register("_raised", raised.to_arrow())
        mem.execute(f"INSERT INTO {OUTBOX} BY NAME SELECT * FROM _raised")
        last = int(raised.select(pl.col("seq").max().fill_null(0)).item())
        count = rules(mem, as_of)
        if not count:
            return 0
        # a cursor of its own: the rules leave their last result open on ``mem``
        new = (
            mem.cursor()
            .sql(f"SELECT * FROM {OUTBOX} WHERE seq > {last} ORDER BY seq")
            .to_arrow_table()
        )
    finally:
        mem.close()
    cur.execute("DROP TABLE IF EXISTS _alerts_new")
    cur.adbc_ingest("_alerts_new", new, mode="create", temporary=True)
    names = ", ".join(quote(c) for c in new.column_names)
    cur.execute(f"INSERT INTO {OUTBOX} ({names}) SELECT {names} FROM _alerts_new")
    cur.execute("DROP TABLE _alerts_new")
    return count
