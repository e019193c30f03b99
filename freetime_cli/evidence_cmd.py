"""`freetime evidence`: per container, the facts a demurrage dispute needs (HTML and CSV)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from freetime_cli._common import DuckDbOption, WarehouseOption, console, fail, warehouse_given


def evidence(
    containers: Annotated[
        list[str], typer.Argument(help="Container numbers (or ids).", show_default=False)
    ],
    duckdb: DuckDbOption = None,
    warehouse: WarehouseOption = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="HTML file to write (its CSV beside it); with several containers, each is "
            "written as <stem>-<number>.html. Default data/evidence/<number>.html.",
        ),
    ] = None,
    tariffs: Annotated[
        str | None, typer.Option("--tariffs", help="Tariff CSV (default data/tariffs.csv).")
    ] = None,
) -> None:
    """Write each container's evidence for a demurrage dispute (HTML and CSV).

    Free time, the days charged with their rates, and the timeline of availability, holds,
    LFDs, appointments, pickup and empty return.
    """
    from pipelines.config import ConfigError
    from pipelines.warehouse import WarehouseError, existing_warehouse

    target = warehouse_given(duckdb, warehouse)
    try:
        path = existing_warehouse(target).path  # None on PostgreSQL
        if out is not None and out.is_dir():
            raise ValueError(f"--out {out} is a directory; give a file name such as box.html")
    except (ValueError, WarehouseError, ConfigError) as exc:
        fail(str(exc))
    # polars and duckdb only for a warehouse that is there to read
    from pipelines.analytics import TariffError
    from pipelines.history.evidence import EvidenceError, write_evidence

    try:
        written = write_evidence(path or target, containers, out, tariffs)
    except (EvidenceError, ValueError, TariffError, WarehouseError, ConfigError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write the evidence: {exc.strerror or exc}: {exc.filename or out}")
    for page, sheet in written:
        console.print(f"evidence: wrote {page} and {sheet}", highlight=False)
