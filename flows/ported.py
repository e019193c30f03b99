"""Which steps of the flows run on a PostgreSQL warehouse (issue 30): the one place to say so.

A flow resolves its warehouse once (a DuckDB path or a ``postgresql://`` URL: the flow's
parameter, else ``FREETIME_WAREHOUSE`` on the machine that runs it) and
hands the tasks its printable form: a URL with ``***`` for its password, which
:func:`pipelines.config.resolve_warehouse` completes from ``FREETIME_WAREHOUSE`` (so the
password never enters a task's parameters, a log line or an artifact).

On PostgreSQL the load and risk steps run; a step whose pipeline does not run there yet is
skipped with one log line (:func:`skipped`) rather than failing the run. Remove a step from
:data:`NOT_ON_POSTGRES` once its pipeline runs on PostgreSQL.
"""

from __future__ import annotations

from prefect import get_run_logger

from pipelines.config import Warehouse, resolve_warehouse

#: step -> what is not done on a PostgreSQL warehouse yet (the log line's reason)
NOT_ON_POSTGRES: dict[str, str] = {}


def skipped(step: str, warehouse: str | Warehouse | None) -> bool:
    """Whether ``step`` is skipped on ``warehouse`` (then one info line says so and why)."""
    reason = NOT_ON_POSTGRES.get(step)
    if reason is None or not resolve_warehouse(warehouse).is_postgres:
        return False
    get_run_logger().info("%s: skipped on PostgreSQL (%s)", step, reason)
    return True
