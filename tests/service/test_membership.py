"""Per-assignment membership (grader.course.membership): a student of assignment A neither sees nor
submits to assignment B, an instructor of A neither reads, exports nor re-grades B, and a
roster import enrolls into the assignment chosen. Every refusal has its control: the same
request by someone enrolled in B succeeds."""
from __future__ import annotations

import io
import time
import uuid
import zipfile
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.cli.main import app as grader_cli
from grader.course.membership import get_or_create_user, roles_of
from grader.course.policies import admission
from grader.db import session_scope
from grader.models import Assignment, Course, CourseRole, Role, Run, RunState, User, utcnow
from grader.passwords import set_password
from grader.service import get_assignment, record_submission
from grader.settings import Settings, get_settings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import COURSE, WorkerProcess, auth
from tests.service.test_web_settings import PASSWORD, Browser


@dataclass
class World:
    a: str  # hw4
    b: str  # an assignment of its own
    logins: dict[str, str]
    tokens: dict[str, str]
    a_sub: int  # stu_a's submission of A
    b_sub: int  # stu_b's submission of B (scored)
    b_run: int
    stray_sub: int  # stu_a's submission of B, from before they left it


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("llmsys_hw4/README.md", "membership test\n")
    return buf.getvalue()


@pytest.fixture(scope="module")
def world(sessions: sessionmaker[Session]) -> World:
    tag = uuid.uuid4().hex[:6]
    logins = {key: f"mem-{key}-{tag}" for key in ("stu_a", "stu_b", "prof_a", "prof_b")}
    blob = StoredBlob(sha256="7" * 64, size=5)
    with session_scope(sessions) as session:
        a = get_assignment(session, "hw4")
        b = Assignment(slug=f"hwb-{tag}", title="Assignment B", course=Course(slug=f"hwb-{tag}", title="Assignment B"), total_points=100)
        session.add(b)
        session.flush()
        placed = {"stu_a": (Role.student, a), "stu_b": (Role.student, b),
                  "prof_a": (Role.instructor, a), "prof_b": (Role.instructor, b)}
        users: dict[str, User] = {}
        tokens = {}
        for key, (role, assignment) in placed.items():
            users[key] = get_or_create_user(session, logins[key], role, [assignment.course])
            set_password(users[key], PASSWORD, SUITE_ARGON2)
            tokens[key] = issue_token(session, users[key], "membership")
        a_sub, _ = record_submission(session, users["stu_a"], a, "a.zip", blob)
        b_sub, b_run = record_submission(session, users["stu_b"], b, "b.zip", blob)
        b_run.state, b_run.score, b_run.finished_at = RunState.scored, 64.0, utcnow()
        stray, stray_run = record_submission(session, users["stu_a"], b, "stray.zip", blob)
        stray_run.state, stray_run.finished_at = RunState.built, utcnow()
        session.flush()
        return World("hw4", b.slug, logins, tokens, a_sub.id, b_sub.id, b_run.id, stray.id)


def _run_count(sessions: sessionmaker[Session], sub_id: int) -> int:
    with session_scope(sessions) as session:
        return int(session.scalar(select(func.count(Run.id)).where(Run.submission_id == sub_id)) or 0)


def test_new_users_join_only_the_assignments_named(sessions: sessionmaker[Session], world: World) -> None:
    with session_scope(sessions) as session:
        ids = {row.slug: row.id for row in session.scalars(select(Assignment))}
        roles = {key: roles_of(session, session.scalar(select(User.id).where(User.username == login)) or 0)
                 for key, login in world.logins.items()}
    assert roles["stu_a"] == {ids[world.a]: CourseRole.student}
    assert roles["prof_b"] == {ids[world.b]: CourseRole.instructor}


