"""The run page's live status on PostgreSQL: queue position and an ETA from the capacity model
on the median of recent run durations, and the worker's progress ("running problem k of 5") recorded on the
run row by the real executor grading the CPU stand-in, read through the page's status JSON."""
from __future__ import annotations

import shutil
import threading
import time
import uuid
import zipfile
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.credentials import issue_token
from grader.capacity.model import queue_eta
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, Course, Role, Run, RunState, utcnow
from grader.passwords import set_password
from grader.reads.runstatus import TIMING_TEXT, busy_remaining, describe_duration
from grader.runs.lifecycle import Disposition, RunExecutor
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore, StoredBlob
from tests.fixtures import cpu_standin
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth
from tests.service.test_scored_run import small_stage, work  # noqa: F401  (fixtures)
from tests.service.test_web_settings import PASSWORD, Browser
from worker.rubric import load_rubric


def test_describe_duration() -> None:
    assert describe_duration(30) == "under a minute" and describe_duration(600) == "about 10 minutes"


@pytest.fixture(scope="module")
def student_name(sessions: sessionmaker[Session]) -> str:
    name = f"prog-{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, name, Role.student), PASSWORD, SUITE_ARGON2)
    return name


def test_queued_run_shows_position_and_eta_from_recent_durations(
    settings: Settings, sessions: sessionmaker[Session], student_name: str,
) -> None:
    # A fresh assignment, so the recent runs are exactly the ones made here: 60 s, 120 s, 600 s
    # (median 120 s), one failed run (ignored: failures end early) and a queued one.
    with session_scope(sessions) as session:
        slug = f"eta-{uuid.uuid4().hex[:6]}"
        assignment = Assignment(slug=slug, title="ETA test", course=Course(slug=slug, title="ETA test"), total_points=100)
        session.add(assignment)
        user = get_or_create_user(session, student_name, Role.student, [assignment.course])
        now = utcnow()
        blob = StoredBlob(sha256="cd" * 32, size=10)
        for seconds, state in ((60, RunState.scored), (120, RunState.built), (600, RunState.scored),
                               (5, RunState.failed)):
            _sub, done = record_submission(session, user, assignment, "old.zip", blob)
            done.state, done.started_at, done.finished_at = state, now - timedelta(seconds=seconds), now
        _sub, queued = record_submission(session, user, assignment, "new.zip", blob)
        queued.enqueued_at = now  # sent to the broker: only a sent run has a place in the queue
        session.flush()
        run_id = queued.id
        ahead = session.scalar(select(func.count(Run.id)).where(Run.state == RunState.queued, Run.id < run_id))
        # each worker busy now is free when its run would end at the median grade time
        expected = queue_eta(ahead + 1, busy_remaining(session, 120.0), 120.0)
    browser = Browser(settings, student_name)
    status = browser.client.get(f"/runs/{run_id}/status").json()
    assert status["state"] == "queued" and status["queue_position"] == ahead + 1
    assert abs(status["eta_s"] - expected) <= 2  # a second or two passes between the reads
    assert status["progress_text"].startswith(f"Position {ahead + 1} in the queue; estimated result in ")
    page = browser.client.get(f"/runs/{run_id}").text
    assert f"Position {ahead + 1} in the queue" in page and 'id="run-progress"' in page


def test_queued_run_without_history_says_no_estimate(
    settings: Settings, sessions: sessionmaker[Session], student_name: str,
) -> None:
    with session_scope(sessions) as session:
        slug = f"eta-{uuid.uuid4().hex[:6]}"
        assignment = Assignment(slug=slug, title="new", course=Course(slug=slug, title="new"), total_points=100)
        session.add(assignment)
        user = get_or_create_user(session, student_name, Role.student, [assignment.course])
        _sub, run = record_submission(session, user, assignment, "a.zip", StoredBlob(sha256="ef" * 32, size=1))
        run.enqueued_at = utcnow()  # sent to the broker
        session.flush()
        run_id = run.id
    status = Browser(settings, student_name).client.get(f"/runs/{run_id}/status").json()
    assert status["eta_s"] is None and "no estimate yet" in status["progress_text"]


