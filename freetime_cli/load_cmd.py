"""`freetime load` (placeholder until the load lands)."""

import typer


def load() -> None:
    """Load the Terminal49 account into DuckDB."""
    typer.echo("not implemented yet")
    raise typer.Exit(1)
