"""Small promises of the command line, each a one-liner a user meets (real processes; the
help texts are rendered in this process)."""

from __future__ import annotations

import json
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


def _refused(tmp_path: Path) -> list[tuple[list[str], str]]:
    """Refusals (arguments, the start of the one error line) that no other test names, each
    checked before the command imports what it runs with; files they name under ``tmp_path``."""
    (tmp_path / "folder").mkdir()
    folder = str(tmp_path / "folder")
    there = tmp_path / "there.duckdb"  # exists: the checks after the warehouse's are reached
    there.touch()
    plain = tmp_path / "plain.toml"  # an alerts table with no destination and no level
    plain.write_text("[alerts]\nretry_seconds = 60\n")
    twice = ["--duckdb", str(tmp_path / "a.duckdb"), "--warehouse", str(tmp_path / "b.duckdb")]
    return [
        (["alerts", "list", "--status", "lost"], "unknown status 'lost'"),
        (["alerts", "send", "--config", str(plain)], "no destination: set FREETIME_ALERT_URLS"),
        (["webhooks", "apply", "--duckdb", str(there), "--inbox", folder], "the inbox path"),
        (["documents", "upload", "--name", "x", "a.pdf", "b.pdf"], "--name applies to one"),
        (["documents", "upload", folder], f"{folder}: is a folder, not a file"),
        (["evidence", "X", "--duckdb", str(there), "--out", folder], f"--out {folder} is a"),
        (["invoices", "import", "x.csv", *twice], "give the warehouse once"),
        (["invoices", "dispute", "1", "--out", folder], f"--out {folder} is a directory"),
        (["warehouse", "grant-reader", "r", "--warehouse", str(there)], "the warehouse "),
    ]


@pytest.mark.fast
def test_refusals_are_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from freetime_cli.main import app

    for name in ("FREETIME_WAREHOUSE", "FREETIME_DUCKDB", "FREETIME_INBOX", "FREETIME_ALERT_URLS"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    for args, start in _refused(tmp_path):
        done = runner.invoke(app, args, env={"COLUMNS": "400"})
        assert done.exit_code == 2, (args, done.output)
        assert done.stderr.startswith(f"error: {start}"), (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)


@pytest.mark.fast
def test_nothing_to_apply_reads_no_api_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no inbox yet, `webhooks apply` has nothing to do and never reads the API settings
    (reading them imports dlt): a bad one is not even looked at."""
    from typer.testing import CliRunner

    from freetime_cli.main import app

    monkeypatch.delenv("FREETIME_INBOX", raising=False)
    monkeypatch.setenv("TERMINAL49_BASE_URL", "not a URL")
    fresh = tmp_path / "fresh" / "freetime.duckdb"
    done = CliRunner().invoke(app, ["webhooks", "apply", "--duckdb", str(fresh)])
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith("nothing to apply: no inbox at"), done.stdout
    assert not fresh.parent.exists()


@pytest.mark.fast
def test_a_missing_warehouse_is_said_before_a_bad_tariff_file(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from freetime_cli.main import app

    bad = tmp_path / "tariffs.csv"
    bad.write_text("not,a,tariff\n")
    missing = tmp_path / "missing.duckdb"
    done = CliRunner().invoke(app, ["risk", "--duckdb", str(missing), "--tariffs", str(bad)])
    assert done.exit_code == 2, done.output
    assert done.stderr.startswith(f"error: no warehouse at {missing}"), done.stderr


def test_refusals_import_neither_dlt_nor_polars_nor_duckdb(tmp_path: Path) -> None:
    """The refusals above, run in one process: none imports what its command runs with."""
    cases = [args for args, _ in _refused(tmp_path)]
    cases.append(["risk", "--duckdb", str(tmp_path / "missing.duckdb")])
    cases.append(["webhooks", "apply", "--duckdb", str(tmp_path / "new" / "freetime.duckdb")])
    script = (
        "import json, sys\n"
        "from typer.testing import CliRunner\n"
        "from freetime_cli.main import app\n"
        "codes = [CliRunner().invoke(app, a).exit_code for a in json.loads(sys.argv[1])]\n"
        "heavy = [m for m in ('dlt', 'polars', 'duckdb', 'psycopg2') if m in sys.modules]\n"
        "print(json.dumps([codes, heavy]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TERMINAL49_", "FREETIME_"))}
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(cases)],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    codes, heavy = json.loads(done.stdout)
    assert codes == [2] * (len(cases) - 1) + [0]
    assert heavy == []
