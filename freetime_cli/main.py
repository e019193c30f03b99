"""The ``freetime`` command line: one typer app, one module per command group."""

from __future__ import annotations

import typer

from freetime_cli import load_cmd, report_cmd, risk_cmd, run_cmd, serve_cmd
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
app.command("run")(run_cmd.run)
app.command("serve")(serve_cmd.serve)


if __name__ == "__main__":
    app()
