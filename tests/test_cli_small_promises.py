"""Small promises of the command line, each a one-liner a user meets (real processes; the
help texts are rendered in this process)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.analytics.tariffs import TariffError, load_tariffs

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERMINAL49_")}
    return subprocess.run(
        [sys.executable, "-m", "freetime_cli.main", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_port_in_use_is_one_line_without_noise() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _cli("sandbox", "serve", "--port", str(port), "--containers", "20")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"freetime sandbox serve: cannot bind 127.0.0.1:{port}: Address already in use"
    ]


def test_a_mistyped_folder_is_not_created_by_a_reader(tmp_path: Path) -> None:
    typo = tmp_path / "dta" / "freetime.duckdb"
    for command in (["risk"], ["report", "--out", str(tmp_path / "r.html")]):
        done = _cli(*command, "--duckdb", str(typo))
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(f"error: no warehouse at {typo}"), done.stderr
        assert not typo.parent.exists()


@pytest.mark.fast
def test_a_binary_tariff_file_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "tariffs.xlsx.csv"
    bad.write_bytes(b"PK\x03\x04\xff\xfe binary spreadsheet")
    try:
        load_tariffs(bad)
    except TariffError as exc:
        assert str(exc).startswith(f"{bad} is not a UTF-8 text CSV")
    else:
        raise AssertionError("a binary tariff file was accepted")


def test_the_report_is_written_for_sharing(published_warehouse: Path, tmp_path: Path) -> None:
    from pipelines.report.html import write_report

    db = published_warehouse
    old = os.umask(0o022)
    try:
        out = write_report(db, tmp_path / "report.html")
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


@pytest.mark.fast
def test_help_never_breaks_a_command_summary_mid_sentence() -> None:
    """Each command's summary in a group's --help is one sentence on one line (a wide
    terminal), and `freetime evidence --help` starts with its own summary whole. Rendered by
    the real app in this process (typer's runner): six processes cost two CPU-seconds."""
    from typer.testing import CliRunner

    from freetime_cli.main import app

    runner = CliRunner()
    for group in ([], ["webhooks"], ["documents"], ["mcp"], ["sandbox"]):
        done = runner.invoke(app, [*group, "--help"], env={"COLUMNS": "200"})
        assert done.exit_code == 0, done.output
        out = done.stdout
        commands = out.split("Commands")[-1].splitlines()[1:-1]
        assert commands, out
        continued = [line for line in commands if line.startswith("│" + " " * 4)]
        assert not continued, f"freetime {' '.join(group)} --help:\n{out}"
    done = runner.invoke(app, ["evidence", "--help"])
    assert "Write each container's evidence for a demurrage dispute (HTML and CSV)." in " ".join(
        done.stdout.split()
    )


def test_documents_sync_names_a_bad_warehouse_before_asking_for_a_key(tmp_path: Path) -> None:
    """The first thing to fix is said first: the warehouse is checked before the API key."""
    unreachable = "postgresql://desk:s3cret@127.0.0.1:1/freetime"
    done = _cli("documents", "sync", "--warehouse", unreachable)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: cannot connect to the warehouse"), done.stderr
    assert "s3cret" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
