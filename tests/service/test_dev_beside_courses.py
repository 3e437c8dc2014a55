"""`grader dev` (make dev) on a data folder where another course already holds the default
assignment (issue 49): it says so in a sentence and stops its demo, instead of a KeyError
traceback from an upload its course could not take. The real commands, on the embedded default
(SQLite) in a folder of their own."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

GRADER = Path(sys.executable).with_name("grader")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _grader(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The command's outcome; one still running after 120 s (a `grader dev` that kept serving)
    is stopped with the processes it started, and fails the test."""
    proc = subprocess.Popen([str(GRADER), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"`grader {' '.join(args)}` still ran after 120 s: {out[-2000:]}{err[-2000:]}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_dev_says_its_course_lacks_the_assignment_another_course_holds(tmp_path: Path) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("KG_")}, "KG_DATA_DIR": str(tmp_path / "var")}
    assert _grader(env, "migrate").returncode == 0
    made = _grader(env, "course", "create", "other", "--title", "Another course", "--assignment", "hw4")
    assert made.returncode == 0, made.stderr
    dev = _grader(env, "dev", "--exit-after-demo", "--port", str(_free_port()))
    assert dev.returncode == 1, (dev.stdout, dev.stderr)
    assert "course dev, holding no assignment" in dev.stdout
    assert ("demo: not run: hw4 is an assignment of the course other, not of dev, so dev's student cannot upload "
            "to it (`grader user enroll student other` lets them") in dev.stderr
    assert "Traceback" not in dev.stdout + dev.stderr
