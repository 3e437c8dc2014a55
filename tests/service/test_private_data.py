"""The embedded default as README's first command starts it (`grader dev`: SQLite, the SQLite
broker, its worker and the reconciler), after a real upload graded by the worker (a real nvcc
build in the sandbox, into the build cache), a similarity report and a roster import (its
first passwords written 0600 over an older 0644 file): no folder or file under
the data dir, the live database's -wal/-shm included, has a group or other permission bit; the
command's own processes run with umask 077, and its worker with 022, which the sandbox's view
needs (grader/runs/worker_start.py), its files owner-only all the same (issue 36)."""
from __future__ import annotations

import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from worker.rubric import load_rubric
from worker.starter_kit import zip_tree

GRADER = Path(sys.executable).with_name("grader")
pytestmark = pytest.mark.timeout(900)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _descendants(pid: int) -> list[int]:
    """`pid` and every process below it."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        try:
            status = Path(f"/proc/{name}/status").read_text() if name.isdigit() else ""
        except OSError:
            continue
        found = re.search(r"^PPid:\s+(\d+)", status, re.M)
        if found:
            parents[int(name)] = int(found.group(1))
    tree, grew = {pid}, True
    while grew:
        below = {child for child, parent in parents.items() if parent in tree} - tree
        tree |= below
        grew = bool(below)
    return sorted(tree)


def _umask(pid: int) -> tuple[str, str]:
    """(a process's umask, whether it is a Celery worker: "worker" or "grader")."""
    found = re.search(r"^Umask:\s+(\d+)", Path(f"/proc/{pid}/status").read_text(), re.M)
    assert found, pid
    return found.group(1), "worker" if b"celery" in Path(f"/proc/{pid}/cmdline").read_bytes() else "grader"


def _wait_for(what: str, check: object, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what} not in {timeout} s:\n{log.read_text(errors='replace')[-4000:]}"
        time.sleep(0.5)


def test_the_embedded_default_keeps_its_data_dir_owner_only(tmp_path: Path) -> None:
    data, port, log = tmp_path / "var", _free_port(), tmp_path / "grader-dev.log"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("KG_")}, "KG_DATA_DIR": str(data)}
    dev = subprocess.Popen([str(GRADER), "dev", "--no-demo", "--port", str(port)], env=env, cwd=tmp_path,
                           stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for("the student token", lambda: "student token:" in log.read_text(errors="replace"), 120, log)
        token = re.search(r"student token:\s+(\S+)", log.read_text()).group(1)  # type: ignore[union-attr]
        rubric = load_rubric("hw4")
        archive = zip_tree(rubric.starter_dir, tmp_path / "llmsys_hw4.zip", "llmsys_hw4")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"},
                          timeout=60) as client:
            _wait_for("the web app", lambda: _answers(client), 60, log)
            with archive.open("rb") as fh:
                created = client.post("/api/v1/submissions", files={"file": (archive.name, fh)})
            assert created.status_code == 201, created.text
            run: dict[str, object] = {}

            def final() -> bool:
                run.update(client.get(created.json()["run_url"]).json())
                return run["state"] in {"built", "scored", "failed"}

            _wait_for("the run's final state", final, 600, log)
        assert run["state"] == "built", run
        similarity = subprocess.run([str(GRADER), "similarity", "hw4", "--out", str(tmp_path / "report.json"),
                                     "--base", str(rubric.starter_dir)], env=env, cwd=tmp_path, capture_output=True,
                                    text=True, timeout=300)
        assert similarity.returncode == 0, similarity.stderr
        (tmp_path / "roster.csv").write_text("ada@example.edu,Ada Lovelace\n")
        passwords = tmp_path / "passwords.csv"
        passwords.write_text("an older export\n")
        passwords.chmod(0o644)
        roster = subprocess.run([str(GRADER), "roster", "import", str(tmp_path / "roster.csv"), "--out",
                                 str(passwords)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert roster.returncode == 0, roster.stderr
        assert passwords.read_text().startswith("login,password\nada@example.edu,")
        assert stat.S_IMODE(passwords.stat().st_mode) == 0o600, "first passwords readable by others"
        processes = {pid: _umask(pid) for pid in _descendants(dev.pid)}
        entries = [data, *data.rglob("*")]
        open_to_others = [f"{p.relative_to(tmp_path)} {stat.filemode(p.lstat().st_mode)}" for p in entries
                          if p.lstat().st_mode & 0o077]
    finally:
        os.killpg(dev.pid, signal.SIGTERM)
        try:
            dev.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait()
    names = {p.relative_to(data).as_posix() for p in entries}
    # What the check covered: the live database, the broker, the key, an upload, cached builds,
    # the similarity fingerprints, the job folders' parent.
    assert {"kernelgrade.db", "kernelgrade.db-wal", "kernelgrade.db-shm", "broker.db", "secret_key", "blobs",
            "build-cache", "jobs", "reports/fingerprints"} <= names, sorted(names)
    assert any(n.startswith("build-cache/") and n.endswith(".log") for n in names), sorted(names)
    assert any(re.fullmatch(r"blobs/../../[0-9a-f]{64}", n) for n in names), sorted(names)
    assert open_to_others == []
    assert set(processes.values()) == {("0077", "grader"), ("0022", "worker")}, processes


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/api/v1/health").status_code == 200
    except httpx.HTTPError:
        return False
