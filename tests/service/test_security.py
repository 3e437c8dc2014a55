"""Web-side security on PostgreSQL: authorization of every route (enumerated from the app, so a
new route fails `test_every_route_is_classified` until it is given a check here), anonymous
access, CSRF on every session form, session fixation, secure headers, the per-student upload
rate limit, and tokens stored hashed and never logged.

Student A (`a`) attacks student B (`b`): B has a scored run, an API token and a web login.
"""
from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker
from starlette.routing import Mount

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.course.roster_jobs import KEY_COOKIE, KEY_PATH, digest_of
from grader.db import session_scope
from grader.models import (
    FINAL_STATES,
    ApiToken,
    Assignment,
    CountedRun,
    Course,
    Enrollment,
    ErrorClass,
    Extension,
    GradeAdjustment,
    PasswordReset,
    ProblemResult,
    RegradeRequest,
    Role,
    RosterJob,
    Run,
    RunComment,
    RunState,
    Submission,
    UploadHit,
    User,
    utcnow,
)
from grader.passwords import set_password
from grader.ratelimit import SharedWindow
from grader.security import CONTENT_SECURITY_POLICY
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from tests.fixtures.passwords import SUITE_ARGON2
from tests.fixtures.zips import small_zip
from tests.service.conftest import COURSE, auth

PASSWORD = "correct horse battery staple"
CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')


