"""A role that can only read the PostgreSQL warehouse: for the tool server, BI tools, psql.

:func:`grant_reader` runs as the warehouse's writer (the role of ``FREETIME_WAREHOUSE``, which
owns what it publishes), in one transaction:

- creates the role (``LOGIN``, with the password given) when it does not exist yet: that needs
  ``CREATEROLE``; without it, a superuser creates the role first and this grants to it;
- ``CONNECT`` on the database, ``USAGE`` on ``terminal49`` and ``analytics`` (created when
  missing, so that the rights hold before the first load), ``SELECT`` on every table and view
  in them, and the same on every table the writer creates there later (default privileges);
- the role's sessions default to read-only transactions and a statement timeout, so that a
  dashboard or psql session under it cannot hold the warehouse for long either (when the
  writer may alter the role; it is said otherwise). The tool server sets both itself anyway.

A role that can do more than read (:func:`pipelines.toolserver.pgread.check_reader`) is
refused by the tool server.
"""

from __future__ import annotations

import psycopg2
from psycopg2 import sql

from pipelines.config import ANALYTICS_SCHEMA, DATASET, ConfigError, Warehouse
from pipelines.pg.connection import connection, one_line
from pipelines.warehouse import WarehouseUnusable

#: the statement timeout the reader's sessions get by default
READER_STATEMENT_TIMEOUT = "30s"
SCHEMAS = (DATASET, ANALYTICS_SCHEMA)


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
