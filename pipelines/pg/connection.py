"""Connections to a PostgreSQL warehouse, and errors a user can act on.

Contract:
- the password comes from the URL, else ``PGPASSWORD``, else ``~/.pgpass`` (both read by
  libpq itself), else the dlt secret ``destination.postgres.credentials`` (a URL or a table
  with ``password``);
- every failure to connect is :class:`~pipelines.warehouse.WarehouseUnusable` with one line:
  the warehouse's display form (password masked) and the server's reason, with the password
  masked again in case a server or driver echoes it;
- :func:`check_writable` tells, before a writer starts, whether the role may create the
  schemas it writes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote as urlquote
from urllib.parse import urlsplit

import psycopg2
from psycopg2.extensions import connection as Connection

from pipelines.config import ConfigError, Warehouse
from pipelines.warehouse import WarehouseUnusable

#: seconds to wait for a server that does not answer (an address nothing listens on)
CONNECT_TIMEOUT_S = 10
APPLICATION = "freetime"


def masked(text: str, warehouse: Warehouse) -> str:
    """``text`` with every occurrence of the warehouse's passwords replaced by ``***``."""
    out = text
    for secret in {warehouse.password, _dlt_password(), os.environ.get("PGPASSWORD")}:
        if secret:
            out = out.replace(secret, "***")
    return out


def one_line(exc: BaseException, warehouse: Warehouse) -> str:
    """The driver's message of ``exc`` on one line, passwords masked."""
    text = " ".join(str(exc).replace("\t", " ").split())
    return masked(text or type(exc).__name__, warehouse)


def _dlt_password() -> str | None:
    try:
        import dlt

        value: Any = dlt.secrets.get("destination.postgres.credentials")
    except Exception:  # no provider, no such key: no password from dlt
        return None
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return urlsplit(value).password
        return None
    if isinstance(value, Mapping):
        password = value.get("password")
        return str(password) if password else None
    return None


def _with_password(dsn: str, password: str) -> str:
    parts = urlsplit(dsn)
    host = parts.netloc.rsplit("@", 1)[-1]
    user = parts.username or ""
    netloc = f"{user}:{urlquote(password, safe='')}@{host}"
    return parts._replace(netloc=netloc).geturl()


def connect(
    warehouse: Warehouse, *, autocommit: bool = False, application: str = APPLICATION
) -> Connection:
    """A new connection to the warehouse (UTC session); WarehouseUnusable when it fails."""
    if warehouse.dsn is None:
        raise ConfigError(f"{warehouse.display} is not a PostgreSQL warehouse")
    options = {
        "connect_timeout": CONNECT_TIMEOUT_S,
        "application_name": application[:63],
        "options": "-c timezone=UTC",
    }
    try:
        try:
            con = psycopg2.connect(warehouse.dsn, **options)
        except psycopg2.OperationalError as exc:
            fallback = _dlt_password() if warehouse.password is None else None
            if not fallback or "no password supplied" not in str(exc):
                raise
            con = psycopg2.connect(_with_password(warehouse.dsn, fallback), **options)
    except psycopg2.Error as exc:
        raise WarehouseUnusable(
            f"cannot connect to the warehouse {warehouse.display}: {one_line(exc, warehouse)}"
        ) from None  # the driver's exception may carry the DSN: never chain it
    con.autocommit = autocommit
    return con


def dsn_with_password(warehouse: Warehouse) -> str:
    """The DSN with the password libpq found (URL, ``PGPASSWORD``, ``~/.pgpass``, the dlt
    secret) written in, for a client that does not read them itself (dlt's credentials)."""
    assert warehouse.dsn is not None
    if warehouse.password is not None:
        return warehouse.dsn
    con = connect(warehouse)
    try:
        password = con.info.password
    finally:
        con.close()
    return _with_password(warehouse.dsn, password) if password else warehouse.dsn


@contextlib.contextmanager
def connection(
    warehouse: Warehouse, *, autocommit: bool = False, application: str = APPLICATION
) -> Iterator[Connection]:
    """:func:`connect`, closed on exit."""
    con = connect(warehouse, autocommit=autocommit, application=application)
    try:
        yield con
    finally:
        con.close()


def check_writable(warehouse: Warehouse, schemas: tuple[str, ...]) -> None:
    """WarehouseUnusable unless the role can write ``schemas``: each exists with CREATE and
    USAGE for it, or it may create schemas in the database."""
    with connection(warehouse, autocommit=True) as con, con.cursor() as cur:
        cur.execute(
            "SELECT current_user, current_database(), "
            "has_database_privilege(current_database(), 'CREATE')"
        )
        row = cur.fetchone()
        assert row is not None
        user, database, may_create = row
        if may_create:
            return
        cur.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname = ANY(%s) "
            "AND has_schema_privilege(oid, 'CREATE') AND has_schema_privilege(oid, 'USAGE')",
            [list(schemas)],
        )
        usable = {r[0] for r in cur.fetchall()}
    missing = [s for s in schemas if s not in usable]
    if missing:
        raise WarehouseUnusable(
            f"the role {user} may not create schemas in the database {database} of "
            f"{warehouse.display} (needed: {', '.join(missing)}); run "
            f'GRANT CREATE ON DATABASE "{database}" TO "{user}" as its owner'
        )
