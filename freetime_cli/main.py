"""The ``freetime`` command line: one typer app, one module per command group."""

from __future__ import annotations

import typer

from freetime_cli import (
    alerts_cmd,
    documents_cmd,
    evidence_cmd,
    invoices_cmd,
    load_cmd,
    mcp_cmd,
    report_cmd,
    risk_cmd,
    run_cmd,
    serve_cmd,
    warehouse_cmd,
    webhooks_cmd,
)
from sandbox import cli as sandbox_cli

app = typer.Typer(
    name="freetime",
    help="Ocean container tracking warehouse: Terminal49 -> DuckDB, with demurrage risk.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(sandbox_cli.app, name="sandbox", help="The local Terminal49 sandbox server.")
app.command("load")(load_cmd.load)
app.command("risk")(risk_cmd.risk)
app.command("report")(report_cmd.report)
app.command("evidence")(evidence_cmd.evidence)
app.command("run")(run_cmd.run)
app.command("serve")(serve_cmd.serve)
app.add_typer(webhooks_cmd.app, name="webhooks", help="Receive and apply Terminal49 webhooks.")
app.add_typer(documents_cmd.app, name="documents", help="Upload documents; load document intake.")
app.add_typer(mcp_cmd.app, name="mcp", help="Serve the warehouse to MCP tool clients.")
app.add_typer(alerts_cmd.app, name="alerts", help="Alerts on risk changes; the morning digest.")
app.add_typer(invoices_cmd.app, name="invoices", help="Audit demurrage and detention invoices.")
app.add_typer(warehouse_cmd.app, name="warehouse", help="The PostgreSQL warehouse's roles.")


if __name__ == "__main__":
    app()
