"""The alert rules: what changed between two risk publishes that a dispatcher must hear about.

:func:`raise_alerts` runs inside the risk publish's transaction (``publish_risk`` calls it after
replacing ``analytics.demurrage_risk``), compares the new table with
``analytics.demurrage_risk_previous`` and appends one row per new alert to
``analytics.alert_outbox``. The outbox therefore commits, or rolls back, with the risk table
it was raised from. Each alert is keyed by (container, kind, value) and a key that is already
in the outbox is never added again: re-running risk, re-applying webhooks or reloading adds none.

The rules, in the order the outbox lists one container's alerts (``docs/alerts.md``):

=================  ========================================================================
kind               raised when (``at risk`` = level in :data:`AT_RISK_LEVELS`)
=================  ========================================================================
``level``          the box is at risk and was not, or its level got more urgent
``lfd_earlier``    the binding LFD moved earlier (level in ``lfd_levels``)
``lfd_moved``      a source's LFD (line, terminal, rail) moved while the box is at risk
                   (unless that move is the binding LFD's earlier move above)
``hold``           a blocking hold on a box at risk that it did not have while at risk
``hold_released``  the last blocking hold of a box not done went (the detail says whether
                   it is available, i.e. pickable)
``available``      availability (``available_for_pickup``, or the status ``available`` when
                   the terminal does not report it) turned true for a box at risk
``cost``           projected demurrage crossed a threshold (value: the highest crossed)
``stale``          the data of a box at risk went stale (terminal unchecked, tracking stopped)
=================  ========================================================================

The first publish of a warehouse has nothing to compare with and raises nothing: the morning
digest shows the state, alerts tell what changed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

import duckdb

from pipelines.alerts.config import AlertConfigError, AlertSettings, load_settings
from pipelines.analytics.risk import AT_RISK_LEVELS, LEVELS
from pipelines.config import ANALYTICS_SCHEMA as A
from pipelines.config import DATASET as T
from pipelines.warehouse import column_types

log = logging.getLogger("freetime.alerts")

OUTBOX = f"{A}.alert_outbox"
KINDS = (
    "level",
    "lfd_earlier",
    "lfd_moved",
    "hold",
    "hold_released",
    "available",
    "cost",
    "stale",
)
LFD_SOURCES = ("line", "terminal", "rail")

#: The risk columns the rules read, in both the current and the previous table.
NEEDED = (
    "container_id",
    "container_number",
    "risk_level",
    "lfd_date",
    "lfd_source",
    "lfd_line",
    "lfd_terminal",
    "lfd_rail",
    "blocking_holds",
    "ready_for_pickup",
    "available_for_pickup",
    "current_status",
    "projected_demurrage",
    "stale",
    "terminal_checked_at",
)

#: The columns whose change can raise an alert (a row where none changed raises nothing).
COMPARED = (
    "risk_level",
    "lfd_date",
    "lfd_line",
    "lfd_terminal",
    "lfd_rail",
    "blocking_holds",
    "available_for_pickup",
    "current_status",
    "projected_demurrage",
    "stale",
)

OUTBOX_DDL = f"""CREATE TABLE IF NOT EXISTS {OUTBOX} (
    seq BIGINT NOT NULL,
    alert_key VARCHAR NOT NULL,
    container_id VARCHAR NOT NULL,
    container_number VARCHAR,
    kind VARCHAR NOT NULL,
    value VARCHAR NOT NULL,
    detail VARCHAR,
    risk_level VARCHAR,
    previous_level VARCHAR,
    lfd_date DATE,
    lfd_source VARCHAR,
    previous_lfd DATE,
    days_to_lfd BIGINT,
    port_of_discharge_locode VARCHAR,
    pod_terminal_name VARCHAR,
    pod_terminal_firms_code VARCHAR,
    shipping_line_scac VARCHAR,
    bill_of_lading_number VARCHAR,
    reference_numbers VARCHAR[],
    blocking_holds VARCHAR[],
    ready_for_pickup BOOLEAN,
    projected_demurrage DOUBLE,
    currency VARCHAR,
    risk_reason VARCHAR,
    as_of TIMESTAMPTZ,
    raised_at TIMESTAMPTZ
)"""


def _list(values: Sequence[str | float]) -> str:
    return "[" + ", ".join(repr(v) if isinstance(v, str) else f"{float(v)}" for v in values) + "]"


def references_sql(con: duckdb.DuckDBPyConnection) -> str:
    """``(container_id, reference_numbers VARCHAR[])`` of every container, from the container's
    and its shipment's ``ref_numbers`` (JSON lists) when the warehouse has them."""
    cols = {t: set(column_types(con, T, t)) for t in ("containers", "shipments")}
    c_refs = "CAST(c.ref_numbers AS VARCHAR[])" if "ref_numbers" in cols["containers"] else "[]"
    s_refs = "[]"
    join = ""
    if "ref_numbers" in cols["shipments"] and "shipment_id" in cols["containers"]:
        s_refs = "CAST(s.ref_numbers AS VARCHAR[])"
        join = f"LEFT JOIN {T}.shipments s ON s.id = c.shipment_id"
    return (
        f"SELECT c.id AS container_id, "
        f"list_concat(coalesce({c_refs}, []), coalesce({s_refs}, [])) AS reference_numbers "
        f"FROM {T}.containers c {join}"
    )