def test_student_of_a_neither_sees_nor_submits_to_b_through_the_api(
        client: TestClient, settings: Settings, sessions: sessionmaker[Session], world: World) -> None:
    token = auth(world.tokens["stu_a"])
    assert client.get(f"/api/v1/submissions/{world.a_sub}", headers=token).status_code == 200  # control
    for path in (f"/api/v1/submissions/{world.stray_sub}", f"/api/v1/submissions/{world.stray_sub}/runs",
                 f"/api/v1/submissions?assignment={world.b}"):
        response = client.get(path, headers=token)
        assert response.status_code == 404, (path, response.text)
    listed = client.get("/api/v1/submissions?page_size=100", headers=token).json()
    assert [item["id"] for item in listed["items"]] == [world.a_sub]
    refused = client.post("/api/v1/submissions", headers=token, data={"assignment": world.b},
                          files={"file": ("b.zip", _zip())})
    assert refused.status_code == 404 and refused.json()["error"] == {
        "code": "not_found", "message": f"no assignment {world.b!r}"}
    with session_scope(sessions) as session:  # control: B's own student would be let in (not sent: no rubric)
        stu_b = session.scalar(select(User).where(User.username == world.logins["stu_b"]))
        assert stu_b is not None
        assert admission(session, settings, stu_b, get_assignment(session, world.b), utcnow()) is None


def test_student_of_a_neither_sees_nor_submits_to_b_on_the_web(settings: Settings, sessions: sessionmaker[Session],
                                                               world: World) -> None:
    student = Browser(settings, world.logins["stu_a"])
    home = student.client.get("/").text
    assert '<option value="hw4">' in home and world.b not in home
    with session_scope(sessions) as session:
        stray_run = session.scalar(select(Run.id).where(Run.submission_id == world.stray_sub))
    assert student.client.get(f"/runs/{stray_run}").status_code == 404
    assert student.client.get(f"/runs/{stray_run}/status").status_code == 404
    assert "stray.zip" not in student.client.get("/submissions").text
    response = student.client.post("/submit", data={"csrf_token": student.page_csrf(), "assignment": world.b},
                                   files={"file": ("b.zip", _zip())}, follow_redirects=False)
    assert response.status_code == 404 and f"no assignment &#39;{world.b}&#39;" in response.text


def test_instructor_of_a_cannot_read_export_or_regrade_b_through_the_api(
        client: TestClient, sessions: sessionmaker[Session], world: World) -> None:
    prof_a, prof_b = auth(world.tokens["prof_a"]), auth(world.tokens["prof_b"])
    reads = [f"/api/v1/assignments/{world.b}/gradebook", f"/api/v1/assignments/{world.b}/gradebook.csv",
             f"/api/v1/assignments/{world.b}/gradebook-detailed.csv",
             f"/api/v1/submissions/{world.b_sub}", f"/api/v1/submissions/{world.b_sub}/runs",
             f"/api/v1/runs/{world.b_run}", f"/api/v1/submissions?assignment={world.b}"]
    for path in reads:
        assert client.get(path, headers=prof_a).status_code == 404, path
        assert client.get(path, headers=prof_b).status_code == 200, path  # control
    assert client.get(f"/api/v1/assignments/{world.a}/gradebook", headers=prof_a).status_code == 200
    mine = client.get("/api/v1/submissions?page_size=100", headers=prof_a).json()["items"]
    assert all(item["assignment"] == world.a for item in mine) and world.a_sub in [i["id"] for i in mine]
    before = _run_count(sessions, world.b_sub)
    assert client.post(f"/api/v1/submissions/{world.b_sub}/regrade", headers=prof_a).status_code == 404
    assert client.post(f"/api/v1/assignments/{world.b}/regrade", headers=prof_a,
                       json={"submissions": "all"}).status_code == 404
    assert _run_count(sessions, world.b_sub) == before
    book = client.get(f"/api/v1/assignments/{world.b}/gradebook", headers=prof_b).json()
    assert {row["user"]: row["total"] for row in book["rows"]}[world.logins["stu_b"]] == 64.0


