"""`freetime sandbox ...` (placeholder until the sandbox lands)."""

import typer

app = typer.Typer(no_args_is_help=True)


@app.command()
def serve() -> None:
    """Serve a synthetic Terminal49 account over HTTP."""
    typer.echo("not implemented yet")
    raise typer.Exit(1)