def app_routes(routes: list, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(method, path) of every route the app serves, included routers and mounts too."""
    for route in routes:
        inner = getattr(route, "original_router", None)  # FastAPI's included routers
        if inner is not None:
            yield from app_routes(inner.routes, prefix + route.include_context.prefix)
        elif isinstance(route, Mount):
            yield "MOUNT", prefix + route.path
        else:
            for method in sorted(set(route.methods or ()) - {"HEAD"}):
                yield method, prefix + route.path


def login(settings: Settings, username: str, client: TestClient | None = None) -> TestClient:
    """`client` (default: a new one on a new app) logged in as `username` through the form."""
    client = client or TestClient(create_app(settings))
    token = csrf_of(client.get("/login").text)
    response = client.post("/login", data={"csrf_token": token, "username": username, "password": PASSWORD},
                           follow_redirects=False)
    assert response.status_code == 303, response.text
    return client


def csrf_of(html: str) -> str:
    found = CSRF_INPUT.search(html)
    assert found, "no CSRF field on the page"
    return found.group(1)


@dataclass
class World:
    settings: Settings
    sessions: sessionmaker[Session]
    a_name: str
    b_name: str
    a_token: str
    b_token: str
    b_token_id: int
    b_submission: int
    b_run: int
    b_marker: str  # in B's file name, run message and token name: must never reach A
    staff_name: str
    staff_token: str
    api: TestClient  # no credentials of its own: pass headers
    a_web: TestClient  # logged in as A
    b_web: TestClient  # logged in as B (the positive controls)
    staff_web: TestClient  # logged in as an instructor

    def count(self, model: type, *where: object) -> int:
        with session_scope(self.sessions) as session:
            return session.scalar(select(func.count()).select_from(model).where(*where)) or 0

    def b_runs(self) -> int:
        return self.count(Run, Run.submission_id == self.b_submission)

    def owner_of_newest_submission(self) -> str:
        with session_scope(self.sessions) as session:
            sub = session.scalars(select(Submission).order_by(Submission.id.desc()).limit(1)).one()
            return sub.user.username

    def a_csrf(self, page: str = "/") -> str:
        return csrf_of(self.a_web.get(page).text)


@pytest.fixture(scope="module")
def world(settings: Settings, sessions: sessionmaker[Session]) -> Iterator[World]:
    tag = uuid.uuid4().hex[:8]
    marker = f"b-private-{tag}"
    a_name, b_name, staff_name = f"sec-a-{tag}", f"sec-b-{tag}", f"sec-prof-{tag}"
    with session_scope(sessions) as session:
        a = get_or_create_user(session, a_name, Role.student)
        b = get_or_create_user(session, b_name, Role.student)
        staff = get_or_create_user(session, staff_name, Role.instructor)
        for user in (a, b, staff):
            set_password(user, PASSWORD, SUITE_ARGON2)
        a_token = issue_token(session, a, "a-token")
        staff_token = issue_token(session, staff, "staff-token")
        b_token = issue_token(session, b, f"token-{marker}")
        blob = BlobStore(settings.blob_dir).put_bytes(small_zip(marker.encode()))
        sub, run = record_submission(session, b, get_assignment(session, "hw4"), f"{marker}.zip", blob)
        run.state, run.score, run.message, run.finished_at = RunState.scored, 77.0, f"graded {marker}", utcnow()
        run.results.append(ProblemResult(problem_id="1.1", title="Softmax forward", status="passed",
                                         points=20.0, max_points=20.0, message=marker))
        session.flush()
        b_token_id = session.scalar(select(ApiToken.id).where(ApiToken.name == f"token-{marker}"))
        ids = (sub.id, run.id)
    with TestClient(create_app(settings)) as api:
        yield World(settings, sessions, a_name, b_name, a_token, b_token, b_token_id or 0, ids[0], ids[1], marker,
                    staff_name, staff_token, api, login(settings, a_name), login(settings, b_name),
                    login(settings, staff_name))


# ---- per-route checks: what student A gets when aiming at B ------------------------------------

Check = Callable[[World], None]


def refused(response, *codes: int, w: World) -> None:  # type: ignore[no-untyped-def]
    assert response.status_code in codes, (response.status_code, response.text[:300])
    assert w.b_marker not in response.text and w.b_name not in response.text


def _public(path: str) -> Check:
    def check(w: World) -> None:
        response = w.api.get(path, headers=auth(w.a_token))
        assert response.status_code == 200
        assert w.b_marker not in response.text
    return check


def _api_get_denied(path: str, code: int, owner: str = "b") -> Check:
    """A is refused what `owner` (B, or staff) gets: the positive control proves the path is real."""
    def check(w: World) -> None:
        url = path.format(w=w)
        allowed = w.api.get(url, headers=auth(w.b_token if owner == "b" else w.staff_token))
        assert allowed.status_code == 200, (url, allowed.text[:200])
        refused(w.api.get(url, headers=auth(w.a_token)), code, w=w)
    return check


def _web_get_denied(path: str, code: int, owner: str = "b") -> Check:
    def check(w: World) -> None:
        url = path.format(w=w)
        allowed = (w.b_web if owner == "b" else w.staff_web).get(url, follow_redirects=False)
        assert allowed.status_code == 200, (url, allowed.text[:200])
        refused(w.a_web.get(url, follow_redirects=False), code, w=w)
    return check


def _no_new_run(request: Callable[[World], object], *codes: int) -> Check:
    def check(w: World) -> None:
        before = w.b_runs()
        refused(request(w), *codes, w=w)
        assert w.b_runs() == before, "a refused re-grade created a run"
    return check


def _api_listing(w: World) -> None:
    mine = w.api.get("/api/v1/submissions", headers=auth(w.a_token))
    assert mine.status_code == 200 and w.b_submission not in [i["id"] for i in mine.json()["items"]]
    refused(w.api.get(f"/api/v1/submissions?user={w.b_name}", headers=auth(w.a_token)), 403, w=w)


def _api_upload(w: World) -> None:
    response = w.api.post("/api/v1/submissions", headers=auth(w.a_token), data={"user": w.b_name},
                          files={"file": ("mine.zip", small_zip(b"api"))})
    assert response.status_code == 201 and w.owner_of_newest_submission() == w.a_name


def _web_submit(w: World) -> None:
    response = w.a_web.post("/submit", data={"csrf_token": w.a_csrf(), "user": w.b_name},
                            files={"file": ("mine.zip", small_zip(b"web"))}, follow_redirects=False)
    assert response.status_code == 303 and w.owner_of_newest_submission() == w.a_name


def _token_form_upload(w: World) -> None:
    response = w.api.post("/upload", data={"token": w.a_token, "user": w.b_name},
                          files={"file": ("mine.zip", small_zip(b"form"))})
    assert response.status_code == 201 and w.owner_of_newest_submission() == w.a_name


def _web_history(w: World) -> None:
    page = w.a_web.get("/submissions")
    assert page.status_code == 200 and w.b_marker not in page.text


def _login_as_b(w: World) -> None:
    client = TestClient(create_app(w.settings))
    token = csrf_of(client.get("/login").text)
    response = client.post("/login", data={"csrf_token": token, "username": w.b_name, "password": "wrong-password"})
    assert response.status_code == 401 and w.b_marker not in response.text
    assert client.get("/submissions", follow_redirects=False).status_code == 303


def _logout(w: World) -> None:
    client = login(w.settings, w.a_name)
    response = client.post("/logout", data={"csrf_token": csrf_of(client.get("/").text)}, follow_redirects=False)
    assert response.status_code == 303
    assert client.get("/submissions", follow_redirects=False).status_code == 303


def _token_page(w: World) -> None:
    page = w.a_web.get("/settings/tokens")
    assert page.status_code == 200 and w.b_marker not in page.text


def _token_create(w: World) -> None:
    name = f"a-made-{uuid.uuid4().hex[:6]}"
    w.a_web.post("/settings/tokens", data={"csrf_token": w.a_csrf("/settings/tokens"), "name": name,
                                           "scope": ["read:all", "regrade"], "user": w.b_name})
    with session_scope(w.sessions) as session:
        token = session.scalars(select(ApiToken).where(ApiToken.name == name)).one()
        assert token.user.username == w.a_name and token.scope_set == {"submit", "read"}


def _token_revoke(w: World) -> None:
    refused(w.a_web.post(f"/settings/tokens/{w.b_token_id}/revoke",
                         data={"csrf_token": w.a_csrf("/settings/tokens")}, follow_redirects=False), 404, w=w)
    assert w.api.get("/api/v1/submissions", headers=auth(w.b_token)).status_code == 200, "B's token was revoked"


def _password_page(w: World) -> None:
    page = w.a_web.get("/settings/password")
    assert page.status_code == 200 and w.b_marker not in page.text and w.b_name not in page.text


def _password_change(w: World) -> None:
    """The form acts on the session's user only; a wrong current password changes nothing."""
    new = "another long passphrase"
    response = w.a_web.post("/settings/password", data={"csrf_token": w.a_csrf("/settings/password"), "user": w.b_name,
                                                         "current": "not the password", "new": new, "again": new},
                            follow_redirects=False)
    refused(response, 400, w=w)
    login(w.settings, w.b_name)  # B's password is unchanged
    login(w.settings, w.a_name)  # and A's


def _b_account(w: World) -> tuple[str | None, bool, int]:
    """B's e-mail, staff mail and reset links: what an attack on B's account would change."""
    with session_scope(w.sessions) as session:
        b = session.scalars(select(User).where(User.username == w.b_name)).one()
        links = session.scalar(select(func.count(PasswordReset.id)).where(PasswordReset.user_id == b.id)) or 0
        return b.email, b.staff_mail, links


def _account_page(w: World) -> None:
    page = w.a_web.get("/settings/account")
    assert page.status_code == 200 and w.a_name in page.text and w.b_name not in page.text


def _own_email(w: World) -> None:
    """The form changes the session's own account only, and only with its current password."""
    before = _b_account(w)
    refused(w.a_web.post("/settings/account/email", data={
        "csrf_token": w.a_csrf("/settings/account"), "user": w.b_name, "username": w.b_name,
        "current": "not the password", "email": "a@attacker.example"}, follow_redirects=False), 400, w=w)
    assert _b_account(w) == before


def _own_staff_mail(w: World) -> None:
    before = _b_account(w)
    answer = w.a_web.post("/settings/account/staff-mail", data={
        "csrf_token": w.a_csrf("/settings/account"), "user": w.b_name, "staff_mail": ""}, follow_redirects=False)
    assert answer.status_code == 303 and _b_account(w) == before


def _admin_page_denied(path: str, data: dict[str, str] | None = None) -> Check:
    """A, no site administrator, is refused B's account page and its forms: 403, nothing changed."""
    def check(w: World) -> None:
        before, url = _b_account(w), path.format(w=w)
        answer = (w.a_web.get(url, follow_redirects=False) if data is None else
                  w.a_web.post(url, data={"csrf_token": w.a_csrf(), **data}, follow_redirects=False))
        refused(answer, 403, w=w)
        assert "Only a site administrator" in answer.text and _b_account(w) == before
    return check


def _member_account_denied(path: str, data: dict[str, str]) -> Check:
    """A student's post to a members-page form about B's account: 403, and B's account unchanged."""
    denied = _ops_post_denied(path, data)

    def check(w: World) -> None:
        before = _b_account(w)
        denied(w)
        assert _b_account(w) == before
    return check


def _roster_page(w: World) -> None:
    assert w.staff_web.get("/roster").status_code == 200
    refused(w.a_web.get("/roster", follow_redirects=False), 403, w=w)


def _roster_import(w: World) -> None:
    login_name = f"planted-{uuid.uuid4().hex[:6]}@example.edu"
    refused(w.a_web.post("/roster", data={"csrf_token": w.a_csrf(), "text": f"{login_name},Planted"},
                         follow_redirects=False), 403, w=w)
    assert w.count(User, User.username == login_name) == 0


def _staff_import_passwords(w: World) -> None:
    """A student cannot take the first passwords of a staff user's finished import (one that
    created B's account); the staff browser holding the job's key can, once A was refused."""
    key = uuid.uuid4().hex * 2
    with session_scope(w.sessions) as session:
        staff = session.scalars(select(User).where(User.username == w.staff_name)).one()
        job = RosterJob(course_id=get_assignment(session, "hw4").course_id, requested_by=staff.id, state="done",
                        lines_done=1, lines_total=1, result={"created": [w.b_name], "updated": [], "unchanged": [],
                                                             "errors": []}, key_digest=digest_of(key))
        session.add(job)
        session.flush()
        path = f"/roster/imports/{job.id}/passwords.csv"
    refused(w.a_web.post(path, data={"csrf_token": w.a_csrf()}, follow_redirects=False), 404, w=w)
    assert w.count(RosterJob, RosterJob.id == job.id, RosterJob.passwords_taken_at.is_not(None)) == 0
    staff_browser = login(w.settings, w.staff_name)
    staff_browser.cookies.set(KEY_COOKIE.format(job.id), key, path=KEY_PATH)
    taken = staff_browser.post(path, data={"csrf_token": csrf_of(staff_browser.get("/roster").text)})
    assert taken.status_code == 200 and w.b_name in taken.text, (taken.status_code, taken.text[:200])


def _reset_link_for_b(w: World) -> None:
    """A student issues no reset link, least of all for another student."""
    refused(w.a_web.post("/roster/reset-link", data={"csrf_token": w.a_csrf(), "username": w.b_name},
                         follow_redirects=False), 403, w=w)
    assert w.count(PasswordReset, PasswordReset.user_id.in_(select(User.id).where(User.username == w.b_name))) == 0


def _forgot_for_b(w: World) -> None:
    """A asking /forgot for B's login learns nothing of B and gets no link (this app sends no
    mail; with mail, the link goes to B's address alone: test_forgot_password.py)."""
    before = w.count(PasswordReset)
    answer = w.a_web.post("/forgot", data={"csrf_token": w.a_csrf(), "username": w.b_name})
    assert answer.status_code == 200 and w.b_marker not in answer.text
    assert w.count(PasswordReset) == before


def _reset_guessed(w: World) -> None:
    """A made-up reset token names no one: nothing to read, and B's password stays."""
    refused(w.a_web.get("/reset/guessed-token", follow_redirects=False), 404, w=w)
    refused(w.a_web.post("/reset/guessed-token", data={"csrf_token": w.a_csrf(), "new": "taken over password",
                                                       "again": "taken over password"}), 404, w=w)
    login(w.settings, w.b_name)


def _course_list(w: World) -> None:
    """The course list shows a student no course to run."""
    page = w.a_web.get("/courses")
    assert page.status_code == 200 and f"/courses/{COURSE}" not in page.text and w.b_marker not in page.text
    assert f'href="/courses/{COURSE}"' in w.staff_web.get("/courses").text


def _course_create(w: World) -> None:
    """A student account makes no course (403, nothing made)."""
    before = w.count(Course)
    refused(w.a_web.post("/courses", data={"csrf_token": w.a_csrf(), "slug": "a-course", "title": "Mine"},
                         follow_redirects=False), 403, w=w)
    assert w.count(Course) == before


def _hw4_row(w: World) -> tuple:
    with session_scope(w.sessions) as session:
        row = session.scalars(select(Assignment).where(Assignment.slug == "hw4")).one()
        return (row.due_at, row.late_window_s, row.score_policy, row.grading_paused, row.course_id,
                row.storage_quota_bytes, row.quota_runs, row.course.quota_runs if row.course else None,
                row.course.ta_powers if row.course else None, row.similarity_base, row.similarity_sources)


def _enrollments(w: World) -> list[tuple]:
    with session_scope(w.sessions) as session:
        return sorted(session.execute(select(Enrollment.user_id, Enrollment.course_id, Enrollment.role)).all())


def _ops_post_denied(path: str, data: dict[str, str]) -> Check:
    """A student's post to a staff form of hw4 (or its course) is 403 and changes nothing of the
    assignment (schedule, policy, pause, course) nor anyone's extension or enrollment."""
    def check(w: World) -> None:
        before, extensions, enrollments = _hw4_row(w), w.count(Extension), _enrollments(w)
        filled = {key: value.format(w=w) for key, value in data.items()}
        refused(w.a_web.post(path.format(w=w), data={"csrf_token": w.a_csrf(), **filled}, follow_redirects=False),
                403, w=w)
        assert _hw4_row(w) == before and w.count(Extension) == extensions and _enrollments(w) == enrollments
    return check


def _api_put_denied(path: str, body: dict[str, object]) -> Check:
    """A student's token is refused a staff setting of hw4's course through the API (403) and
    changes nothing; the course's instructor reaches the use case's own check (400)."""
    def check(w: World) -> None:
        before = _hw4_row(w)
        refused(w.api.put(path, headers=auth(w.a_token), json=body), 403, w=w)
        assert _hw4_row(w) == before
        assert w.api.put(path, headers=auth(w.staff_token), json={key: "x" for key in body}).status_code in (400, 422)
    return check


def _pin_denied(path: str, data: dict[str, str]) -> Check:
    """A student's post to the staff's choice of b's counted run in hw4 is 403 and pins or
    unpins nothing."""
    def check(w: World) -> None:
        before = w.count(CountedRun)
        filled = {key: value.format(w=w) for key, value in data.items()}
        refused(w.a_web.post(path.format(w=w), data={"csrf_token": w.a_csrf(), **filled}, follow_redirects=False),
                403, w=w)
        assert w.count(CountedRun) == before
    return check


def _choose_b_run(w: World) -> None:
    """A student cannot count B's run as their own choice (404, nothing chosen); going back to the
    policy's pick touches only their own choice, and only in an assignment of theirs."""
    before = w.count(CountedRun)
    refused(w.a_web.post("/submissions/counted", data={"csrf_token": w.a_csrf(), "run_id": str(w.b_run)},
                         follow_redirects=False), 404, w=w)
    refused(w.a_web.post("/submissions/counted/remove", data={"csrf_token": w.a_csrf(), "assignment": "no-such"},
                         follow_redirects=False), 404, w=w)
    own = w.a_web.post("/submissions/counted/remove", data={"csrf_token": w.a_csrf(), "assignment": "hw4"},
                       follow_redirects=False)
    assert own.status_code == 303 and own.headers["location"].startswith("/submissions")
    assert w.count(CountedRun) == before


def _ops_report_download(w: World) -> None:
    refused(w.a_web.get("/assignments/hw4/similarity.json", follow_redirects=False), 403, w=w)


def _ops_pair(w: World) -> None:
    refused(w.a_web.get(f"/assignments/hw4/similarity/pair?a={w.a_name}&b={w.b_name}", follow_redirects=False),
            403, w=w)


PUBLIC: dict[tuple[str, str], Check] = {  # no one's data behind them
    ("GET", "/openapi.json"): _public("/openapi.json"),
    ("GET", "/docs"): _public("/docs"),
    ("GET", "/docs/oauth2-redirect"): _public("/docs/oauth2-redirect"),
    ("GET", "/redoc"): _public("/redoc"),
    ("MOUNT", "/static"): _public("/static/app.css"),
    ("MOUNT", "/static/docs"): _public("/static/docs/swagger-ui.css"),
    ("GET", "/api/v1/health"): _public("/api/v1/health"),
    ("GET", "/login"): _public("/login"),
    ("GET", "/forgot"): _public("/forgot"),
    ("GET", "/"): _public("/"),
}
def _b_user_id(w: World) -> int:
    with session_scope(w.sessions) as session:
        return session.scalars(select(User.id).where(User.username == w.b_name)).one()


def _regrade_request_of_b(w: World) -> None:
    """A cannot ask for a regrade of B's run (404, nothing stored); B's own request reaches the
    use case (an empty reason: 400)."""
    path, before = f"/runs/{w.b_run}/regrade-request", w.count(RegradeRequest)
    refused(w.a_web.post(path, data={"csrf_token": w.a_csrf(), "reason": "mine"}, follow_redirects=False), 404, w=w)
    assert w.count(RegradeRequest) == before
    allowed = w.b_web.post(path, data={"csrf_token": csrf_of(w.b_web.get("/").text), "reason": ""})
    assert allowed.status_code == 400 and w.count(RegradeRequest) == before


def _adjust_b(w: World) -> None:
    """A student cannot adjust B's grade (404, nothing stored); staff reach the use case (400)."""
    path, before = f"/runs/{w.b_run}/adjustments", w.count(GradeAdjustment)
    refused(w.a_web.post(path, data={"csrf_token": w.a_csrf(), "points": "50", "reason": "x"},
                         follow_redirects=False), 404, w=w)
    staff = w.staff_web.post(path, data={"csrf_token": csrf_of(w.staff_web.get("/").text), "points": "many",
                                         "reason": "x"})
    assert staff.status_code == 400 and w.count(GradeAdjustment) == before


def _comment_on_b(w: World) -> None:
    """A cannot comment on B's run (404, nothing stored); B's own comment reaches the use case (400: empty)."""
    path, before = f"/runs/{w.b_run}/comments", w.count(RunComment)
    refused(w.a_web.post(path, data={"csrf_token": w.a_csrf(), "body": "hello"}, follow_redirects=False), 404, w=w)
    allowed = w.b_web.post(path, data={"csrf_token": csrf_of(w.b_web.get("/").text), "body": ""})
    assert allowed.status_code == 400 and w.count(RunComment) == before


def _b_open_request(w: World) -> int:
    """The id of B's open regrade request of B's run (made here when there is none)."""
    with session_scope(w.sessions) as session:
        asked = session.scalars(select(RegradeRequest).where(RegradeRequest.run_id == w.b_run,
                                                             RegradeRequest.state == "open")).first()
        if asked is None:
            asked = RegradeRequest(run_id=w.b_run, student_id=_b_user_id(w), reason="please")
            session.add(asked)
            session.flush()
        return asked.id


def _decide_b_request(w: World) -> None:
    """A student cannot answer B's open regrade request (403; it stays open); staff reach the use case."""
    path = f"/assignments/hw4/regrade-requests/{_b_open_request(w)}"
    for action in ("reject", "regrade"):
        refused(w.a_web.post(path, data={"csrf_token": w.a_csrf(), "action": action, "reply": "no"},
                             follow_redirects=False), 403, w=w)
    staff = w.staff_web.post(path, data={"csrf_token": csrf_of(w.staff_web.get("/").text), "action": "reject"})
    assert staff.status_code == 400  # a rejection needs a reply: the staff's form reached the use case
    assert w.count(RegradeRequest, RegradeRequest.run_id == w.b_run, RegradeRequest.state == "open") == 1


def _grade_import_of_b(web: bool) -> Check:
    """A student imports no grades, on the page or through the API (403, nothing stored); staff's
    file with a refused line reaches the import and applies nothing (400 on the page, 409 by API)."""
    text = "login,kind,points,reason\n{b},manual,100,mine\nnobody-at-all,manual,1,x\n"

    def check(w: World) -> None:
        before, csv_text = w.count(GradeAdjustment), text.format(b=w.b_name)
        if web:
            refused(w.a_web.post("/gradebook/import", data={"csrf_token": w.a_csrf(), "assignment": "hw4",
                                                            "text": csv_text}, follow_redirects=False), 403, w=w)
            staff = w.staff_web.post("/gradebook/import", data={"csrf_token": csrf_of(w.staff_web.get("/").text),
                                                                "assignment": "hw4", "text": csv_text})
            assert staff.status_code == 400 and "Line 3:" in staff.text
        else:
            url = "/api/v1/assignments/hw4/grade-entries"
            refused(w.api.post(url, headers=auth(w.a_token), json={"csv": csv_text}), 403, w=w)
            assert w.api.post(url, headers=auth(w.staff_token), json={"csv": csv_text}).status_code == 409
        assert w.count(GradeAdjustment) == before
    return check


def _api_post_of_b(path: str, model: type, field: str) -> Check:
    """A's token cannot write `field` on B's run through the API (404, nothing stored); B's own
    request reaches the route's validation (blank: 422)."""
    def check(w: World) -> None:
        url, before = path.format(w=w), w.count(model)
        refused(w.api.post(url, headers=auth(w.a_token), json={field: "mine"}), 404, w=w)
        assert w.api.post(url, headers=auth(w.b_token), json={field: " "}).status_code == 422
        assert w.count(model) == before
    return check


def _api_decide_b_request(w: World) -> None:
    """A's token cannot answer B's open regrade request (404; it stays open); staff's reach validation."""
    path = f"/api/v1/regrade-requests/{_b_open_request(w)}/decision"
    for action in ("reject", "regrade"):
        refused(w.api.post(path, headers=auth(w.a_token), json={"action": action, "reply": "no"}), 404, w=w)
    assert w.api.post(path, headers=auth(w.staff_token), json={"action": "reject"}).status_code == 422
    assert w.count(RegradeRequest, RegradeRequest.run_id == w.b_run, RegradeRequest.state == "open") == 1


def _api_counted_of_b(w: World) -> None:
    """A's token reads, chooses and clears nothing of B's counted run through the API (404,
    nothing stored); B reads their own (the positive control)."""
    url, before = f"/api/v1/assignments/hw4/students/{w.b_name}/counted-run", w.count(CountedRun)
    assert w.api.get(url, headers=auth(w.b_token)).status_code == 200
    refused(w.api.get(url, headers=auth(w.a_token)), 404, w=w)
    refused(w.api.put(url, headers=auth(w.a_token), json={"run_id": w.b_run}), 404, w=w)
    refused(w.api.delete(url, headers=auth(w.a_token)), 404, w=w)
    assert w.count(CountedRun) == before


def _grade_of_b(w: World) -> None:
    """A's token reads nothing of B's grade and makes no entry on it (404, nothing stored); B
    reads their own (the positive control), and B's own token may not make an entry (403)."""
    url, before = f"/api/v1/assignments/hw4/students/{w.b_name}/grade", w.count(GradeAdjustment)
    entry = {"kind": "manual", "points": 100, "reason": "mine"}
    assert w.api.get(url, headers=auth(w.b_token)).status_code == 200
    refused(w.api.get(url, headers=auth(w.a_token)), 404, w=w)
    refused(w.api.post(url, headers=auth(w.a_token), json=entry), 404, w=w)
    refused(w.api.post(url, headers=auth(w.b_token), json=entry), 403, w=w)
    assert w.count(GradeAdjustment) == before


def _web_grade_entry_denied(w: World) -> None:
    """A student's post of an entry on B's grade in hw4 is refused (403: students of the course do not
    grade) and stores nothing."""
    before = w.count(GradeAdjustment)
    refused(w.a_web.post(f"/assignments/hw4/students/{w.b_name}/grade", data={
        "csrf_token": w.a_csrf(), "kind": "manual", "points": "100", "reason": "mine"}, follow_redirects=False),
        403, w=w)
    assert w.count(GradeAdjustment) == before


def _door(method: str, path: str, code: int) -> Check:
    """A door whose credential is what it is sent, never a session of ours: an LMS's (a registered
    platform, a signed id_token and its single-use state, a one-time entry link, a signed ticket)
    or the single sign-on provider's (its signed answer, OpenID Connect's or SAML's; with no
    provider set, the doors are absent). Without one it refuses, names no one and changes nothing."""
    def check(w: World) -> None:
        before = (w.b_runs(), w.count(User), w.count(Submission))
        refused(w.a_web.request(method, path, data={"id_token": "x.y.z", "state": "forged", "ticket": "forged",
                                                    "iss": "https://evil.example", "login_hint": "b"}
                                if method == "POST" else None, follow_redirects=False), code, w=w)
        assert (w.b_runs(), w.count(User), w.count(Submission)) == before
    return check


DOORS: dict[tuple[str, str], Check] = {
    ("GET", "/lti/jwks"): _public("/lti/jwks"),
    ("GET", "/lti/login"): _door("GET", "/lti/login?iss=https://evil.example&login_hint=b", 400),
    ("POST", "/lti/login"): _door("POST", "/lti/login", 400),
    ("POST", "/lti/launch"): _door("POST", "/lti/launch", 403),
    ("GET", "/lti/enter/{token}"): _door("GET", "/lti/enter/forged", 403),
    ("POST", "/lti/choose"): _door("POST", "/lti/choose", 403),
    ("GET", "/login/sso"): _door("GET", "/login/sso", 404),
    ("GET", "/login/sso/callback"): _door("GET", "/login/sso/callback?code=forged&state=forged", 404),
    ("GET", "/login/saml"): _door("GET", "/login/saml", 404),
    ("POST", "/saml/acs"): _door("POST", "/saml/acs", 404),
    ("GET", "/saml/metadata"): _door("GET", "/saml/metadata", 404),
}

ROUTES: dict[tuple[str, str], Check] = {
    **PUBLIC,
    **DOORS,
    ("GET", "/api/v1/submissions"): _api_listing,
    ("POST", "/api/v1/submissions"): _api_upload,
    ("GET", "/api/v1/submissions/{submission_id}"): _api_get_denied("/api/v1/submissions/{w.b_submission}", 404),
    ("GET", "/api/v1/submissions/{submission_id}/runs"):
        _api_get_denied("/api/v1/submissions/{w.b_submission}/runs", 404),
    ("POST", "/api/v1/submissions/{submission_id}/regrade"): _no_new_run(
        lambda w: w.api.post(f"/api/v1/submissions/{w.b_submission}/regrade", headers=auth(w.a_token)), 403, 404),
    ("GET", "/api/v1/runs/{run_id}"): _api_get_denied("/api/v1/runs/{w.b_run}", 404),
    ("GET", "/api/v1/runs/{run_id}/regrade-requests"): _api_get_denied("/api/v1/runs/{w.b_run}/regrade-requests", 404),
    ("POST", "/api/v1/runs/{run_id}/regrade-requests"):
        _api_post_of_b("/api/v1/runs/{w.b_run}/regrade-requests", RegradeRequest, "reason"),
    ("GET", "/api/v1/runs/{run_id}/comments"): _api_get_denied("/api/v1/runs/{w.b_run}/comments", 404),
    ("POST", "/api/v1/runs/{run_id}/comments"): _api_post_of_b("/api/v1/runs/{w.b_run}/comments", RunComment, "body"),
    ("GET", "/api/v1/assignments/{slug}/regrade-requests"):
        _api_get_denied("/api/v1/assignments/hw4/regrade-requests", 403, owner="staff"),
    ("POST", "/api/v1/regrade-requests/{request_id}/decision"): _api_decide_b_request,
    ("GET", "/api/v1/assignments/{slug}/students/{login}/counted-run"): _api_counted_of_b,
    ("PUT", "/api/v1/assignments/{slug}/students/{login}/counted-run"): _api_counted_of_b,
    ("DELETE", "/api/v1/assignments/{slug}/students/{login}/counted-run"): _api_counted_of_b,
    ("GET", "/api/v1/assignments/{slug}/students/{login}/grade"): _grade_of_b,
    ("POST", "/api/v1/assignments/{slug}/students/{login}/grade"): _grade_of_b,
    ("POST", "/assignments/{slug}/students/{username}/grade"): _web_grade_entry_denied,
    ("GET", "/api/v1/metrics"): _api_get_denied("/api/v1/metrics", 403, owner="staff"),
    ("GET", "/api/v1/assignments/{slug}/gradebook"):
        _api_get_denied("/api/v1/assignments/hw4/gradebook", 403, owner="staff"),
    ("GET", "/api/v1/assignments/{slug}/submissions.zip"):
        _api_get_denied("/api/v1/assignments/hw4/submissions.zip", 403, owner="staff"),
    ("POST", "/api/v1/assignments/{slug}/grade-entries"): _grade_import_of_b(web=False),
    ("GET", "/api/v1/assignments/{slug}/gradebook.csv"):
        _api_get_denied("/api/v1/assignments/hw4/gradebook.csv", 403, owner="staff"),
    ("GET", "/api/v1/assignments/{slug}/gradebook-detailed.csv"):
        _api_get_denied("/api/v1/assignments/hw4/gradebook-detailed.csv", 403, owner="staff"),
    ("POST", "/api/v1/assignments/{slug}/regrade"): _no_new_run(
        lambda w: w.api.post("/api/v1/assignments/hw4/regrade", headers=auth(w.a_token),
                             json={"submissions": [w.b_submission]}), 403),
    ("POST", "/login"): _login_as_b,
    ("POST", "/forgot"): _forgot_for_b,
    ("POST", "/logout"): _logout,
    ("POST", "/submit"): _web_submit,
    ("POST", "/upload"): _token_form_upload,
    ("GET", "/submissions"): _web_history,
    ("GET", "/runs/{run_id}"): _web_get_denied("/runs/{w.b_run}", 404),
    ("GET", "/runs/{run_id}/status"): _web_get_denied("/runs/{w.b_run}/status", 404),
    ("GET", "/submissions/{submission_id}/code"): _web_get_denied("/submissions/{w.b_submission}/code", 404),
    ("GET", "/submissions/{submission_id}/download"): _web_get_denied("/submissions/{w.b_submission}/download", 404),
    ("GET", "/assignments/{slug}/students/{username}"):
        _web_get_denied("/assignments/hw4/students/{w.b_name}", 403, owner="staff"),
    ("POST", "/assignments/{slug}/students/{username}/counted"):
        _pin_denied("/assignments/hw4/students/{w.b_name}/counted", {"run_id": "{w.b_run}"}),
    ("POST", "/assignments/{slug}/students/{username}/counted/remove"):
        _pin_denied("/assignments/hw4/students/{w.b_name}/counted/remove", {}),
    ("POST", "/submissions/counted"): _choose_b_run,
    ("POST", "/submissions/counted/remove"): _choose_b_run,
    ("GET", "/gradebook"): _web_get_denied("/gradebook", 403, owner="staff"),
    ("GET", "/gradebook.csv"): _web_get_denied("/gradebook.csv", 403, owner="staff"),
    ("GET", "/gradebook-detailed.csv"): _web_get_denied("/gradebook-detailed.csv", 403, owner="staff"),
    ("GET", "/gradebook.json"): _web_get_denied("/gradebook.json", 403, owner="staff"),
    ("GET", "/gradebook/submissions.zip"):
        _web_get_denied("/gradebook/submissions.zip?assignment=hw4", 403, owner="staff"),
    ("GET", "/gradebook/import"): _web_get_denied("/gradebook/import?assignment=hw4", 403, owner="staff"),
    ("POST", "/gradebook/import"): _grade_import_of_b(web=True),
    ("GET", "/gradebook/regrade"): _web_get_denied("/gradebook/regrade?assignment=hw4&which=all", 403, owner="staff"),
    ("POST", "/gradebook/regrade"): _no_new_run(
        lambda w: w.a_web.post("/gradebook/regrade", data={"csrf_token": w.a_csrf(), "which": "all"},
                               follow_redirects=False), 403),
    ("POST", "/submissions/{submission_id}/regrade"): _no_new_run(
        lambda w: w.a_web.post(f"/submissions/{w.b_submission}/regrade", data={"csrf_token": w.a_csrf()},
                               follow_redirects=False), 404),
    ("GET", "/roster"): _roster_page,
    ("POST", "/roster"): _roster_import,
    ("GET", "/roster/job.json"): _web_get_denied("/roster/job.json", 403, owner="staff"),
    ("POST", "/roster/imports/{job_id}/passwords.csv"): _staff_import_passwords,
    ("POST", "/roster/reset-link"): _reset_link_for_b,
    ("GET", "/reset/{token}"): _reset_guessed,
    ("POST", "/reset/{token}"): _reset_guessed,
    ("GET", "/settings/account"): _account_page,
    ("POST", "/settings/account/email"): _own_email,
    ("POST", "/settings/account/staff-mail"): _own_staff_mail,
    ("GET", "/accounts"): _admin_page_denied("/accounts?login={w.b_name}"),
    ("GET", "/ops/lti"): _admin_page_denied("/ops/lti"),
    ("GET", "/ops/workers"): _admin_page_denied("/ops/workers"),
    ("GET", "/accounts/{username}"): _admin_page_denied("/accounts/{w.b_name}"),
    ("POST", "/accounts/{username}/email"): _admin_page_denied("/accounts/{w.b_name}/email",
                                                               {"email": "a@attacker.example"}),
    ("POST", "/accounts/{username}/reset-link"): _admin_page_denied("/accounts/{w.b_name}/reset-link", {}),
    ("POST", "/courses/{course}/members/{username}/email"): _member_account_denied(
        f"/courses/{COURSE}/members/{{w.b_name}}/email", {"email": "a@attacker.example"}),
    ("POST", "/courses/{course}/members/{username}/first-login-link"): _member_account_denied(
        f"/courses/{COURSE}/members/{{w.b_name}}/first-login-link", {}),
    ("POST", "/courses/{course}/first-logins"): _member_account_denied(f"/courses/{COURSE}/first-logins", {}),
    ("GET", "/settings/password"): _password_page,
    ("POST", "/settings/password"): _password_change,
    ("GET", "/settings/tokens"): _token_page,
    ("POST", "/settings/tokens"): _token_create,
    ("POST", "/settings/tokens/{token_id}/revoke"): _token_revoke,
    ("GET", "/courses"): _course_list,
    ("POST", "/courses"): _course_create,
    ("GET", "/courses/{course}"): _web_get_denied(f"/courses/{COURSE}", 403, owner="staff"),
    ("GET", "/courses/{course}/gradebook.csv"): _web_get_denied(f"/courses/{COURSE}/gradebook.csv", 403, owner="staff"),
    ("GET", "/api/v1/courses/{slug}/gradebook.csv"):
        _api_get_denied(f"/api/v1/courses/{COURSE}/gradebook.csv", 403, owner="staff"),
    ("GET", "/api/v1/courses/{slug}/ta-powers"): _api_get_denied(f"/api/v1/courses/{COURSE}/ta-powers", 403,
                                                                 owner="staff"),
    ("PUT", "/api/v1/courses/{slug}/ta-powers"): _api_put_denied(f"/api/v1/courses/{COURSE}/ta-powers",
                                                                 {"granted": ["extend", "queue", "schedule"]}),
    ("GET", "/api/v1/courses/{slug}/quota"): _api_get_denied(f"/api/v1/courses/{COURSE}/quota", 403, owner="staff"),
    ("PUT", "/api/v1/courses/{slug}/quota"): _api_put_denied(f"/api/v1/courses/{COURSE}/quota", {"runs": 1}),
    ("GET", "/api/v1/assignments/{slug}/quota"): _api_get_denied("/api/v1/assignments/hw4/quota", 403, owner="staff"),
    ("PUT", "/api/v1/assignments/{slug}/quota"): _api_put_denied("/api/v1/assignments/hw4/quota", {"runs": 1}),
    ("POST", "/courses/{course}/assignments"): _ops_post_denied(f"/courses/{COURSE}/assignments", {"assignment": "hw4"}),
    ("GET", "/assignments/{slug}/settings"): _web_get_denied("/assignments/hw4/settings", 403, owner="staff"),
    ("GET", "/assignments/{slug}/grading"): _web_get_denied("/assignments/hw4/grading", 403, owner="staff"),
    ("GET", "/assignments/{slug}/rescore"): _web_get_denied("/assignments/hw4/rescore", 403, owner="staff"),
    ("POST", "/assignments/{slug}/rescore"): _ops_post_denied("/assignments/hw4/rescore", {"confirm": "0"}),
    ("GET", "/assignments/{slug}/similarity"): _web_get_denied("/assignments/hw4/similarity", 403, owner="staff"),
    ("GET", "/assignments/{slug}/similarity/pair"): _ops_pair,
    ("GET", "/assignments/{slug}/similarity.json"): _ops_report_download,
    ("GET", "/assignments/{slug}/similarity/job.json"):
        _web_get_denied("/assignments/hw4/similarity/job.json", 403, owner="staff"),
    ("POST", "/assignments/{slug}/settings"): _ops_post_denied(
        "/assignments/hw4/settings", {"due": "2030-01-01T00:00", "score_policy": "best", "late_window": "30d"}),
    ("POST", "/assignments/{slug}/settings/undo"): _ops_post_denied("/assignments/hw4/settings/undo", {"change": "1"}),
    ("POST", "/assignments/{slug}/extensions"): _ops_post_denied(
        "/assignments/hw4/extensions", {"student": "{w.a_name}", "extra": "30d"}),
    ("GET", "/assignments/{slug}/extensions/{username}/remove"):
        _web_get_denied("/assignments/hw4/extensions/{w.b_name}/remove", 403, owner="staff"),
    ("POST", "/assignments/{slug}/extensions/{username}/remove"): _ops_post_denied(
        "/assignments/hw4/extensions/{w.b_name}/remove", {}),
    ("GET", "/courses/{course}/members"): _web_get_denied(f"/courses/{COURSE}/members", 403, owner="staff"),
    ("GET", "/courses/{course}/lms"): _web_get_denied(f"/courses/{COURSE}/lms", 403, owner="staff"),
    ("POST", "/courses/{course}/lms/grades"): _ops_post_denied(f"/courses/{COURSE}/lms/grades", {"link": "1"}),
    ("POST", "/courses/{course}/lms/roster"): _ops_post_denied(f"/courses/{COURSE}/lms/roster", {"context": "1"}),
    ("POST", "/courses/{course}/members"): _ops_post_denied(
        f"/courses/{COURSE}/members", {"username": "{w.a_name}", "part": "instructor"}),
    ("GET", "/courses/{course}/members/{username}/remove"):
        _web_get_denied(f"/courses/{COURSE}/members/{{w.b_name}}/remove", 403, owner="staff"),
    ("POST", "/courses/{course}/members/{username}/remove"): _ops_post_denied(
        f"/courses/{COURSE}/members/{{w.b_name}}/remove", {}),
    ("GET", "/assignments/{slug}/grading/pause"): _web_get_denied("/assignments/hw4/grading/pause", 403, owner="staff"),
    ("POST", "/assignments/{slug}/grading"): _ops_post_denied("/assignments/hw4/grading", {"action": "pause"}),
    ("POST", "/assignments/{slug}/similarity"): _ops_post_denied("/assignments/hw4/similarity", {}),
    ("POST", "/assignments/{slug}/similarity/base"): _ops_post_denied("/assignments/hw4/similarity/base", {}),
    ("POST", "/assignments/{slug}/similarity/sources"): _ops_post_denied(
        "/assignments/hw4/similarity/sources", {"public_git": "git:https://github.com/x/y@main"}),
    ("POST", "/assignments/{slug}/similarity/sources/remove"): _ops_post_denied(
        "/assignments/hw4/similarity/sources/remove", {"key": "git:https://github.com/x/y@main"}),
    ("POST", "/assignments/{slug}/storage"): _ops_post_denied("/assignments/hw4/storage", {"quota_mib": "1"}),
    ("POST", "/assignments/{slug}/quota"): _ops_post_denied("/assignments/hw4/quota", {"quota_runs": "1"}),
    ("POST", "/courses/{course}/quota"): _ops_post_denied(f"/courses/{COURSE}/quota", {"quota_runs": "1"}),
    ("POST", "/courses/{course}/ta-powers"): _ops_post_denied(f"/courses/{COURSE}/ta-powers", {"extend": "on"}),
    ("POST", "/runs/{run_id}/regrade-request"): _regrade_request_of_b,
    ("POST", "/runs/{run_id}/adjustments"): _adjust_b,
    ("POST", "/runs/{run_id}/comments"): _comment_on_b,
    ("GET", "/assignments/{slug}/regrade-requests"):
        _web_get_denied("/assignments/hw4/regrade-requests", 403, owner="staff"),
    ("POST", "/assignments/{slug}/regrade-requests/{request_id}"): _decide_b_request,
}


def served(settings: Settings) -> list[tuple[str, str]]:
    return sorted(set(app_routes(create_app(settings).routes)))


def test_every_route_is_classified(settings: Settings) -> None:
    unclassified = [route for route in served(settings) if route not in ROUTES]
    assert not unclassified, f"routes without an authorization check in {__file__}: {unclassified}"


@pytest.mark.parametrize("route", sorted(ROUTES), ids=" ".join)
def test_student_cannot_reach_another_students_work(route: tuple[str, str], world: World) -> None:
    if route not in served(world.settings):
        pytest.skip(f"{route} is not served by this version of the app")
    ROUTES[route](world)


def _concrete(path: str, w: World) -> str:
    return (path.replace("{submission_id}", str(w.b_submission)).replace("{run_id}", str(w.b_run))
            .replace("{slug}", "hw4").replace("{token_id}", str(w.b_token_id)))


def test_strangers_get_nothing(world: World) -> None:
    """Every non-public route without credentials: 401 (API), the login page (pages) or a
    refused form; never B's data, never a change."""
    stranger = TestClient(create_app(world.settings))
    before = (world.b_runs(), world.count(Submission), world.count(ApiToken))
    for method, path in served(world.settings):
        if (method, path) in PUBLIC or (method, path) in DOORS or path in ("/login", "/logout"):
            continue
        response = stranger.request(method, _concrete(path, world), follow_redirects=False,
                                    files={"file": ("x.zip", small_zip())} if method == "POST" else None)
        expected = (401,) if path.startswith("/api/") else (303, 401, 403)
        if path.startswith("/reset/"):  # the token in the path is the credential: a wrong one names nothing
            expected = (403, 404)
        assert response.status_code in expected, (method, path, response.status_code, response.text[:200])
        assert world.b_marker not in response.text
    assert (world.b_runs(), world.count(Submission), world.count(ApiToken)) == before


def test_every_session_form_needs_its_csrf_token(world: World) -> None:
    before = (world.b_runs(), world.count(Submission), world.count(ApiToken), world.count(User))
    posts = [p for m, p in served(world.settings) if m == "POST" and not p.startswith("/api/") and p != "/upload"
             and ("POST", p) not in DOORS]  # these doors carry their own credential
    assert "/submit" in posts and "/settings/tokens" in posts
    for path in posts:
        for sent in ({}, {"csrf_token": "forged"}):
            response = world.a_web.post(_concrete(path, world), data={**sent, "name": "x", "which": "all"},
                                        files={"file": ("x.zip", small_zip())}, follow_redirects=False)
            assert response.status_code in (403, 401), (path, sent, response.status_code)
    assert (world.b_runs(), world.count(Submission), world.count(ApiToken), world.count(User)) == before
    assert world.a_web.get("/submissions", follow_redirects=False).status_code == 200  # still logged in


# ---- sessions ------------------------------------------------------------------------------


def test_session_is_replaced_at_login(world: World) -> None:
    """Fixation: a cookie planted before login (the attacker keeps a copy) stays anonymous, and
    the session id and CSRF token change at login."""
    victim = TestClient(create_app(world.settings))
    page = victim.get("/login")
    planted = victim.cookies.get("kg_session")
    assert planted
    before = csrf_of(page.text)
    response = victim.post("/login", data={"csrf_token": before, "username": world.a_name, "password": PASSWORD},
                           follow_redirects=False)
    assert response.status_code == 303
    assert victim.cookies.get("kg_session") != planted
    assert csrf_of(victim.get("/").text) != before
    attacker = TestClient(create_app(world.settings), cookies={"kg_session": planted})
    assert attacker.get("/submissions", follow_redirects=False).status_code == 303


def test_session_cookie_flags(world: World) -> None:
    response = TestClient(create_app(world.settings)).get("/login")
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie


def test_a_copied_cookie_dies_at_logout(world: World) -> None:
    client = login(world.settings, world.a_name)
    stolen = client.cookies.get("kg_session")
    client.post("/logout", data={"csrf_token": csrf_of(client.get("/").text)})
    thief = TestClient(create_app(world.settings), cookies={"kg_session": stolen})
    assert thief.get("/submissions", follow_redirects=False).status_code == 303


# ---- headers -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/login", "/api/v1/health", "/api/v1/runs/1", "/static/app.css", "/docs",
                                  "/nowhere"])