def rules_sql(settings: AlertSettings, references: str) -> str:
    """The SELECT of the alerts the current risk table raises against the previous one (all
    candidates; the caller drops keys already in the outbox)."""
    at_risk = _list(AT_RISK_LEVELS)
    levels = _list(LEVELS)
    lfd_levels = _list(settings.lfd_levels)
    thresholds = _list(settings.cost_thresholds)

    def at(prefix: str) -> str:
        return f"list_contains({at_risk}, {prefix}risk_level)"

    moves = []
    for src in LFD_SOURCES:
        col = f"lfd_{src}"
        moves.append(
            f"""SELECT *, 'lfd_moved' AS kind, 3 AS rule, '{src} ' || CAST({col} AS VARCHAR)
                AS value, '{src} LFD moved: ' || CAST(p_{col} AS VARCHAR) || ' -> '
                || CAST({col} AS VARCHAR) AS detail
            FROM j WHERE {at("")} AND p_{col} IS NOT NULL AND {col} IS NOT NULL
                AND {col} <> p_{col}
                AND NOT (lfd_source = '{src}' AND lfd_date = {col} AND p_lfd_date IS NOT NULL
                         AND lfd_date < p_lfd_date)"""
        )
    moved = "\nUNION ALL BY NAME\n".join(moves)
    changed = " OR ".join(f"c.{col} IS DISTINCT FROM p.{col}" for col in COMPARED)
    return f"""
    WITH changed AS MATERIALIZED (
        -- every rule needs one of these to differ: the rest of the table is skipped (found
        -- on the compared columns alone, before the wide rows are read)
        SELECT c.container_id
        FROM {A}.demurrage_risk c
        LEFT JOIN {A}.demurrage_risk_previous p ON p.container_id = c.container_id
        WHERE p.container_id IS NULL OR {changed}
    ),
    j AS MATERIALIZED (
        SELECT c.*,
            p.risk_level AS p_risk_level, p.lfd_date AS p_lfd_date,
            p.lfd_line AS p_lfd_line, p.lfd_terminal AS p_lfd_terminal,
            p.lfd_rail AS p_lfd_rail, p.blocking_holds AS p_blocking_holds,
            (coalesce(c.available_for_pickup, false)
                OR coalesce(c.current_status = 'available', false))
                AS available,
            (coalesce(p.available_for_pickup, false)
                OR coalesce(p.current_status = 'available', false))
                AS p_available,
            p.projected_demurrage AS p_cost,
            p.stale AS p_stale,
            coalesce({at("p.")}, false) AS p_at_risk
        FROM {A}.demurrage_risk c
        LEFT JOIN {A}.demurrage_risk_previous p ON p.container_id = c.container_id
        WHERE c.container_id IN (SELECT container_id FROM changed)
    ),
    raised AS (
        SELECT *, 'level' AS kind, 1 AS rule,
            risk_level || ' ' || coalesce(CAST(lfd_date AS VARCHAR), '-') AS value,
            'now ' || risk_level || coalesce(' (was ' || p_risk_level || ')', '') AS detail
        FROM j WHERE {at("")} AND (NOT p_at_risk
            OR list_position({levels}, risk_level) < list_position({levels}, p_risk_level))
        UNION ALL BY NAME
        SELECT *, 'lfd_earlier' AS kind, 2 AS rule,
            lfd_source || ' ' || CAST(lfd_date AS VARCHAR) AS value,
            'binding LFD moved earlier: ' || CAST(p_lfd_date AS VARCHAR) || ' -> '
                || CAST(lfd_date AS VARCHAR) || ' (' || lfd_source || ')' AS detail
        FROM j WHERE list_contains({lfd_levels}, risk_level) AND p_lfd_date IS NOT NULL
            AND lfd_date < p_lfd_date
        UNION ALL BY NAME
        {moved}
        UNION ALL BY NAME
        SELECT * EXCLUDE (h), 'hold' AS kind, 4 AS rule, h AS value,
            h || ' hold on a box at risk' AS detail
        FROM (SELECT *, unnest(list_filter(coalesce(blocking_holds, []),
                lambda x: NOT (p_at_risk
                    AND list_contains(coalesce(p_blocking_holds, []), x)))) AS h
              FROM j WHERE {at("")})
        UNION ALL BY NAME
        SELECT *, 'hold_released' AS kind, 5 AS rule,
            array_to_string(list_sort(p_blocking_holds), ',') AS value,
            array_to_string(list_sort(p_blocking_holds), ', ') || ' released: '
                || CASE WHEN available THEN 'ready for pickup' ELSE 'not available yet' END
                AS detail
        FROM j WHERE risk_level <> 'done' AND len(coalesce(p_blocking_holds, [])) > 0
            AND len(coalesce(blocking_holds, [])) = 0
        UNION ALL BY NAME
        SELECT *, 'available' AS kind, 6 AS rule, 'available' AS value,
            'available for pickup' || CASE WHEN len(coalesce(blocking_holds, [])) = 0 THEN ''
                ELSE ' (still on hold: ' || array_to_string(blocking_holds, ', ') || ')' END
                AS detail
        FROM j WHERE {at("")} AND available AND NOT coalesce(p_available, false)
        UNION ALL BY NAME
        SELECT * EXCLUDE (t), 'cost' AS kind, 7 AS rule, printf('%.0f', t) AS value,
            'projected demurrage ' || printf('%.0f', projected_demurrage) || ' '
                || coalesce(currency, '') || ' crossed ' || printf('%.0f', t) AS detail
        FROM (SELECT *, list_max(list_filter({thresholds},
                lambda x: projected_demurrage >= x AND coalesce(p_cost, 0) < x)) AS t
              FROM j WHERE risk_level <> 'done' AND projected_demurrage IS NOT NULL)
        WHERE t IS NOT NULL
        UNION ALL BY NAME
        SELECT *, 'stale' AS kind, 8 AS rule,
            coalesce(strftime(terminal_checked_at, '%Y-%m-%dT%H:%MZ'), 'never') AS value,
            'data stale: terminal last checked '
                || coalesce(strftime(terminal_checked_at, '%Y-%m-%d %H:%M UTC'), 'never')
                AS detail
        FROM j WHERE {at("")} AND stale AND NOT (p_at_risk AND coalesce(p_stale, false))
    )
    SELECT md5(r.container_id || '|' || r.kind || '|' || r.value) AS alert_key,
        r.container_id, r.container_number, r.kind, r.value, r.detail, r.risk_level,
        r.p_risk_level AS previous_level, r.lfd_date, r.lfd_source,
        r.p_lfd_date AS previous_lfd, r.days_to_lfd, r.port_of_discharge_locode,
        r.pod_terminal_name, r.pod_terminal_firms_code, r.shipping_line_scac,
        r.bill_of_lading_number, refs.reference_numbers, r.blocking_holds,
        r.ready_for_pickup, r.projected_demurrage, r.currency, r.risk_reason,
        list_position({levels}, r.risk_level) AS urgency, r.rule
    FROM raised r LEFT JOIN ({references}) refs ON refs.container_id = r.container_id
    """


