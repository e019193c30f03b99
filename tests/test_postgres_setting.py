"""The warehouse setting: a DuckDB path or a PostgreSQL URL, never showing the password."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.config import (
    ConfigError,
    Warehouse,
    mask_url,
    resolve_duckdb_path,
    resolve_warehouse,
)

pytestmark = pytest.mark.fast

URL = "postgresql://team:p%40ss-Word@db.internal:6543/freetime"


def test_a_url_is_a_postgresql_warehouse_shown_without_its_password() -> None:
    w = Warehouse.parse(URL)
    assert w.kind == "postgres" and w.is_postgres and w.path is None
    assert w.password == "p@ss-Word"
    assert w.display == "postgresql://team:***@db.internal:6543/freetime"
    assert "p%40ss" not in repr(w) + str(w) + f"{w}"


def test_a_path_is_a_duckdb_warehouse(tmp_path: Path) -> None:
    w = Warehouse.parse(tmp_path / "w.duckdb")
    assert w.kind == "duckdb" and w.path == tmp_path / "w.duckdb" and w.dsn is None
    assert w.display == str(tmp_path / "w.duckdb")


def test_a_url_typed_as_a_path_is_still_a_url() -> None:
    # --duckdb takes a Path, which collapses the double slash
    assert Warehouse.parse(Path(URL)).display == "postgresql://team:***@db.internal:6543/freetime"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://team:p%40ss-Word@db.internal:port/freetime",  # a port that is no number
        "postgresql://team:p%40ss-Word@db.internal:6543/",  # no database
        "postgres://team:p%40ss-Word@/freetime",  # no host
    ],
)
def test_a_url_that_is_not_one_is_one_line_without_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as refused:
        Warehouse.parse(url)
    message = str(refused.value)
    assert "is not a PostgreSQL URL" in message and "\n" not in message
    assert "p%40ss" not in message and "p@ss" not in message


def test_the_setting_comes_from_the_option_then_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("FREETIME_DUCKDB", raising=False)
    monkeypatch.setenv("FREETIME_WAREHOUSE", URL)
    assert resolve_warehouse().is_postgres
    assert resolve_warehouse(tmp_path / "x.duckdb").path == tmp_path / "x.duckdb"
    monkeypatch.setenv("FREETIME_WAREHOUSE", str(tmp_path / "y.duckdb"))
    assert resolve_warehouse().path == tmp_path / "y.duckdb"
    assert resolve_duckdb_path(None) == tmp_path / "y.duckdb"
    monkeypatch.delenv("FREETIME_WAREHOUSE")
    monkeypatch.setenv("FREETIME_DUCKDB", str(tmp_path / "z.duckdb"))
    assert resolve_warehouse().path == tmp_path / "z.duckdb"


def test_a_duckdb_only_command_refuses_a_postgresql_warehouse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FREETIME_WAREHOUSE", URL)
    with pytest.raises(ConfigError, match="DuckDB warehouse only") as refused:
        resolve_duckdb_path(None)
    assert "p%40ss" not in str(refused.value)
    with pytest.raises(ConfigError, match="DuckDB warehouse only"):
        resolve_duckdb_path(Path(URL))


def test_the_writers_working_folder_is_local_and_named_by_the_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FREETIME_WORKDIR", str(tmp_path))
    folder = Warehouse.parse(URL).working_folder()
    assert folder == tmp_path / ".dlt-pipelines" / "pg-db_internal-6543-freetime"
    assert folder.is_dir()


def test_mask_url_leaves_a_url_without_a_password_as_it_is() -> None:
    assert mask_url("postgresql://team@db/freetime") == "postgresql://team@db/freetime"


def test_a_masked_url_takes_its_password_from_the_setting_it_was_shown_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FREETIME_WAREHOUSE", URL)
    shown = Warehouse.parse(URL).display
    assert Warehouse.parse(shown).password == "p@ss-Word"
    # another server's masked URL gets no password of this one (libpq looks elsewhere)
    other = Warehouse.parse(shown.replace("db.internal", "db.elsewhere"))
    assert other.password is None and other.dsn == "postgresql://team@db.elsewhere:6543/freetime"
