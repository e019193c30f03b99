"""Invoices in the warehouse: ``terminal49.invoices`` and ``terminal49.invoice_lines``.

Every version of an invoice is kept: an invoice is keyed by ``(issuer_name, invoice_number)``
and ``version`` (1, 2, ...); the current version has ``superseded_at`` NULL. Importing an
invoice whose content equals its current version changes nothing; other content is a
corrected invoice: a new version, the earlier one marked superseded. ``audited_at`` NULL marks
a version the audit has not seen yet (:func:`pending_audit`).

:func:`import_invoices` checks each invoice against the warehouse (the container and its bill
of lading are known, no date lies in the future), then writes every invoice that passed in one
transaction under the writer lock: an invoice is stored whole or not at all.

Both warehouses hold the same tables (PostgreSQL spells ``DOUBLE`` ``DOUBLE PRECISION``) and
run the same SQL (:mod:`.access`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pipelines.config import ANALYTICS_SCHEMA, DATASET
from pipelines.dialect import DUCKDB, Dialect
from pipelines.history import HISTORY_TABLE
from pipelines.invoices.access import Con, Target, dialect, insert_rows, transaction, writer
from pipelines.invoices.parties import party_of
from pipelines.invoices.schema import Invoice, Problem
from pipelines.pg.cursor import columns
from pipelines.warehouse import WarehouseMissing, existing_warehouse, quote, table_names

INVOICES, LINES = "invoices", "invoice_lines"
D = quote(DATASET)


def invoices_ddl(d: Dialect = DUCKDB) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of ``terminal49.invoices`` in dialect ``d``."""
    return f"""
CREATE TABLE IF NOT EXISTS {D}.{INVOICES} (
    issuer_name VARCHAR NOT NULL, invoice_number VARCHAR NOT NULL, version INTEGER NOT NULL,
    issuer_kind VARCHAR NOT NULL, invoice_date DATE NOT NULL, currency VARCHAR NOT NULL,
    due_date DATE, invoice_total {d.type("DOUBLE")}, dispute_contact VARCHAR,
    content_hash VARCHAR NOT NULL,
    source_file VARCHAR, imported_at TIMESTAMPTZ NOT NULL, superseded_at TIMESTAMPTZ,
    audited_at TIMESTAMPTZ,
    PRIMARY KEY (issuer_name, invoice_number, version))"""


def lines_ddl(d: Dialect = DUCKDB) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of ``terminal49.invoice_lines`` in dialect ``d``."""
    return f"""
CREATE TABLE IF NOT EXISTS {D}.{LINES} (
    issuer_name VARCHAR NOT NULL, invoice_number VARCHAR NOT NULL, version INTEGER NOT NULL,
    line_number INTEGER NOT NULL, container_number VARCHAR NOT NULL, container_id VARCHAR,
    bill_of_lading VARCHAR, port VARCHAR, charge_type VARCHAR NOT NULL,
    party VARCHAR NOT NULL, charge VARCHAR NOT NULL,
    billed_from DATE NOT NULL, billed_to DATE NOT NULL, days INTEGER NOT NULL,
    rate {d.type("DOUBLE")},
    tiers VARCHAR, amount {d.type("DOUBLE")} NOT NULL, free_days INTEGER, free_time_start DATE,
    free_time_end DATE,
    PRIMARY KEY (issuer_name, invoice_number, version, line_number))"""


@dataclass
class ImportSummary:
    """What an import did: invoices stored new, stored as corrections, unchanged, refused;
    and every problem (one line each)."""

    new: list[str] = field(default_factory=list)
    corrected: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def ensure_tables(con: Con) -> None:
    d = dialect(con)
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {D}")
    con.execute(invoices_ddl(d))
    con.execute(lines_ddl(d))


def _containers(con: Con, numbers: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per container number: id, bill of lading, first seen (UTC), port zone."""
    present = table_names(con, DATASET)
    ship = "shipments" in present
    hist = HISTORY_TABLE in present
    cols = columns(con, DATASET, "containers")
    zone = "c.pod_timezone" if "pod_timezone" in cols else "NULL"
    cur = con.execute(
        f"""SELECT upper(c.number), c.id,
                   {"upper(s.bill_of_lading_number)" if ship else "NULL"},
                   {
            "(SELECT min(observed_at) FROM "
            + D
            + "."
            + HISTORY_TABLE
            + " h WHERE h.entity = 'container' AND h.entity_id = c.id)"
            if hist
            else "NULL"
        },
                   coalesce({zone}, 'UTC')
            FROM {D}.containers c
            {f"LEFT JOIN {D}.shipments s ON s.id = c.shipment_id" if ship else ""}
            WHERE upper(c.number) IN (SELECT unnest(CAST(? AS VARCHAR[])))""",
        [list(numbers)],
    )
    return {
        n: {"id": i, "bl": bl, "first_seen": seen, "zone": z}
        for n, i, bl, seen, z in cur.fetchall()
    }


