"""Roster import on PostgreSQL: the instructor's page (through its background job, a real
worker) and `grader roster import` create student accounts idempotently (email as login, a
first password given once), report every bad line with its number, and refuse students and
forged forms."""
from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.app import create_app
from grader.cli.main import app as cli_app
from grader.course.membership import get_or_create_user
from grader.course.roster_csv import parse_roster
from grader.course.roster_entries import entry_of
from grader.db import session_scope
from grader.models import Enrollment, Role, User
from grader.passwords import set_password
from grader.service import get_assignment
from grader.settings import Settings, get_settings
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import WorkerProcess
from tests.service.test_web_settings import PASSWORD, Browser

CREATED_ROW = re.compile(r'<tr><td>([^<]+)</td></tr>')  # the page's table of new accounts' logins


def test_parse_reports_each_bad_line() -> None:
    text = ("email,name,section\n"
            "ada@uni.edu,Ada Lovelace,A\n"
            "\n"
            "not-an-email,Somebody\n"
            "bob@uni.edu\n"
            "ADA@uni.edu,Ada Again\n"
            "cy@uni.edu,,B\n"
            "dee@uni.edu,Dee,B,extra\n"
            '"eve@uni.edu","Eve, the second",\n')
    lines, errors = parse_roster(text)
    assert [(ln.line, ln.email, ln.name, ln.section) for ln in lines] == [
        (2, "ada@uni.edu", "Ada Lovelace", "A"), (9, "eve@uni.edu", "Eve, the second", None)]
    assert [str(e) for e in errors] == [
        "line 4: “not-an-email” is not an email address",
        "line 5: expected 2 or 3 columns (email,name[,section]), found 1",
        "line 6: ada@uni.edu is already on line 2",
        "line 7: the name is empty",
        "line 8: expected 2 or 3 columns (email,name[,section]), found 4",
    ]


@pytest.fixture(scope="module")
def tag() -> str:
    return uuid.uuid4().hex[:6]


@pytest.fixture(scope="module")
def prof(settings: Settings, sessions: sessionmaker[Session], tag: str) -> Browser:
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, f"rprof-{tag}", Role.instructor), PASSWORD, SUITE_ARGON2)
        set_password(get_or_create_user(session, f"rstu-{tag}", Role.student), PASSWORD, SUITE_ARGON2)
        get_or_create_user(session, f"staff-{tag}@uni.edu", Role.instructor)
    return Browser(settings, f"rprof-{tag}")


def _post(browser: Browser, csv_text: str | bytes, **extra: str) -> tuple[int, str]:
    response = browser.client.post(
        "/roster", data={"csrf_token": browser.page_csrf("/roster"), "confirm": "import", **extra},
        files={"file": ("roster.csv", csv_text.encode() if isinstance(csv_text, str) else csv_text, "text/csv")})
    return response.status_code, response.text


def _imported(browser: Browser, csv_text: str, **extra: str) -> tuple[str, dict[str, str]]:
    """Imports through the page's job: the page once the worker is done, and the first passwords
    downloaded (login -> password)."""
    code, _ = _post(browser, csv_text, **extra)
    assert code == 200
    deadline = time.monotonic() + 120
    while not (status := browser.client.get("/roster/job.json").json())["final"]:
        assert time.monotonic() < deadline, status
        time.sleep(0.2)
    assert status["state"] == "done", status
    html = browser.client.get("/roster").text
    if not CREATED_ROW.search(html):
        return html, {}
    download = browser.client.post(f"/roster/imports/{status['id']}/passwords.csv",
                                   data={"csrf_token": browser.csrf(html)})
    assert download.status_code == 200, download.text
    return html, dict(line.split(",") for line in download.text.splitlines()[1:])


def _students(sessions: sessionmaker[Session], tag: str) -> dict[str, tuple[str | None, str | None, Role]]:
    """login -> (name, section) in the course the page imports into (the default assignment's), role."""
    with session_scope(sessions) as session:
        course = get_assignment(session, "hw4").course_id
        return {u.username: (entry.full_name if entry else None, entry.section if entry else None, u.role)
                for u in session.scalars(select(User).where(User.username.like(f"%-{tag}@uni.edu")))
                for entry in [entry_of(session, u.id, course)]}


