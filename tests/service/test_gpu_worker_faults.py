"""The record of GPU worker faults (issue 52): a real supervisor (grader.gpu_workers.Supervisor)
over two fake GPUs (KG_FAKE_GPUS, read by list_gpus as `grader worker --gpus` does), with the
CLI's recorder (grader.gpu_events.event_recorder) writing to the suite's PostgreSQL. One GPU's
worker keeps exiting: its start, restarts and leaving out are rows while the other GPU's worker
keeps running; /ops/workers shows the left-out GPU to a site administrator, refuses anyone else,
and no longer lists it once a supervisor has started it again. A database that is away costs
the rows, never the supervisor.

The workers are tests/unit/grader/test_gpu_workers.py's small recorder scripts, not Celery workers."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.gpu_events import CONNECT_TIMEOUT_S, record_event
from grader.gpu_workers import Gpu, WorkerEvent
from grader.models import GpuWorkerEvent, Role, utcnow
from grader.passwords import set_password
from grader.settings import Settings
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.test_web_settings import PASSWORD, Browser
from tests.unit.grader.test_gpu_workers import RECORDER, SMI_OUTPUT, TWO

ROOT = Path(__file__).resolve().parents[2]

# What `grader worker --gpus all` does, with the recorder scripts for workers: the GPU list from
# KG_FAKE_GPUS, the database from KG_DATABASE_URL, events recorded under the host given.
SUPERVISOR = """
import json, sys
from pathlib import Path
from grader.gpu_events import event_recorder
from grader.gpu_workers import Supervisor, list_gpus, log_supervisor, worker_env
from grader.settings import get_settings
out, recorder, host, plan = Path(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
members = [(gpu, [sys.executable, recorder, str(out), plan[str(gpu.index)]],
            worker_env({"PATH": "/usr/bin:/bin"}, gpu, "off", None)) for gpu in list_gpus()]
log_supervisor()
sys.exit(Supervisor(members, max_restarts=2, restart_delay_s=0.05, poll_s=0.05,
                    on_event=event_recorder(get_settings(), host)).run())
"""


def _supervise(out: Path, env: dict[str, str], host: str, plan: dict[str, str]) -> subprocess.Popen[str]:
    out.mkdir(exist_ok=True)
    recorder = out / "recorder.py"
    recorder.write_text(textwrap.dedent(RECORDER))
    return subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(out), str(recorder), host, json.dumps(plan)],
                            cwd=ROOT, env={**os.environ, **env, "KG_FAKE_GPUS": SMI_OUTPUT},
                            stderr=subprocess.PIPE, text=True)


def _wait_for(what: str, check: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _stop(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return stderr


def _rows(sessions: sessionmaker[Session], host: str) -> list[tuple[int, str, int | None, int | None, int, str]]:
    with session_scope(sessions) as db:
        return [(e.gpu_index, e.kind, e.exit_code, e.signal, e.restarts, e.gpu_uuid)
                for e in db.scalars(select(GpuWorkerEvent).where(GpuWorkerEvent.host == host)
                                    .order_by(GpuWorkerEvent.id))]


def _starts(out: Path, index: int) -> int:
    path = out / f"starts-{index}"
    return len(path.read_text().split()) if path.exists() else 0


@pytest.fixture
def admin_and_prof(sessions: sessionmaker[Session]) -> tuple[str, str]:
    tag = uuid.uuid4().hex[:6]
    admin, prof = f"gw-adm-{tag}", f"gw-prof-{tag}"
    with session_scope(sessions) as db:
        person = get_or_create_user(db, admin, Role.student, [])
        person.site_admin = True
        set_password(person, PASSWORD, SUITE_ARGON2)
        set_password(get_or_create_user(db, prof, Role.instructor), PASSWORD, SUITE_ARGON2)
    return admin, prof


def _out_table(html: str) -> str:
    """The 'GPUs out now' part of the page."""
    found = re.search(r'<table id="gpus-out">.*?</table>', html, re.S)
    return found.group(0) if found else ""


def test_a_gpu_whose_worker_keeps_exiting_is_recorded_and_shown_to_site_admins(
        settings_env: dict[str, str], settings: Settings, sessions: sessionmaker[Session],
        admin_and_prof: tuple[str, str], tmp_path: Path) -> None:
    host = f"gpuhost-{uuid.uuid4().hex[:6]}"
    proc = _supervise(tmp_path / "first", settings_env, host, {"0": "wait", "1": "die"})
    try:
        _wait_for("GPU 1 left out", lambda: any(r[1] == "left_out" for r in _rows(sessions, host)))
        time.sleep(0.3)  # no fourth start after the leaving out
        assert proc.poll() is None and (tmp_path / "first" / "ready-0").exists()  # GPU 0's worker goes on
        assert _starts(tmp_path / "first", 0) == 1 and _starts(tmp_path / "first", 1) == 3
        gpu0, gpu1 = TWO[0].uuid, TWO[1].uuid
        assert sorted(_rows(sessions, host), key=lambda r: r[0]) == [
            (0, "started", None, None, 0, gpu0),
            (1, "started", None, None, 0, gpu1),
            (1, "restarted", 3, None, 1, gpu1),
            (1, "restarted", 3, None, 2, gpu1),
            (1, "left_out", 3, None, 2, gpu1)]
        admin, prof = admin_and_prof
        shown = Browser(settings, admin).client.get("/ops/workers")
        assert shown.status_code == 200
        out = _out_table(shown.text)
        assert host in out and gpu1 in out and gpu0 not in out and "after 2 restarts in a row" in out
        faults = shown.text[shown.text.index('id="gpu-faults"'):]
        assert faults.index("GPU left out") < faults.index("restarted (restart 2 in a row)") \
            < faults.index("restarted (restart 1 in a row)")  # newest first
        refused = Browser(settings, prof).client.get("/ops/workers")
        assert refused.status_code == 403 and "Only a site administrator" in refused.text
    finally:
        stderr = _stop(proc)
    assert proc.returncode == 0, stderr  # GPU 0's worker stopped on SIGTERM, as asked
    # the host's supervisor started afresh, GPU 1 no longer failing: it is not out any more
    again = _supervise(tmp_path / "again", settings_env, host, {"0": "wait", "1": "wait"})
    try:
        _wait_for("both workers again", lambda: all((tmp_path / "again" / f"ready-{i}").exists() for i in (0, 1)))
        _wait_for("the starts recorded", lambda: sum(r[1] == "started" for r in _rows(sessions, host)) == 4)
        shown = Browser(settings, admin_and_prof[0]).client.get("/ops/workers")
        assert shown.status_code == 200 and host not in _out_table(shown.text)
        assert host in shown.text  # its past faults are still listed
    finally:
        _stop(again)


def test_a_database_that_is_away_costs_the_rows_not_the_supervisor(settings_env: dict[str, str],
                                                                    tmp_path: Path) -> None:
    away = {**settings_env, "KG_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/absent"}
    proc = _supervise(tmp_path, away, "nowhere", {"0": "wait", "1": "die"})
    try:
        _wait_for("GPU 1's last start", lambda: _starts(tmp_path, 1) == 3)
        time.sleep(0.5)
        assert proc.poll() is None and _starts(tmp_path, 0) == 1  # still watching GPU 0's worker
    finally:
        stderr = _stop(proc)
    assert proc.returncode == 0, stderr
    assert "GPU 1 (" in stderr and "is left out" in stderr
    assert "GPU 1: cannot record its worker's left_out in the database (OperationalError" in stderr
    assert "GPU 0: cannot record its worker's started" in stderr


def test_a_database_that_does_not_answer_holds_the_supervisor_a_few_seconds(settings_env: dict[str, str],
                                                                             tmp_path: Path) -> None:
    """A PostgreSQL address whose listener never speaks: each row waits for the recorder's
    connect timeout (grader.gpu_events.CONNECT_TIMEOUT_S), then the supervisor goes on and
    still stops on SIGTERM."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # connections complete in the kernel, no answer ever comes
        port = silent.getsockname()[1]
        mute = {**settings_env, "KG_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{port}/absent"}
        began = time.monotonic()
        proc = _supervise(tmp_path, mute, "mute", {"0": "wait", "1": "wait"})
        try:
            _wait_for("both workers", lambda: all((tmp_path / f"ready-{i}").exists() for i in (0, 1)), timeout=60)
        finally:
            stderr = _stop(proc)
    assert proc.returncode == 0, stderr
    assert stderr.count("cannot record its worker's started in the database (OperationalError") == 2, stderr
    assert time.monotonic() - began < 4 * CONNECT_TIMEOUT_S


def test_a_gpus_rows_past_the_retention_go_when_it_has_a_new_one(sessions: sessionmaker[Session]) -> None:
    """A GPU's rows older than the retention are dropped as its next row is written (the new one,
    which says whether it is out, stays); another GPU's old rows wait for its own next row."""
    host, now = f"prune-{uuid.uuid4().hex[:6]}", utcnow()
    with session_scope(sessions) as session:
        for index, days in ((0, 100), (0, 10), (1, 100)):
            session.add(GpuWorkerEvent(host=host, gpu_index=index, gpu_uuid=f"GPU-{index}", kind="restarted",
                                       restarts=1, at=now - timedelta(days=days)))
    assert record_event(sessions, host, WorkerEvent(Gpu(0, "GPU-0"), "left_out", 1, 2), timedelta(days=30))
    with session_scope(sessions) as session:
        kept = session.execute(select(GpuWorkerEvent.gpu_index, GpuWorkerEvent.kind).where(GpuWorkerEvent.host == host)
                               .order_by(GpuWorkerEvent.gpu_index, GpuWorkerEvent.at)).all()
    assert [tuple(row) for row in kept] == [(0, "restarted"), (0, "left_out"), (1, "restarted")]
