"""The warehouse options of the commands that read or compute on either warehouse (no server
needed: each case is refused before anything connects)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from freetime_cli.main import app

pytestmark = pytest.mark.fast

URL = "postgresql://team:p%40ss-Word@db.internal:6543/freetime"


@pytest.mark.parametrize("command", [["report"], ["evidence", "ABCU1234567"], ["risk"], ["run"]])
def test_the_warehouse_is_given_once(command: list[str], tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, [*command, "--duckdb", str(tmp_path / "w.duckdb"), "--warehouse", URL]
    )
    assert result.exit_code == 2
    assert "give the warehouse once" in result.output


def test_run_refuses_a_url_that_is_not_one_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before anything connects or starts (a server that does not answer and a wrong
    password: tests/test_postgres_flow.py)."""
    bad = "postgresql://team:p%40ss-Word@db.internal:6543/"
    for args, env in (([], bad), (["--warehouse", bad], None)):
        if env:
            monkeypatch.setenv("FREETIME_WAREHOUSE", env)
        else:
            monkeypatch.delenv("FREETIME_WAREHOUSE", raising=False)
        result = CliRunner().invoke(app, ["run", *args])
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and "is not a PostgreSQL URL" in lines[0]
        assert "p@ss" not in result.output and "p%40ss" not in result.output