def test_instructor_of_a_cannot_read_export_or_regrade_b_on_the_web(
        settings: Settings, sessions: sessionmaker[Session], world: World) -> None:
    prof_a, prof_b = Browser(settings, world.logins["prof_a"]), Browser(settings, world.logins["prof_b"])
    reads = [f"/gradebook?assignment={world.b}", f"/gradebook.csv?assignment={world.b}",
             f"/gradebook-detailed.csv?assignment={world.b}",
             f"/gradebook.json?assignment={world.b}", f"/runs/{world.b_run}", f"/runs/{world.b_run}/status"]
    for path in reads:
        assert prof_a.client.get(path).status_code == 404, path
        assert prof_b.client.get(path).status_code == 200, path  # control
    assert world.logins["stu_b"] not in prof_a.client.get("/gradebook").text  # A's own gradebook
    before = _run_count(sessions, world.b_sub)
    csrf = prof_a.page_csrf("/gradebook")
    assert prof_a.client.post(f"/submissions/{world.b_sub}/regrade", data={"csrf_token": csrf},
                              follow_redirects=False).status_code == 404
    assert prof_a.client.post("/gradebook/regrade", data={"csrf_token": csrf, "assignment": world.b,
                                                          "which": "all"}, follow_redirects=False).status_code == 404
    assert _run_count(sessions, world.b_sub) == before
    regraded = prof_b.client.post(f"/submissions/{world.b_sub}/regrade",
                                  data={"csrf_token": prof_b.page_csrf("/gradebook")}, follow_redirects=False)
    assert regraded.status_code == 303 and _run_count(sessions, world.b_sub) == before + 1


def test_roster_import_enrolls_into_the_chosen_course(
        settings: Settings, sessions: sessionmaker[Session], world: World, worker: WorkerProcess) -> None:
    newcomer = f"mem-new-{uuid.uuid4().hex[:6]}@uni.edu"
    roster = f"email,name,section\n{newcomer},New Person,B1\n"
    prof_a, prof_b = Browser(settings, world.logins["prof_a"]), Browser(settings, world.logins["prof_b"])
    refused = prof_a.client.post("/roster", data={"csrf_token": prof_a.page_csrf("/roster"), "course": world.b,
                                                  "text": roster})
    assert refused.status_code == 404
    with session_scope(sessions) as session:
        assert session.scalar(select(User).where(User.username == newcomer)) is None
    page = prof_b.client.get("/roster").text
    assert f'<option value="{world.b}" selected>' in page and f'<option value="{COURSE}"' not in page
    started = prof_b.client.post("/roster", data={"csrf_token": prof_b.csrf(page), "course": world.b,
                                                  "text": roster, "confirm": "import"}, follow_redirects=False)
    assert started.status_code == 303 and started.headers["location"] == "/roster", started.text
    deadline = time.monotonic() + 120  # the worker imports it in the background
    while not (status := prof_b.client.get("/roster/job.json").json())["final"]:
        assert time.monotonic() < deadline, f"the import is not final after 120 s: {status}\n{worker.log()}"
        time.sleep(0.2)
    assert status["state"] == "done" and status["lines_done"] == status["lines_total"] == 1, status
    assert f"<td>{newcomer}</td>" in prof_b.client.get("/roster").text  # among the accounts it created
    with session_scope(sessions) as session:
        user = session.scalar(select(User).where(User.username == newcomer))
        assert user is not None and user.role is Role.student
        b_id = session.scalar(select(Assignment.id).where(Assignment.slug == world.b))
        assert roles_of(session, user.id) == {b_id: CourseRole.student}
    book = prof_b.client.get(f"/gradebook.json?assignment={world.b}").json()
    assert newcomer in [row["user"] for row in book["rows"]]