def raise_alerts(
    con: duckdb.DuckDBPyConnection, as_of: datetime, settings: AlertSettings | None = None
) -> int:
    """Append the alerts the just-published risk table raises to ``analytics.alert_outbox``;
    return how many. Call it inside the publish's transaction, after ``demurrage_risk`` was
    replaced (and ``demurrage_risk_previous`` copied from the old one).

    Raises nothing for a missing or older previous table (no comparison, no alert) or an
    unreadable ``alerts.toml`` (defaults, one warning): alerts never stop a risk publish.
    """
    if settings is None:
        try:
            settings = load_settings(destinations=False)
        except AlertConfigError as exc:
            log.warning("alert thresholds: %s; using the defaults", exc)
            settings = AlertSettings()
    con.execute(OUTBOX_DDL)
    previous = set(column_types(con, A, "demurrage_risk_previous"))
    current = set(column_types(con, A, "demurrage_risk"))
    missing = [c for c in NEEDED if c not in previous or c not in current]
    if not previous:
        return 0  # the first publish: nothing to compare with
    if missing:
        log.warning(
            "alerts: the previous risk table lacks %s; no alert this publish", ", ".join(missing)
        )
        return 0
    before = con.execute(f"SELECT count(*), coalesce(max(seq), 0) FROM {OUTBOX}").fetchone()
    assert before is not None
    count, last = before
    con.execute(
        f"""INSERT INTO {OUTBOX} BY NAME
        SELECT * EXCLUDE (urgency, rule),
            ? + row_number() OVER (ORDER BY urgency, container_number, container_id, rule, value)
                AS seq,
            CAST(? AS TIMESTAMPTZ) AS as_of, now() AS raised_at
        FROM ({rules_sql(settings, references_sql(con))}) n
        WHERE NOT EXISTS (SELECT 1 FROM {OUTBOX} o WHERE o.alert_key = n.alert_key)
        QUALIFY row_number() OVER (PARTITION BY alert_key ORDER BY rule) = 1""",
        [last, as_of],
    )
    after = con.execute(f"SELECT count(*) FROM {OUTBOX}").fetchone()
    assert after is not None
    return int(after[0] - count)
