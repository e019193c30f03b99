"""A warehouse on a full disk: one line and the old data, every time.

The warehouse (and the writers' working folder beside it) lives on a small tmpfs, filled up to
a random number of bytes before each load, so the disk runs out at a different moment of the
load each time: during the scan's staging, dlt's load or the publishing transaction. Needs
root to mount the tmpfs; skipped otherwise.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipelines.config import ApiSettings
from pipelines.load import run_load
from sandbox.thread import SandboxThread
from tests.test_write_safety import _dump

REPO = Path(__file__).resolve().parents[1]
CLOCK = "2026-11-20T12:00:00Z"
SIZE_MB = 48


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE_MB}m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _free(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


@pytest.mark.timeout(900)
def test_a_load_that_fills_the_disk_is_one_line_and_keeps_the_old_data(
    small_disk: Path, tmp_path: Path
) -> None:
    rng = random.Random(32)
    with SandboxThread(containers=400, seed=32, clock=CLOCK) as sb:
        api = ApiSettings(base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100_000)
        seed_db = tmp_path / "seed" / "w.duckdb"
        run_load(seed_db, api)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERMINAL49_")}
        env["TERMINAL49_API_KEY"] = sb.api_key
        env["TERMINAL49_RATE_LIMIT"] = "100000"  # the sandbox sets none: the disk is under test
        outcomes: list[str] = []
        for attempt in range(5):
            sb.advance(hours=2)
            db = small_disk / "w.duckdb"
            for left in small_disk.iterdir():
                shutil.rmtree(left) if left.is_dir() else left.unlink()
            shutil.copy(seed_db, db)
            old = _dump(db)
            # leave between a few kB and a few MB: the disk fills somewhere in the load
            leave = int(rng.uniform(0.02, 1.0) ** 2 * 6_000_000)
            with (small_disk / "filler").open("wb") as filler:
                filler.write(b"\0" * max(_free(small_disk) - leave, 0))
            proc = subprocess.run(
                [sys.executable, "-m", "freetime_cli.main", "load", "--full"]
                + ["--duckdb", str(db), "--base-url", sb.base_url],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            (small_disk / "filler").unlink()
            assert "Traceback" not in proc.stderr, (attempt, leave, proc.stderr)
            if proc.returncode == 0:
                outcomes.append("loaded")
                continue
            assert proc.returncode == 2, (attempt, leave, proc.stderr)
            lines = [line for line in proc.stderr.splitlines() if line.strip()]
            assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
            assert "No space left" in proc.stderr or "space" in proc.stderr.lower(), proc.stderr
            assert _dump(db) == old, f"attempt {attempt}: the old data changed"
            outcomes.append("refused")
        assert "refused" in outcomes, outcomes  # the disk did run out