def test_secure_headers_on_every_answer(world: World, path: str) -> None:
    headers = world.api.get(path).headers
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "same-origin"
    assert "camera=()" in headers["permissions-policy"]
    if path != "/docs":  # Swagger UI starts with an inline script
        assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    if path.startswith("/api/"):
        assert headers["cache-control"] == "no-store"
    assert "strict-transport-security" not in headers  # plain HTTP here


def test_hsts_behind_https(settings: Settings) -> None:
    https = settings.model_copy(update={"session_https_only": True})
    assert "max-age=" in TestClient(create_app(https)).get("/login").headers["strict-transport-security"]


def test_pages_have_no_inline_code_the_policy_would_block(world: World) -> None:
    for path in ("/", "/submissions", "/settings/tokens", "/login"):
        html = world.a_web.get(path).text
        assert not re.search(r"<script(?![^>]*\bsrc=)", html), path
        assert not re.search(r"\son[a-z]+\s*=", html) and "style=" not in html, path


# ---- upload rate limit ---------------------------------------------------------------------


def _forget_upload_hits(world: World) -> None:
    """The limit is counted in the database: each test starts from no hits."""
    with session_scope(world.sessions) as session:
        session.execute(delete(UploadHit))


def test_the_shared_window_counts_and_forgets(world: World) -> None:
    start = utcnow()
    now = [start]
    window = SharedWindow(world.sessions, limit=2, window_s=10, clock=lambda: now[0])
    sender = f"user:{uuid.uuid4().hex}"
    assert window.hit(sender) is None and window.hit(sender) is None
    assert window.hit(sender) == pytest.approx(10) and window.hit(sender + "-other") is None
    now[0] = start + timedelta(seconds=9.5)
    assert window.hit(sender) == pytest.approx(0.5)
    now[0] = start + timedelta(seconds=10)
    assert window.hit(sender) is None
    assert world.count(UploadHit, UploadHit.sender == sender) == 1  # the expired hits are gone


