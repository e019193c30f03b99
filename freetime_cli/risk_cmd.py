"""`freetime risk` (placeholder until the risk views land)."""

import typer


def risk() -> None:
    """Recompute demurrage risk and print the at-risk containers."""
    typer.echo("not implemented yet")
    raise typer.Exit(1)
