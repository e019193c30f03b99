"""The README's promises that can be checked mechanically (the risk SQL is run in test_risk)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from freetime_cli.main import app

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def test_quickstart_is_two_commands_and_ci_runs_the_test_one() -> None:
    block = README.split("## Quickstart")[1].split("```console")[1].split("```")[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["python3 quickstart.py run", "python3 quickstart.py test"]
    ci = (REPO / ".ci" / "run").read_text()
    assert "\npython3 quickstart.py test\n" in ci


def test_every_documented_command_has_help() -> None:
    table = README.split("## Commands")[1].split("## Configuration")[0]
    commands = set(re.findall(r"`freetime ([a-z]+(?: [a-z]+)?)", table))
    assert {"run", "load", "risk", "serve", "report", "sandbox serve"} <= commands
    runner = CliRunner()
    for command in sorted(commands):
        words = command.split()
        if words[0] in {"webhooks", "documents", "sandbox"} and len(words) == 1:
            continue
        result = runner.invoke(app, [*words, "--help"])
        assert result.exit_code == 0, (command, result.output)
        assert "Usage" in result.output
