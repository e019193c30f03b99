"""Every marimo notebook runs headless, every cell, against a warehouse loaded from the sandbox.

Each notebook runs through marimo's programmatic API (``app.run()``, script mode, the same as
``python notebooks/x.py``): it executes every cell in dependency order and re-raises the first
cell error, so the test fails on any cell error. The test also checks one output per cell and
the values the last cells defined, so a notebook that silently stopped early (``mo.stop``)
fails too.
"""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pipelines.warehouse import writing

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.py"))
AS_OF = datetime(2026, 11, 20, 12, tzinfo=UTC)


def run_notebook(
    notebook: Path, duckdb_path: Path, monkeypatch: pytest.MonkeyPatch, every_cell: bool = True
) -> dict[str, Any]:
    """Run every cell of ``notebook`` in script mode; the first cell error is raised."""
    monkeypatch.setenv("FREETIME_DUCKDB", str(duckdb_path))
    spec = importlib.util.spec_from_file_location(f"nb_{notebook.stem}", notebook)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    app = module.app
    cells = len(list(app._cell_manager.cell_ids()))
    outputs, defs = app.run()
    if every_cell:  # one output per cell: every cell ran (mo.stop would cut the list short)
        assert len(outputs) == cells, f"{notebook.name}: {len(outputs)} of {cells} cells ran"
    return dict(defs)


@pytest.fixture(scope="module")
def warehouse(published_warehouse: Path) -> Path:
    return published_warehouse


@pytest.mark.fast
def test_there_are_notebooks() -> None:
    assert {p.name for p in NOTEBOOKS} >= {"demurrage_risk.py", "explore.py"}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_every_cell(
    notebook: Path, warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    defs = run_notebook(notebook, warehouse, monkeypatch)
    if notebook.name == "demurrage_risk.py":
        # the data cell, the filters and the at-risk table all ran, on real rows
        assert defs["risk_data"].source == "published"
        assert defs["risk_data"].risk.height == 500
        assert defs["view"].risk.height == 500  # no filter chosen: everything
        assert defs["at_risk_rows"].height > 0
    if notebook.name == "explore.py":
        assert defs["table_overview"].height >= 6
        answers = defs["answers"]
        assert len(answers) >= 9  # every example question ran (the 10th needs two runs)
        fenix = answers["Which containers at Fenix have a customs hold and an LFD this week?"]
        assert fenix.height >= 1
    # nothing holds the warehouse after the notebook: a writer gets in at once
    with writing(warehouse, retry_seconds=1.0):
        pass


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_without_a_warehouse_says_so(
    notebook: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a missing file stops the notebook with a message (mo.stop), not a cell error
    missing = tmp_path / "none.duckdb"
    defs = run_notebook(notebook, missing, monkeypatch, every_cell=False)
    assert "answers" not in defs and "at_risk_rows" not in defs
    assert not missing.exists()  # read-only: nothing was created
