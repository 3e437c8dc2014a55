"""README's `grader starter build` command, run exactly as README writes it (the installed
`grader` script, in a fresh folder), writes the student starter; `make starter` runs the
same command."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from worker.rubric import load_rubric
from worker.starter_kit import write_starter_zip

ROOT = Path(__file__).resolve().parents[2]
GRADER = Path(sys.executable).with_name("grader")


def _readme_command() -> list[str]:
    commands = re.findall(r"`(grader starter build [^`]*)`", (ROOT / "README.md").read_text())
    assert len(commands) == 1, commands
    return shlex.split(commands[0])


def test_readmes_starter_command_writes_the_starter(tmp_path: Path) -> None:
    command = _readme_command()
    done = subprocess.run([str(GRADER), *command[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    written = tmp_path / command[command.index("--out") + 1]
    assert (tmp_path / done.stdout.strip()).resolve() == written.resolve()  # it names what it wrote
    expected = write_starter_zip(load_rubric(command[3]), tmp_path / "expected" / "starter.zip")
    assert written.read_bytes() == expected.read_bytes()  # the student starter, as the generator makes it


def test_make_starter_runs_readmes_command() -> None:
    recipe = re.search(r"^starter:.*\n\t(.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert recipe is not None
    assert shlex.split(recipe.group(1).replace("$(VENV)/bin/", "")) == _readme_command()