def test_two_web_processes_share_one_limit(world: World) -> None:
    """Two apps (as two web processes would be) on one database: the third upload is refused
    whichever process it reaches (each used to allow the limit of its own)."""
    _forget_upload_hits(world)
    limited = world.settings.model_copy(update={"upload_rate_limit": 2, "upload_rate_window_s": 600})
    with TestClient(create_app(limited)) as first, TestClient(create_app(limited)) as second:
        codes = [client.post("/api/v1/submissions", headers=auth(world.a_token),
                             files={"file": ("a.zip", small_zip(f"shared {i}".encode()))}).status_code
                 for i, client in enumerate((first, second, first, second))]
    assert codes == [201, 201, 429, 429]


def test_uploads_are_rate_limited_per_student(world: World) -> None:
    _forget_upload_hits(world)
    limited = world.settings.model_copy(update={"upload_rate_limit": 3, "upload_rate_window_s": 600})
    with TestClient(create_app(limited)) as client:
        codes = [client.post("/api/v1/submissions", headers=auth(world.a_token),
                             files={"file": ("a.zip", small_zip(bytes([i])))}).status_code for i in range(3)]
        before = world.count(Submission)
        refused_ = client.post("/api/v1/submissions", headers=auth(world.a_token),
                               files={"file": ("a.zip", small_zip(b"4"))})
        other = client.post("/api/v1/submissions", headers=auth(world.b_token), files={"file": ("b.zip", small_zip())})
    assert codes == [201, 201, 201]
    assert refused_.status_code == 429 and refused_.json()["error"]["code"] == "too_many_requests"
    assert 0 < int(refused_.headers["retry-after"]) <= 600
    assert world.count(Submission) == before + 1  # B's, not A's fourth
    assert other.status_code == 201, "one student's limit must not touch another's"


