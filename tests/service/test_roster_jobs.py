"""The roster page's import in the background, on PostgreSQL with a real Celery worker (Redis
broker): a 300-line Canvas gradebook export is posted, the answer comes at once, the job's
progress is followed through its JSON status until the worker is done, and the new accounts'
first passwords are downloaded once as a login,password CSV (a second download is refused with
the reason; another browser of the same instructor cannot download them at all); nothing of
the passwords is stored on the job."""
from __future__ import annotations

import csv
import io
import secrets
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.course.membership import get_or_create_user
from grader.course.roster import derived_password
from grader.course.roster_jobs import RosterJobError, digest_of, take_passwords
from grader.db import session_scope
from grader.models import Role, RosterJob, User, utcnow
from grader.passwords import set_password
from grader.service import get_assignment
from grader.settings import Settings
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import WorkerProcess
from tests.service.test_roster_canvas import _canvas_export, held_login
from tests.service.test_web_settings import PASSWORD, Browser


def _prof(settings: Settings, sessions: sessionmaker[Session]) -> str:
    name = f"jprof-{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, name, Role.instructor), PASSWORD, SUITE_ARGON2)
    return name


def _start(browser: Browser, text: str) -> None:
    """Posts the roster."""
    response = browser.client.post("/roster", data={"csrf_token": browser.page_csrf("/roster"), "confirm": "import"},
                                   files={"file": ("roster.csv", text.encode(), "text/csv")}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/roster", response.text


def _follow(browser: Browser, worker: WorkerProcess, until: Callable[[dict[str, Any]], bool] = lambda s: s["final"],
            timeout: float = 240) -> dict[str, Any]:
    """The job's status once `until` holds (by default: once it is final)."""
    deadline = time.monotonic() + timeout
    while True:
        status = browser.client.get("/roster/job.json").json()
        if until(status):
            return status
        assert time.monotonic() < deadline, f"no such status after {timeout} s: {status}\n{worker.log()}"
        time.sleep(0.3)


def _download(browser: Browser, job_id: int) -> Any:
    return browser.client.post(f"/roster/imports/{job_id}/passwords.csv",
                               data={"csrf_token": browser.page_csrf("/roster")})


def test_a_300_line_canvas_roster_is_imported_in_the_background_and_its_passwords_downloaded_once(
        settings: Settings, sessions: sessionmaker[Session], worker: WorkerProcess) -> None:
    tag = uuid.uuid4().hex[:6]
    text = _canvas_export(tag, 297)
    assert len(text.splitlines()) == 300
    name = _prof(settings, sessions)
    prof = Browser(settings, name)
    with held_login(sessions, f"s151{tag}"):  # the import waits at student 151, its 152nd line
        _start(prof, text)  # answered while the import waits: it is not done in the request
        part = _follow(prof, worker, until=lambda s: s["lines_done"] > 0)
        assert part["state"] == "running" and not part["final"], part
        assert 0 < part["lines_done"] <= 151 < part["lines_total"] == 297, part  # progress seen on the way
    status = _follow(prof, worker)
    assert status["state"] == "done", status
    assert status["lines_done"] == status["lines_total"] == 297  # Canvas's test student is a line error
    page = prof.client.get("/roster").text
    assert "297 created, 0 updated, 0 unchanged, 1 line(s) with errors." in page
    assert "Line 300: the SIS Login ID is empty" in page
    assert "can be downloaded once" in page and "Download the first passwords (CSV, one time only)" in page

    # Another browser of the same instructor sees the result but cannot download the passwords.
    other = Browser(settings, name)
    assert "Only the browser that started import" in other.client.get("/roster").text
    refused = _download(other, status["id"])
    assert refused.status_code == 409 and "This browser does not hold the key of import" in refused.text

    got = _download(prof, status["id"])
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/csv")
    assert got.headers["content-disposition"] == f'attachment; filename="first-passwords-{status["id"]}.csv"'
    rows = list(csv.reader(io.StringIO(got.text)))
    assert rows[0] == ["login", "password"] and len(rows) == 298
    passwords = dict(rows[1:])
    assert f"s001{tag}" in passwords and f"s000{tag}@andrew.example.edu" in passwords
    for login in (f"s001{tag}", f"s000{tag}@andrew.example.edu"):  # the downloaded passwords log in
        fresh = TestClient(create_app(settings))
        signed_in = fresh.post("/login", data={"csrf_token": Browser.csrf(fresh.get("/login").text), "username": login,
                                               "password": passwords[login]}, follow_redirects=False)
        assert signed_in.status_code == 303, login

    again = _download(prof, status["id"])
    assert again.status_code == 410
    assert f"The first passwords of import {status['id']} were already downloaded" in again.text
    assert "were downloaded on" in prof.client.get("/roster").text
    with session_scope(sessions) as session:
        job = session.get(RosterJob, status["id"])
        assert job is not None and job.roster is None and job.passwords_taken_at is not None
        stored = f"{job.result}{job.key_digest}{job.error}"
        assert not any(p in stored for p in passwords.values())
        assert len(session.scalars(select(User).where(User.username.like(f"%{tag}%"))).all()) == 297


def test_a_second_import_waits_for_the_first_and_its_download(
        settings: Settings, sessions: sessionmaker[Session], worker: WorkerProcess) -> None:
    tag = uuid.uuid4().hex[:6]
    prof = Browser(settings, _prof(settings, sessions))
    with held_login(sessions, f"w5-{tag}@uni.edu"):  # the first import waits there
        _start(prof, "".join(f"w{n}-{tag}@uni.edu,W {n}\n" for n in range(20)))
        response = prof.client.post("/roster", data={"csrf_token": prof.page_csrf("/roster"), "confirm": "import",
                                                     "text": f"w-new-{tag}@uni.edu,W New\n"})
        assert response.status_code == 409 and "is still" in response.text and "wait for it to end" in response.text
    status = _follow(prof, worker)
    assert status["state"] == "done"
    refused = prof.client.post("/roster", data={"csrf_token": prof.page_csrf("/roster"), "confirm": "import",
                                                "text": f"w-new-{tag}@uni.edu,W New\n"})
    assert refused.status_code == 409
    assert f"Download the first passwords of import {status['id']} first" in refused.text
    assert _download(prof, status["id"]).status_code == 200
    _start(prof, f"w-new-{tag}@uni.edu,W New\n")
    assert _follow(prof, worker)["id"] > status["id"]


def test_the_status_is_refused_to_students_and_answers_401_after_the_session(
        settings: Settings, sessions: sessionmaker[Session]) -> None:
    student = f"jstu-{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, student, Role.student), PASSWORD, SUITE_ARGON2)
    assert Browser(settings, student).client.get("/roster/job.json").status_code == 403
    anonymous = TestClient(create_app(settings)).get("/roster/job.json", follow_redirects=False)
    assert anonymous.status_code == 401 and anonymous.json() == {"detail": "log in"}  # follow.js says so on the page


def test_an_import_no_worker_took_fails_with_the_reason_and_frees_the_form(
        settings: Settings, sessions: sessionmaker[Session]) -> None:
    name = _prof(settings, sessions)
    with session_scope(sessions) as session:
        prof_id = session.scalar(select(User.id).where(User.username == name))
        course_id = get_assignment(session, "hw4").course_id
        session.add(RosterJob(course_id=course_id, requested_by=prof_id, state="queued", roster="a@b.edu,A\n",
                              key_digest="0" * 64,
                              created_at=utcnow() - timedelta(seconds=settings.task_time_limit_s + 1)))
    status = Browser(settings, name).client.get("/roster/job.json").json()
    assert status["state"] == "failed" and status["final"]
    assert status["error"] == (f"No worker took it in {settings.task_time_limit_s} s: start one that consumes the "
                               f"queue {settings.similarity_queue} (grader worker --similarity), then import the "
                               "file again.")
    with session_scope(sessions) as session:
        job = session.scalars(select(RosterJob).where(RosterJob.requested_by == prof_id)).one()
        assert job.roster is None and job.finished_at is not None


def test_a_failed_import_gives_the_passwords_of_the_accounts_it_created(
        settings: Settings, sessions: sessionmaker[Session]) -> None:
    name, key = _prof(settings, sessions), secrets.token_hex(32)
    with session_scope(sessions) as session:
        job = RosterJob(course_id=get_assignment(session, "hw4").course_id, state="failed", key_digest=digest_of(key),
                        requested_by=session.scalar(select(User.id).where(User.username == name)),
                        result={"summary": "1 created", "created": ["ada"], "updated": [], "errors": []})
        session.add(job)
        session.flush()
        with pytest.raises(RosterJobError, match="does not hold the key"):
            take_passwords(session, job, secrets.token_hex(32))
        password = derived_password(bytes.fromhex(key), "ada")
        assert take_passwords(session, job, key) == f"login,password\nada,{password}\n"
        with pytest.raises(RosterJobError, match="were already downloaded and are not kept"):
            take_passwords(session, job, key)
