"""`freetime documents upload|sync`: direct upload of files, and the documents load."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from freetime_cli._common import (
    BaseUrlOption,
    DuckDbOption,
    WarehouseOption,
    fail,
    out,
    print_error,
    quiet_logging,
    warehouse_given,
)
from pipelines.config import ApiSettings, ConfigError
from pipelines.warehouse import WarehouseError

app = typer.Typer(no_args_is_help=True, help="Upload documents and load document intake.")


@app.command("upload")
def upload(
    files: Annotated[list[Path], typer.Argument(help="Files to upload.")],
    name: Annotated[
        str | None, typer.Option(help="Document name (one file only; default: the file name).")
    ] = None,
    base_url: BaseUrlOption = None,
) -> None:
    """Upload files by direct upload and create a document for each."""
    from pipelines.document_intake import (
        DocumentsClient,
        DuplicateDocument,
        UploadFailed,
        read_file,
    )

    if name is not None and len(files) > 1:
        fail("--name applies to one file; upload the files one by one to name each")
    if name is not None and not name.strip():
        fail("--name must not be empty")
    datas = []
    for f in files:  # every file is checked before the first request
        try:
            datas.append(read_file(f))
        except UploadFailed as exc:
            fail(str(exc))
    try:
        api = ApiSettings.resolve(base_url=base_url)
        client = DocumentsClient(api)
    except ConfigError as exc:
        fail(str(exc))
    failures = 0
    with client:
        for f, data in zip(files, datas, strict=True):
            try:
                result = client.upload_bytes(data, f.name, name or f.name, path=f)
            except DuplicateDocument as exc:
                failures += 1
                print_error(str(exc))
                continue
            except UploadFailed as exc:
                failures += 1
                print_error(str(exc))
                continue
            out.print(
                f"{f}: document {result.document_id} ({result.byte_size} bytes, md5 "
                f"{result.checksum}); extraction runs asynchronously",
                highlight=False,
            )
    if failures:
        raise typer.Exit(1)


@app.command("sync")
def sync(
    duckdb: DuckDbOption = None,
    warehouse: WarehouseOption = None,
    base_url: BaseUrlOption = None,
) -> None:
    """Load documents, email submissions and their representations into the warehouse.

    The warehouse is a DuckDB file or PostgreSQL: --warehouse, else FREETIME_WAREHOUSE.
    """
    from freetime_cli.load_cmd import check_writer
    from pipelines.config import resolve_warehouse
    from pipelines.document_intake import sync_documents

    quiet_logging()
    target = warehouse_given(duckdb, warehouse)
    try:
        check_writer(resolve_warehouse(target))  # a bad warehouse fails before the API is asked
        api = ApiSettings.resolve(base_url=base_url)
    except (ConfigError, WarehouseError) as exc:
        fail(str(exc))
    from pipelines.load import LoadFailed  # dlt: for a sync that starts

    try:
        rows = sync_documents(target, api)
    except (ConfigError, LoadFailed, WarehouseError) as exc:
        fail(str(exc))
    out.print(", ".join(f"{t} {n}" for t, n in rows.items()), highlight=False)