@pytest.mark.skipif(not cpu_standin.have_compiler(), reason="needs g++ for the CPU stand-in")
def test_worker_records_each_problem_and_the_page_reports_it(
    settings: Settings, sessions: sessionmaker[Session], student_name: str, small_stage: None,  # noqa: F811
    work: Path,  # noqa: F811
) -> None:
    source = cpu_standin.make_cpu_submission(work / "src" / "llmsys_hw4")
    archive = work / "standin.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(source.rglob("*")):
            if path.is_file() and path.suffix != ".so":
                zf.write(path, path.relative_to(source.parent).as_posix())
    blob = BlobStore(settings.blob_dir).put_bytes(archive.read_bytes())
    with session_scope(sessions) as session:
        user = get_or_create_user(session, student_name, Role.student)
        _, run = record_submission(session, user, get_assignment(session, "hw4"), "standin.zip", blob)
        run_id = run.id
    gpu_settings = settings.model_copy(update={
        "gpu_grading": "on", "nvcc": str(cpu_standin.write_fake_nvcc(work / "bin" / "nvcc")),
        "data_dir": work / "data",
        # a build cache of its own: the session's may hold these sources, and the page must see nvcc run
        "build": settings.build.model_copy(update={"cache_dir": work / "build-cache"}),
    })
    gpu_settings.blob_dir.parent.mkdir(parents=True)
    shutil.copytree(settings.blob_dir, gpu_settings.blob_dir)

    outcome: list[Disposition] = []
    executor = RunExecutor(gpu_settings, sessions, BlobStore(gpu_settings.blob_dir))
    grading = threading.Thread(target=lambda: outcome.extend(  # the two pieces, as the worker's two tasks
        [executor.execute(run_id), executor.execute_timing(run_id)]))
    client = Browser(settings, student_name).client
    seen: list[tuple[str, str]] = []  # (state, progress text) in the order the page saw them
    api_seen: list[dict[str, object] | None] = []  # the API's run.progress meanwhile
    with session_scope(sessions) as session:
        token = issue_token(session, get_or_create_user(session, student_name, Role.student), "progress")
    grading.start()
    while grading.is_alive() or not seen or seen[-1][0] not in ("scored", "failed", "built"):
        status = client.get(f"/runs/{run_id}/status").json()
        if status["progress"] and status["progress"].get("problem"):
            api_seen.append(client.get(f"/api/v1/runs/{run_id}", headers=auth(token)).json()["progress"])
        if not seen or seen[-1] != (status["state"], status["progress_text"]):
            seen.append((status["state"], status["progress_text"]))
        if not grading.is_alive() and status["final"]:
            break
        time.sleep(0.005)
    grading.join()
    assert outcome == [Disposition.done, Disposition.done]
    texts = [text for _state, text in seen]
    problems = [t for t in texts if t.startswith("Running problem")]
    rubric = load_rubric("hw4").problems
    named = [f"Running problem {k} of 5: {p.id} {p.title}." for k, p in enumerate(rubric, 1)]
    # the checks piece checks the four kernel problems at once (the first named), then Problem 3
    assert problems == [named[0], named[-1]], seen
    timed = [t for state, t in seen if state == "timing"]  # the timing piece names what it times
    assert timed and all(t.startswith(TIMING_TEXT) for t in timed), seen
    assert any(f"Now: {p.id} {p.title}." in t for t in timed for p in rubric), timed
    assert "Building: compiling the kernels with nvcc." in texts
    assert seen[-1] == ("scored", "")
    assert any(p and p.get("stage") == "run" and p.get("total") == 5 for p in api_seen), api_seen
    with session_scope(sessions) as session:
        final = session.get(Run, run_id)
        assert final is not None and final.progress is None  # cleared once final
