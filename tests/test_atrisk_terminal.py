"""`freetime risk` in a real 80x40 terminal (tmux), read back with ``capture-pane``: every
container number, level and LFD whole, no line wider than the terminal, the screen filled with
what fits. CI installs tmux (``.ci/run``): there a missing tmux fails instead of skipping."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path

import duckdb
import pytest

REPO = Path(__file__).resolve().parents[1]
WIDTH, HEIGHT = 80, 40


@pytest.fixture()
def warehouse(published_warehouse: Path, tmp_path: Path) -> tuple[Path, str]:
    """A copy of the shared sandbox warehouse (`freetime risk` publishes into it), and the
    instant its risk was computed for."""
    path = tmp_path / "freetime.duckdb"
    shutil.copyfile(published_warehouse, path)
    with duckdb.connect(str(path), read_only=True) as con:
        row = con.execute("SELECT max(as_of) FROM analytics.demurrage_risk").fetchone()
    assert row is not None
    return path, row[0].astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture()
def tmux() -> Iterator[list[str]]:
    exe = shutil.which("tmux")
    if exe is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("tmux is not installed: CI must install it (.ci/run does, with apt-get)")
        pytest.skip("tmux is not installed")
    cmd = [exe, "-L", f"freetime-test-{uuid.uuid4().hex[:8]}", "-f", os.devnull]
    try:
        yield cmd
    finally:
        subprocess.run([*cmd, "kill-server"], capture_output=True, check=False)


def test_risk_in_an_80_column_terminal(
    warehouse: tuple[Path, str], tmux: list[str], tmp_path: Path
) -> None:
    db, as_of = warehouse
    signal = f"done-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "risk.sh"
    script.write_text(
        f"cd {REPO}\n"
        f"'{sys.executable}' -m freetime_cli.main risk --duckdb '{db}' --as-of {as_of}\n"
        f"echo $? > '{tmp_path / 'rc'}'\n"
        f"{' '.join(tmux)} wait-for -S {signal}\n"
        "sleep 600\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COLUMNS", "LINES"))}
    env["TERM"] = "xterm-256color"
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", str(WIDTH), "-y", str(HEIGHT), f"sh {script}"],
        env=env,
        check=True,
    )
    subprocess.run([*tmux, "wait-for", signal], check=True, timeout=180)
    assert (tmp_path / "rc").read_text().strip() == "0"
    screen = subprocess.run(
        [*tmux, "capture-pane", "-p", "-J"],  # the screen as seen, wrapped lines joined
        capture_output=True,
        text=True,
        check=True,
    ).stdout.rstrip("\n")
    lines = screen.splitlines()
    assert all(len(line) <= WIDTH for line in lines), screen
    with duckdb.connect(str(db), read_only=True) as con:
        want = con.execute(
            "SELECT container_number, risk_level, strftime(lfd_date, '%Y-%m-%d'), lfd_source, "
            "days_to_lfd FROM analytics.at_risk_containers ORDER BY urgency_rank"
        ).fetchall()
    shown = [w for w in want if any(w[0] in line for line in lines)]
    assert shown == want[: len(shown)]  # the most urgent, in order
    # the title still on screen (nothing scrolled off), then 10 containers or more a 24 lines
    assert lines[0].startswith("At-risk containers as of "), screen
    assert len(shown) >= 10 * HEIGHT // 24, screen
    for number, level, lfd, source, days in shown:
        line = next(line for line in lines if number in line)
        assert f" {level} " in f" {line} " and f"{lfd} {source}" in line, line
        assert f" {days}" in line, line
    assert f"{len(shown)} shown, {len(want) - len(shown)} more (--limit 0: all)" in screen