def _tariff_currencies(con: Con, numbers: Sequence[str]) -> dict[tuple[str, str, str], str]:
    """The charge engine's currency per (container number, party, charge), when published."""
    if "currency" not in columns(con, ANALYTICS_SCHEMA, "charges"):
        return {}
    rows = con.execute(
        f"SELECT upper(container_number), party, charge, currency FROM {ANALYTICS_SCHEMA}.charges "
        "WHERE currency IS NOT NULL "
        "AND upper(container_number) IN (SELECT unnest(CAST(? AS VARCHAR[])))",
        [list(numbers)],
    ).fetchall()
    return {(n, p, c): cur for n, p, c, cur in rows}


def check(
    con: Con, invoices: Sequence[Invoice], today: dt.date
) -> tuple[list[Invoice], list[Problem]]:
    """The invoices the warehouse can take, and the problems found (errors refuse their
    invoice; warnings keep it)."""
    numbers = sorted({line.container_number for inv in invoices for line in inv.lines})
    known = _containers(con, numbers)
    currencies = _tariff_currencies(con, numbers)
    ok: list[Invoice] = []
    problems: list[Problem] = []
    for inv in invoices:
        errors: list[Problem] = []

        def err(
            where: str,
            message: str,
            error: bool = True,
            inv: Invoice = inv,
            errors: list[Problem] = errors,
        ) -> None:
            (errors if error else problems).append(
                Problem(where, message, error, invoice_number=inv.invoice_number)
            )

        if inv.invoice_date > today:
            err(
                inv.source,
                f"invoice {inv.invoice_number}: invoice_date {inv.invoice_date} is in "
                f"the future (today is {today})",
            )
        for line in inv.lines:
            box = known.get(line.container_number)
            if box is None:
                err(
                    line.where,
                    f"unknown container {line.container_number}: freetime does not "
                    "track it (load it first, or check the number)",
                )
                continue
            # a box whose B/L freetime does not know cannot contradict the invoice's
            if line.bill_of_lading is not None and box["bl"] not in (None, line.bill_of_lading):
                err(
                    line.where,
                    f"unknown bill of lading {line.bill_of_lading} for container "
                    f"{line.container_number} (freetime has {box['bl']})",
                )
            if line.billed_to > today:
                err(line.where, f"billed_to {line.billed_to} is in the future (today is {today})")
            party = party_of(inv.issuer_kind, line.charge_type)
            cur = currencies.get((line.container_number, *party))
            if cur is not None and cur != inv.currency:
                err(
                    line.where,
                    f"currency {inv.currency} is not the tariff's ({cur}) for "
                    f"{line.container_number}",
                    error=False,
                )
            seen = box["first_seen"]
            if seen is not None and seen.astimezone(dt.UTC).date() > line.billed_to:
                err(
                    line.where,
                    f"freetime first saw {line.container_number} on "
                    f"{seen.astimezone(dt.UTC):%Y-%m-%d}, after the billed days: it cannot check "
                    "them",
                    error=False,
                )
        problems.extend(errors)
        if not errors:
            ok.append(inv)
    return ok, problems


