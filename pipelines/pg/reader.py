"""A role that can only read the PostgreSQL warehouse: for the tool server, BI tools, psql.

:func:`grant_reader` runs as the warehouse's writer (the role of ``FREETIME_WAREHOUSE``, which
owns what it publishes), in one transaction:

- creates the role (``LOGIN``, with the password given) when it does not exist yet: that needs
  ``CREATEROLE``; without it, a superuser creates the role first and this grants to it;
- ``CONNECT`` on the database, ``USAGE`` on ``terminal49``, ``analytics`` and ``freetime_risk``
  (the slots behind ``analytics.demurrage_risk``, :mod:`pipelines.pg.slots`; created when
  missing, so that the rights hold before the first load), ``SELECT`` on every table and view
  in them, and the same on every table the writer creates there later (default privileges);
- the role's sessions default to read-only transactions and a statement timeout, so that a
  dashboard or psql session under it cannot hold the warehouse for long either (when the
  writer may alter the role; it is said otherwise). The tool server sets both itself anyway.

A role that can do more than read (:func:`pipelines.toolserver.pgread.check_reader`) is
refused by the tool server.

:func:`ensure_lookup_indexes` gives the readers' lookups (a container by number or id, its
risk row, holds, fees, shipment) an index each: the writers call it inside their publishing
transaction, so an index exists as soon as its table does (a reader cannot create one).
"""

from __future__ import annotations

from typing import Any

import psycopg2
from psycopg2 import sql

from pipelines.config import ANALYTICS_SCHEMA, DATASET, ConfigError, Warehouse
from pipelines.pg.connection import connection, one_line
from pipelines.pg.slots import SCHEMA as SLOTS
from pipelines.warehouse import WarehouseUnusable

#: the statement timeout the reader's sessions get by default
READER_STATEMENT_TIMEOUT = "30s"
#: the schemas a reader role reads (the tool server refuses a role that may write them)
SCHEMAS = (DATASET, ANALYTICS_SCHEMA, SLOTS)


def grant_reader(warehouse: Warehouse, role: str, password: str | None = None) -> list[str]:
    """Make ``role`` a reader of ``warehouse`` (see the module docstring); what was done, one
    line each. ConfigError for a role name that is not one, a missing role without a password;
    WarehouseUnusable when the server refuses (the writer lacks a right: its reason)."""
    if not role or len(role) > 63 or not role.replace("_", "").isalnum():
        raise ConfigError(f"a role name is letters, digits and _ (at most 63), not {role!r}")
    done: list[str] = []
    who = sql.Identifier(role)
    with connection(warehouse) as con, con.cursor() as cur:
        try:
            cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
            if cur.fetchone() is None:
                if not password:
                    raise ConfigError(
                        f"there is no role {role} yet: give its password "
                        "(FREETIME_READER_PASSWORD) to create it"
                    )
                cur.execute(
                    sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(who, sql.Literal(password))
                )
                done.append(f"created the role {role} (LOGIN)")
            cur.execute("SELECT current_database(), current_user")
            row = cur.fetchone()
            assert row is not None
            database, writer = row
            cur.execute(
                sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(database), who)
            )
            for schema in SCHEMAS:
                name = sql.Identifier(schema)
                cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(name))
                cur.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(name, who))
                cur.execute(
                    sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(name, who)
                )
                cur.execute(
                    sql.SQL(
                        "ALTER DEFAULT PRIVILEGES IN SCHEMA {} GRANT SELECT ON TABLES TO {}"
                    ).format(name, who)
                )
            done.append(
                f"{role} may read every table of {', '.join(SCHEMAS)} in {database}, and those "
                f"{writer} creates there later"
            )
            cur.execute("SAVEPOINT defaults")
            try:
                cur.execute(
                    sql.SQL("ALTER ROLE {} SET default_transaction_read_only = on").format(who)
                )
                cur.execute(
                    sql.SQL("ALTER ROLE {} SET statement_timeout = {}").format(
                        who, sql.Literal(READER_STATEMENT_TIMEOUT)
                    )
                )
                done.append(
                    f"{role}'s sessions are read-only with a {READER_STATEMENT_TIMEOUT} "
                    "statement timeout by default"
                )
            except psycopg2.errors.InsufficientPrivilege:
                cur.execute("ROLLBACK TO SAVEPOINT defaults")
                done.append(
                    f"{writer} may not alter {role}: its sessions keep the server's defaults "
                    f"(as a superuser: ALTER ROLE {role} SET default_transaction_read_only = on)"
                )
            con.commit()
        except psycopg2.Error as exc:
            con.rollback()
            raise WarehouseUnusable(
                f"cannot grant {role} reading {warehouse.display}: {one_line(exc, warehouse)}"
            ) from None
    return done


def ensure_lookup_indexes(cur: Any) -> int:
    """Create the missing indexes of the tool server's lookups
    (:data:`pipelines.toolserver.queries.LOOKUPS`) on the tables that exist, in the caller's
    transaction (a psycopg2 or ADBC cursor); how many were created."""
    from pipelines.toolserver.queries import LOOKUPS

    cur.execute(
        "SELECT n.nspname, c.relname, a.attname, "
        "EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indkey[0] = a.attnum) "
        "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        f"WHERE c.relkind IN ('r', 'p') AND n.nspname IN ('{DATASET}', '{ANALYTICS_SCHEMA}') "
        "AND a.attnum > 0 AND NOT a.attisdropped"
    )
    have = {(r[0], r[1], r[2]): bool(r[3]) for r in cur.fetchall()}
    created = 0
    for schema, table, column in LOOKUPS:
        if have.get((schema, table, column)) is False:  # the column exists, without an index
            name = f"freetime_{table}_{column}"[:63]
            cur.execute(f'CREATE INDEX "{name}" ON "{schema}"."{table}" ("{column}")')
            created += 1
    return created
