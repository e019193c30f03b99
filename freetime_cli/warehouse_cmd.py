"""`freetime warehouse grant-reader`: a role that can only read a PostgreSQL warehouse."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from freetime_cli._common import WarehouseOption, fail, out

app = typer.Typer(no_args_is_help=True, help="Manage the PostgreSQL warehouse's roles.")


@app.command("grant-reader")
def grant_reader(
    role: Annotated[str, typer.Argument(help="The role that may only read (created if new).")],
    warehouse: WarehouseOption = None,
) -> None:
    """Let ROLE read the warehouse and nothing else (the tool server's role; BI tools).

    Runs as the warehouse's writer (the role of --warehouse or FREETIME_WAREHOUSE). A new role
    is created with the password in FREETIME_READER_PASSWORD (never on the command line)."""
    from pipelines.config import ConfigError, resolve_warehouse
    from pipelines.warehouse import WarehouseError

    try:
        target = resolve_warehouse(warehouse)
        if not target.is_postgres:
            fail(
                f"the warehouse {target.display} is a DuckDB file: its readers need no role "
                "(give a postgresql:// URL with --warehouse or FREETIME_WAREHOUSE)"
            )
        from pipelines.pg.reader import grant_reader as grant  # psycopg2: for PostgreSQL only

        done = grant(target, role, os.environ.get("FREETIME_READER_PASSWORD") or None)
    except (ConfigError, WarehouseError) as exc:
        fail(str(exc))
    for line in done:
        out.print(line, highlight=False)