def import_invoices(
    warehouse: Target,
    invoices: Sequence[Invoice],
    problems: Sequence[Problem] = (),
    today: dt.date | None = None,
    now: dt.datetime | None = None,
) -> ImportSummary:
    """Check ``invoices`` against the warehouse and store those that pass, in one transaction
    under the writer lock. ``warehouse``: a DuckDB path or a PostgreSQL URL (or Warehouse).
    ``problems``: those found reading the files (carried into the summary; invoices they
    refused are not in ``invoices``; with no invoice the warehouse is not opened). Raises
    WarehouseMissing, WarehouseUnusable."""
    now = now or dt.datetime.now(dt.UTC)
    today = today or now.date()
    summary = ImportSummary(problems=list(problems))
    summary.refused = sorted({p.invoice_number or p.where for p in problems if p.error})
    if not invoices:  # nothing read: nothing to check against the warehouse
        return summary
    with writer(warehouse, "invoice import") as con:
        if "containers" not in table_names(con, DATASET):
            raise WarehouseMissing("the warehouse has no containers yet: run `freetime load` first")
        ok, found = check(con, invoices, today)
        summary.problems += found
        summary.refused += sorted({p.invoice_number or p.where for p in found if p.error})
        if not ok:  # nothing to write: the warehouse stays as it was
            return summary
        ids = _containers(con, sorted({x.container_number for inv in ok for x in inv.lines}))
        with transaction(con):
            ensure_tables(con)
            _store(con, ok, ids, now, summary)
    return summary


def _store(
    con: Con,
    invoices: Sequence[Invoice],
    ids: dict[str, dict[str, Any]],
    now: dt.datetime,
    summary: ImportSummary,
) -> None:
    """Write the new versions of ``invoices`` (inside the caller's transaction): the current
    versions are read in one query, the rows written in one statement per table."""
    d = dialect(con)
    current = {
        (issuer, number): (int(version), digest)
        for issuer, number, version, digest in con.execute(
            f"SELECT issuer_name, invoice_number, max(version), "
            f"{d.last_by('content_hash', 'version')} FROM {D}.{INVOICES} "
            f"{d.group_by(['issuer_name', 'invoice_number'])}"
        ).fetchall()
    }
    heads: list[list[Any]] = []
    rows: list[list[Any]] = []
    superseded: list[tuple[str, str]] = []
    for inv in invoices:
        digest = inv.content_hash()
        was = current.get(inv.key)
        if was is not None and was[1] == digest:
            summary.unchanged.append(inv.invoice_number)
            continue
        version = 1 if was is None else was[0] + 1
        if was is not None:
            superseded.append(inv.key)
            summary.corrected.append(inv.invoice_number)
        else:
            summary.new.append(inv.invoice_number)
        heads.append(
            [
                inv.issuer_name,
                inv.invoice_number,
                version,
                inv.issuer_kind,
                inv.invoice_date,
                inv.currency,
                inv.due_date,
                inv.invoice_total,
                inv.dispute_contact,
                digest,
                inv.source,
                now,
                None,
                None,
            ]
        )
        rows += [
            [
                inv.issuer_name,
                inv.invoice_number,
                version,
                n,
                x.container_number,
                ids.get(x.container_number, {}).get("id"),
                x.bill_of_lading,
                x.port,
                x.charge_type,
                *party_of(inv.issuer_kind, x.charge_type),
                x.billed_from,
                x.billed_to,
                x.days,
                x.rate,
                x.tiers,
                x.amount,
                x.free_days,
                x.free_time_start,
                x.free_time_end,
            ]
            for n, x in enumerate(inv.lines, start=1)
        ]
    for issuer, number in superseded:
        con.execute(
            f"UPDATE {D}.{INVOICES} SET superseded_at = ? WHERE issuer_name = ? "
            "AND invoice_number = ? AND superseded_at IS NULL",
            [now, issuer, number],
        )
    for table, data in ((INVOICES, heads), (LINES, rows)):
        insert_rows(con, f"{D}.{table}", columns(con, DATASET, table), data)


def pending_audit(warehouse: Target) -> int:
    """Current invoice versions the audit has not seen (0 without invoices or warehouse)."""
    from pipelines.invoices.access import reader

    try:
        existing_warehouse(warehouse)
    except WarehouseMissing:
        return 0
    with reader(warehouse) as con:
        if INVOICES not in table_names(con, DATASET):
            return 0
        row = con.execute(
            f"SELECT count(*) FROM {D}.{INVOICES} WHERE superseded_at IS NULL "
            "AND audited_at IS NULL"
        ).fetchall()
    return int(row[0][0]) if row else 0