def test_enrollment_and_reset_link_from_the_command_line(settings: Settings, settings_env: dict[str, str],
                                                         sessions: sessionmaker[Session], world: World,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A student account made a TA of hw4's course reads hw4's gradebook until unenrolled;
    `grader user reset-link` prints a link that opens the reset form."""
    ta = f"mem-ta-{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, ta, Role.student, [get_assignment(session, world.b).course]),
                     PASSWORD, SUITE_ARGON2)
    for key, value in settings_env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    try:
        cli = CliRunner()
        made_staff = cli.invoke(grader_cli, ["user", "enroll", ta, COURSE, "--as", "ta"])
        assert made_staff.exit_code == 0 and f"{ta} is TA of {COURSE}" in made_staff.output, made_staff.output
        assert Browser(settings, ta).client.get("/gradebook?assignment=hw4").status_code == 200
        left = cli.invoke(grader_cli, ["user", "unenroll", ta, COURSE])
        assert left.exit_code == 0 and f"{ta} left {COURSE}" in left.output, left.output
        assert Browser(settings, ta).client.get("/gradebook?assignment=hw4").status_code == 404
        with session_scope(sessions) as session:
            ids = {row.slug: row.id for row in session.scalars(select(Assignment))}
            assert roles_of(session, session.scalar(select(User.id).where(User.username == ta)) or 0) == {
                ids[world.b]: CourseRole.student}
        link = cli.invoke(grader_cli, ["user", "reset-link", ta, "--base-url", "http://testserver"])
        assert link.exit_code == 0, link.output
        url = link.output.strip()
        assert url.startswith("http://testserver/reset/")
        form = TestClient(create_app(settings)).get(url.removeprefix("http://testserver"))
        assert form.status_code == 200 and 'name="new"' in form.text
        unknown = cli.invoke(grader_cli, ["user", "enroll", "no-such-user", COURSE])
        assert unknown.exit_code == 2 and "no user" in unknown.output
    finally:
        get_settings.cache_clear()


def test_courses_from_the_command_line(settings_env: dict[str, str], sessions: sessionmaker[Session],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`grader course create` makes a course with its assignments and instructor, `course add`
    gives it another one no course holds, `course list` shows them with their people; an
    assignment already in a course, an unknown course or a bad name is refused with exit 2."""
    tag = uuid.uuid4().hex[:6]
    first, second, course, prof = f"cli-a-{tag}", f"cli-b-{tag}", f"cli-{tag}", f"cli-prof-{tag}"
    with session_scope(sessions) as session:
        session.add_all([Assignment(slug=first, title="A", total_points=10),
                         Assignment(slug=second, title="B", total_points=10)])
        get_or_create_user(session, prof, Role.instructor, [])
    for key, value in settings_env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    try:
        cli = CliRunner()
        made = cli.invoke(grader_cli, ["course", "create", course, "--title", "CLI course", "--assignment", first,
                                       "--instructor", prof])
        assert made.exit_code == 0 and f"course {course}: {first}" in made.output, made.output
        added = cli.invoke(grader_cli, ["course", "add", course, second])
        assert added.exit_code == 0 and f"course {course}: {first}, {second}" in added.output, added.output
        listed = cli.invoke(grader_cli, ["course", "list"])
        assert f"{course} (CLI course): {first}, {second}; 1 instructor, 0 TAs, 0 students" in listed.output
        taken = cli.invoke(grader_cli, ["course", "create", f"other-{tag}", "--title", "x", "--assignment", first])
        assert taken.exit_code == 2 and "already an assignment of another course" in taken.output
        assert cli.invoke(grader_cli, ["course", "add", f"nope-{tag}", second]).exit_code == 2
        bad = cli.invoke(grader_cli, ["course", "create", "Not Good", "--title", "x"])
        assert bad.exit_code == 2 and "is not a course name" in bad.output
        made_ta = cli.invoke(grader_cli, ["user", "add", f"cli-ta-{tag}", "--course", course])
        assert made_ta.exit_code == 0 and f"enrolled in {course} (student)" in made_ta.output, made_ta.output
        assert cli.invoke(grader_cli, ["user", "enroll", f"cli-ta-{tag}", course, "--as", "ta"]).exit_code == 0
        with session_scope(sessions) as session:
            ta = session.scalar(select(User).where(User.username == f"cli-ta-{tag}"))
            assert ta is not None and roles_of(session, ta.id) == {
                row.id: CourseRole.ta for row in session.scalars(select(Assignment).where(
                    Assignment.slug.in_([first, second])))}
    finally:
        get_settings.cache_clear()
