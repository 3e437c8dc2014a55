"""README's two commands as the Makefile runs them (`make -n`: printed, not run): `make dev`
installs the service's packages and the CUDA headers and nothing of the test tools; `make test`
and `make check` add the test tools; `make test` is pytest over two processes (WORKERS), printing
the slowest tests."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def planned(target: str, venv: Path, *variables: str) -> str:
    # Under `make test` this runs as a sub-make: without the parent's MAKEFLAGS/MAKELEVEL and with
    # --no-print-directory, its plan has no "Entering directory" lines around it.
    # A variable given to the outer make (`make test WORKERS=4`) reaches this one's environment too.
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "WORKERS"}}
    return subprocess.run(["make", "--no-print-directory", "-n", target, f"VENV={venv}", *variables], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=True).stdout


def test_make_dev_installs_what_serving_needs_only(tmp_path: Path) -> None:
    plan = planned("dev", tmp_path / "venv")
    assert "pip install" in plan and " -e . " in plan and "tools/cuda_headers.py" in plan
    assert "[test]" not in plan and "nvidia-cublas" not in plan
    assert plan.rstrip().endswith("grader dev --port 8000")


@pytest.mark.parametrize("target", ["test", "check"])
def test_make_test_and_check_add_the_test_tools(tmp_path: Path, target: str) -> None:
    plan = planned(target, tmp_path / "venv")
    assert " -e . " in plan and "-e '.[test]'" in plan
    if target == "test":  # the files spread over two processes unless told otherwise
        assert plan.rstrip().splitlines()[-1].endswith("-m pytest -n 2 --dist loadfile --durations=30")


@pytest.mark.parametrize(("workers", "command"), [("4", "-m pytest -n 4 --dist loadfile --durations=30"),
                                                  ("1", "-m pytest --durations=30")])
def test_make_test_takes_the_number_of_processes(tmp_path: Path, workers: str, command: str) -> None:
    plan = planned("test", tmp_path / "venv", f"WORKERS={workers}")
    assert plan.rstrip().splitlines()[-1].endswith(command)