def test_page_imports_idempotently_with_line_errors(settings: Settings, sessions: sessionmaker[Session],
                                                    prof: Browser, tag: str, worker: WorkerProcess) -> None:
    roster = (f"email,name,section\nann-{tag}@uni.edu,Ann Lee,A\nBen-{tag}@Uni.edu,Ben Ode,B\n"
              f"broken line\nstaff-{tag}@uni.edu,Not A Student\n")
    html, created = _imported(prof, roster)
    assert "2 created, 0 updated, 0 unchanged, 2 line(s) with errors." in html
    assert "Line 4: expected 2 or 3 columns (email,name[,section]), found 1" in html
    assert f"Line 5: staff-{tag}@uni.edu is an existing instructor account; not changed" in html
    assert set(CREATED_ROW.findall(html)) == set(created) == {f"ann-{tag}@uni.edu", f"ben-{tag}@uni.edu"}
    assert _students(sessions, tag) == {
        f"ann-{tag}@uni.edu": ("Ann Lee", "A", Role.student), f"ben-{tag}@uni.edu": ("Ben Ode", "B", Role.student),
        f"staff-{tag}@uni.edu": (None, None, Role.instructor)}
    # The downloaded first password logs the student in (email as login).
    fresh = TestClient(create_app(settings))
    signed_in = fresh.post("/login", data={"csrf_token": Browser.csrf(fresh.get("/login").text),
                                           "username": f"ann-{tag}@uni.edu",
                                           "password": created[f"ann-{tag}@uni.edu"]}, follow_redirects=False)
    assert signed_in.status_code == 303
    # The same file again: nothing created, passwords kept; a changed section updates.
    html, created = _imported(prof, roster)
    assert "0 created, 0 updated, 2 unchanged" in html and not CREATED_ROW.search(html) and not created
    html, _ = _imported(prof, "", text=f"ann-{tag}@uni.edu,Ann Lee,C\n")
    assert "0 created, 1 updated, 0 unchanged, 0 line(s) with errors." in html
    assert _students(sessions, tag)[f"ann-{tag}@uni.edu"] == ("Ann Lee", "C", Role.student)
    # The exports carry the roster's name and section: Canvas's Student and Section, the JSON's name and section.
    assert f"Ann Lee,,,ann-{tag}@uni.edu,C," in prof.client.get("/gradebook.csv").text  # Student, ID, SIS ids, Section
    row = next(r for r in prof.client.get("/gradebook.json").json()["rows"] if r["user"] == f"ann-{tag}@uni.edu")
    assert (row["name"], row["section"]) == ("Ann Lee", "C")


def test_page_refuses_bad_files_students_and_forged_forms(settings: Settings, sessions: sessionmaker[Session],
                                                          prof: Browser, tag: str) -> None:
    before = _students(sessions, tag)
    code, html = _post(prof, b"\xff\xfe\x00b\x00a\x00d")
    assert code == 400 and "is not UTF-8 text" in html
    code, html = _post(prof, ("x" * 60 + "\n") * (settings.roster_max_bytes // 60 + 10))
    assert code == 400 and "is larger than" in html
    code, html = _post(prof, "")
    assert code == 400 and "Choose a CSV file or paste the roster" in html
    student = Browser(settings, f"rstu-{tag}")
    assert student.client.get("/roster").status_code == 403
    code, _ = _post(student, f"mallory-{tag}@uni.edu,Mallory\n")
    assert code == 403
    forged = prof.client.post("/roster", files={"file": ("r.csv", f"eve-{tag}@uni.edu,Eve\n".encode())})
    assert forged.status_code == 403
    assert _students(sessions, tag) == before


@pytest.fixture
def server_env(monkeypatch: pytest.MonkeyPatch, settings_env: dict[str, str]) -> Iterator[None]:
    for key, value in settings_env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_cli_roster_import(server_env: None, sessions: sessionmaker[Session], tmp_path: Path, tag: str) -> None:
    roster = tmp_path / "roster.csv"
    roster.write_text(f"cli1-{tag}@uni.edu,Cli One,L1\ncli2-{tag}@uni.edu,Cli Two\n")
    runner = CliRunner()
    first = runner.invoke(cli_app, ["roster", "import", str(roster)])
    assert first.exit_code == 0, first.output
    lines = first.stdout.splitlines()
    assert lines[0] == "login,password" and [ln.split(",")[0] for ln in lines[1:]] == [
        f"cli1-{tag}@uni.edu", f"cli2-{tag}@uni.edu"]
    assert "2 created, 0 updated, 0 unchanged, 0 line(s) with errors" in first.stderr
    roster.write_text(f"cli1-{tag}@uni.edu,Cli One,L2\nnope\n")
    out = tmp_path / "passwords.csv"
    second = runner.invoke(cli_app, ["roster", "import", str(roster), "--out", str(out)])
    assert second.exit_code == 1 and second.stdout == ""
    assert "line 2: expected 2 or 3 columns" in second.stderr and "0 created, 1 updated" in second.stderr
    assert out.read_text() == "login,password\n" and out.stat().st_mode & 0o777 == 0o600
    with session_scope(sessions) as session:
        count = session.scalar(select(func.count()).select_from(User).where(User.username.like(f"cli%-{tag}@uni.edu")))
        assert count == 2
        course = get_assignment(session, "hw4").course_id
        assert session.scalar(select(Enrollment.section).join(User, User.id == Enrollment.user_id).where(
            User.username == f"cli1-{tag}@uni.edu", Enrollment.course_id == course)) == "L2"