def test_the_web_form_shares_the_students_limit(world: World) -> None:
    _forget_upload_hits(world)
    limited = world.settings.model_copy(update={"upload_rate_limit": 1, "upload_rate_window_s": 600})
    with TestClient(create_app(limited)) as client:
        assert client.post("/api/v1/submissions", headers=auth(world.a_token),
                           files={"file": ("a.zip", small_zip(b"once"))}).status_code == 201
        login(limited, world.a_name, client)  # the same app: its counter
        response = client.post("/submit", data={"csrf_token": csrf_of(client.get("/").text)},
                               files={"file": ("a.zip", small_zip(b"twice"))}, follow_redirects=False)
    assert response.status_code == 429 and "Too many uploads" in response.text


# ---- tokens ----------------------------------------------------------------------------------


def test_tokens_are_stored_hashed_and_never_logged(world: World, caplog: pytest.LogCaptureFixture) -> None:
    with session_scope(world.sessions) as session:
        stored = [h for h in session.scalars(select(ApiToken.token_hash))]
    assert all(world.a_token not in h and world.b_token not in h for h in stored)
    caplog.set_level(logging.DEBUG)
    wrong = world.a_token[:-4] + "xxxx"
    # A's earlier runs end, so fair share sends A's next upload: to a broker that is down,
    # which logs a warning (with a run of A still in flight nothing would be sent or logged).
    with session_scope(world.sessions) as session:
        session.execute(update(Run).where(Run.state.not_in(FINAL_STATES), Run.submission_id.in_(
            select(Submission.id).join(User).where(User.username == world.a_name))).values(
            state=RunState.failed, error_class=ErrorClass.infra_error, finished_at=utcnow()))
    offline = world.settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"})
    with TestClient(create_app(offline)) as client:
        client.get("/api/v1/submissions", headers=auth(world.a_token))
        client.get("/api/v1/submissions", headers=auth(wrong))
        client.post("/upload", data={"token": wrong}, files={"file": ("x.zip", small_zip())})
        client.post("/upload", data={"token": world.a_token}, files={"file": ("x.zip", small_zip(b"log"))})
        client.post("/api/v1/submissions", headers=auth(world.a_token), content=b"not multipart")
        client.post("/api/v1/submissions", headers=auth(world.a_token), files={"file": ("y.zip", small_zip(b"l"))})
    server_side = [r for r in caplog.records if not r.name.startswith("httpx")]  # httpx: the test client's own
    assert any(r.name.startswith("grader") for r in server_side), "nothing logged: the check would be vacuous"
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in server_side)
    assert world.a_token not in logged and wrong not in logged


@pytest.mark.parametrize("path", ["/api/v1/runs/2147483648", "/api/v1/submissions/99999999999999/runs",
                                  "/runs/2147483648", "/runs/2147483648/status"])
def test_ids_past_the_database_integer_are_not_found(world: World, path: str) -> None:
    """Found by schemathesis: such an id was a 500 (PostgreSQL: integer out of range)."""
    client = world.api if path.startswith("/api/") else world.a_web
    response = client.get(path, headers=auth(world.a_token))
    assert response.status_code == 404, response.text
