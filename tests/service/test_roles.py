"""Who may use each staff route, by role in the course (grader.roles): a table of every route
the app serves (enumerated from it, so a new route without a rule here fails
`test_every_route_has_a_rule`), and for each staff route the roles allowed. Each of a course's
instructor, TA and student sends the route's request: an allowed role reaches the route's own
answer (a page, a redirect, or the use case's refusal of the data sent: `Rule.ok`), a role that is
not allowed gets a 403 that says why (the HTML page, or the API's error envelope).

The course has one assignment and one student with a scored run and an open regrade request;
the app runs on task and similarity queues of its own, so nothing sent here reaches a worker."""
from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.credentials import STUDENT_SCOPES, issue_token
from grader.course.courses import create_course
from grader.course.membership import enroll, get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, CourseRole, ProblemResult, RegradeRequest, Role, RunState, utcnow
from grader.passwords import set_password
from grader.service import record_submission
from grader.settings import Settings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth, drop_queues
from tests.service.test_security import app_routes
from tests.service.test_web_settings import PASSWORD, Browser

ROLES = ("instructor", "ta", "student")
STAFF = frozenset({"instructor", "ta"})
INSTRUCTOR = frozenset({"instructor"})


@dataclass
class World:
    slug: str  # the assignment
    course: str
    logins: dict[str, str]  # role -> login
    tokens: dict[str, str]  # role -> API token (by role: every scope for staff, submit and read for the student);
    # "narrow": the instructor's, with a student's scopes
    run: int  # the student's scored run
    submission: int
    student_id: int
    sessions: sessionmaker[Session]
    settings: Settings
    browsers: dict[str, Browser]
    api: TestClient

    def web(self, role: str) -> TestClient:
        return self.browsers[role].client

    def post(self, role: str, path: str, **data: object) -> httpx.Response:
        """A form post from a page of the app, with this browser's CSRF token."""
        return self.web(role).post(path, data={"csrf_token": self.browsers[role].page_csrf("/settings/password"),
                                               **data}, follow_redirects=False)

    def call(self, role: str, method: str, path: str, **kwargs: object) -> httpx.Response:
        return self.api.request(method, path, headers=auth(self.tokens[role]), **kwargs)  # type: ignore[arg-type]

    @property
    def request(self) -> int:
        """The student's open regrade request of the run (made now when a re-grade answered the last one)."""
        with session_scope(self.sessions) as session:
            asked = session.scalar(select(RegradeRequest.id).where(RegradeRequest.run_id == self.run,
                                                                   RegradeRequest.state == "open"))
            if asked is None:
                row = RegradeRequest(run_id=self.run, student_id=self.student_id, reason="please look")
                session.add(row)
                session.flush()
                asked = row.id
            return asked


@pytest.fixture(scope="module")
def world(settings: Settings, sessions: sessionmaker[Session]) -> Iterator[World]:
    tag = uuid.uuid4().hex[:6]
    slug, course_slug = f"roles-a-{tag}", f"roles-{tag}"
    logins = {role: f"roles-{role}-{tag}" for role in ROLES}
    with session_scope(sessions) as session:
        course = create_course(session, course_slug, "Roles")
        assignment = Assignment(slug=slug, title="Roles", total_points=100, course=course)
        session.add(assignment)
        users = {role: get_or_create_user(session, login, Role.instructor if role == "instructor" else Role.student,
                                          [course]) for role, login in logins.items()}
        enroll(session, users["ta"], course, CourseRole.ta)
        for user in users.values():
            set_password(user, PASSWORD, SUITE_ARGON2)
        tokens = {role: issue_token(session, user, "roles") for role, user in users.items()}
        tokens["narrow"] = issue_token(session, users["instructor"], "narrow", STUDENT_SCOPES)
        sub, run = record_submission(session, users["student"], assignment, "s.zip", StoredBlob("9" * 64, 10))
        run.state, run.score, run.finished_at = RunState.scored, 60.0, utcnow()
        run.results.append(ProblemResult(problem_id="1.1", title="Softmax", status="passed", points=60.0,
                                         max_points=100.0))
        session.flush()
        ids = (run.id, sub.id, users["student"].id)
    own = settings.model_copy(update={"task_queue": f"kg-roles-{tag}", "similarity_queue": f"kg-roles-sim-{tag}"})
    browsers = {role: Browser(own, login) for role, login in logins.items()}
    yield World(slug, course_slug, logins, tokens, *ids, sessions, own, browsers, TestClient(create_app(own)))
    drop_queues(own.task_queue, own.similarity_queue)


Send = Callable[[World, str], httpx.Response]


@dataclass(frozen=True)
class Rule:
    """The roles allowed on a staff route, the request each role sends, and what an allowed
    role gets: `ok` (with `says` in it, where `ok` is the use case refusing the data sent)."""

    allowed: frozenset[str]
    send: Send
    ok: int = 200
    says: str = ""


def get(path: str) -> Send:
    return lambda w, role: w.web(role).get(path.format(w=w), follow_redirects=False)


def post(path: str, **data: str) -> Send:
    return lambda w, role: w.post(role, path.format(w=w), **{k: v.format(w=w) for k, v in data.items()})


def api(method: str, path: str, body: object = None) -> Send:
    def send(w: World, role: str) -> httpx.Response:
        filled = body(w) if callable(body) else body
        return w.call(role, method, path.format(w=w), **({"json": filled} if filled is not None else {}))
    return send


A = "/assignments/{w.slug}"
C = "/courses/{w.course}"
# Routes that are no course's staff route: public, one's own account, or one's own work (each
# checked for every kind of caller in test_security.py), with why.
NOT_STAFF = {
    ("GET", "/"): "the upload page", ("POST", "/submit"): "one's own upload", ("POST", "/upload"): "one's own upload",
    ("GET", "/login"): "public", ("POST", "/login"): "public", ("POST", "/logout"): "one's own session",
    ("GET", "/forgot"): "public", ("POST", "/forgot"): "public", ("GET", "/reset/{token}"): "the link's holder",
    ("POST", "/reset/{token}"): "the link's holder", ("GET", "/docs"): "public",
    ("GET", "/login/sso"): "public", ("GET", "/login/sso/callback"): "the provider's signed answer",
    ("GET", "/login/saml"): "public", ("POST", "/saml/acs"): "the identity provider's signed answer",
    ("GET", "/saml/metadata"): "public",
    ("GET", "/lti/jwks"): "public", ("GET", "/lti/login"): "a registered LMS", ("POST", "/lti/login"): "a registered LMS",
    ("POST", "/lti/launch"): "the LMS's signed launch", ("GET", "/lti/enter/{token}"): "the link's holder",
    ("POST", "/lti/choose"): "the launch's signed ticket (an LMS instructor's)",
    ("GET", "/docs/oauth2-redirect"): "public", ("GET", "/redoc"): "public", ("GET", "/openapi.json"): "public",
    ("MOUNT", "/static"): "public", ("MOUNT", "/static/docs"): "public", ("GET", "/api/v1/health"): "public",
    ("GET", "/settings/password"): "own account", ("POST", "/settings/password"): "own account",
    ("GET", "/settings/tokens"): "own account", ("POST", "/settings/tokens"): "own account",
    ("GET", "/settings/account"): "own account", ("POST", "/settings/account/email"): "own account",
    ("POST", "/settings/account/staff-mail"): "own account",
    ("GET", "/accounts"): "site administrators only (test_account_ownership.py)",
    ("GET", "/ops/lti"): "site administrators only (test_lti.py)",
    ("GET", "/ops/workers"): "site administrators only (test_gpu_worker_faults.py)",
    ("GET", "/accounts/{username}"): "site administrators only (test_account_ownership.py)",
    ("POST", "/accounts/{username}/email"): "site administrators only (test_account_ownership.py)",
    ("POST", "/accounts/{username}/reset-link"): "site administrators only (test_account_ownership.py)",
    ("POST", "/settings/tokens/{token_id}/revoke"): "own account",
    ("GET", "/courses"): "the courses one is staff of", ("GET", "/submissions"): "one's own work",
    ("POST", "/submissions/counted"): "one's own work", ("POST", "/submissions/counted/remove"): "one's own work",
    ("GET", "/runs/{run_id}"): "own work or staff's view", ("GET", "/runs/{run_id}/status"): "own work or staff's view",
    ("POST", "/runs/{run_id}/regrade-request"): "the run's own student", ("POST", "/runs/{run_id}/comments"): "own "
    "work or staff's view", ("GET", "/submissions/{submission_id}/code"): "own work or staff's view",
    ("GET", "/submissions/{submission_id}/download"): "own work or staff's view",
    ("POST", "/roster/imports/{job_id}/passwords.csv"): "the import's own requester",
    ("GET", "/api/v1/submissions"): "own work, and staff's view", ("POST", "/api/v1/submissions"): "own upload",
    ("GET", "/api/v1/submissions/{submission_id}"): "own work or staff's view",
    ("GET", "/api/v1/submissions/{submission_id}/runs"): "own work or staff's view",
    ("GET", "/api/v1/runs/{run_id}"): "own work or staff's view",
    ("GET", "/api/v1/runs/{run_id}/regrade-requests"): "own work or staff's view",
    ("POST", "/api/v1/runs/{run_id}/regrade-requests"): "the run's own student",
    ("GET", "/api/v1/runs/{run_id}/comments"): "own work or staff's view",
    ("POST", "/api/v1/runs/{run_id}/comments"): "own work or staff's view",
    ("GET", "/api/v1/assignments/{slug}/students/{login}/counted-run"): "own work or staff's view",
    ("GET", "/api/v1/assignments/{slug}/students/{login}/grade"): "own work or staff's view",
}

STAFF_ROUTES: dict[tuple[str, str], Rule] = {
    # the gradebook and grading: instructors and TAs
    ("GET", "/gradebook"): Rule(STAFF, get("/gradebook?assignment={w.slug}")),
    ("GET", "/gradebook.csv"): Rule(STAFF, get("/gradebook.csv?assignment={w.slug}")),
    ("GET", "/gradebook-detailed.csv"): Rule(STAFF, get("/gradebook-detailed.csv?assignment={w.slug}")),
    ("GET", "/gradebook.json"): Rule(STAFF, get("/gradebook.json?assignment={w.slug}")),
    ("GET", "/courses/{course}/gradebook.csv"): Rule(STAFF, get(C + "/gradebook.csv"), 200, "Points Possible"),
    ("GET", "/gradebook/regrade"): Rule(STAFF, get("/gradebook/regrade?assignment={w.slug}&which=all")),
    ("POST", "/gradebook/regrade"): Rule(STAFF, post("/gradebook/regrade", assignment="{w.slug}", which="all"), 303),
    ("GET", "/gradebook/submissions.zip"): Rule(STAFF, get("/gradebook/submissions.zip?assignment={w.slug}"), 200,
                                                "manifest.csv"),
    ("GET", "/gradebook/import"): Rule(STAFF, get("/gradebook/import?assignment={w.slug}")),
    ("POST", "/gradebook/import"): Rule(STAFF, post("/gradebook/import", assignment="{w.slug}",
                                                    text="login,kind,points,reason\nnobody-here,manual,1,x\n"),
                                        400, "Line 2: no student"),
    ("POST", "/submissions/{submission_id}/regrade"): Rule(STAFF, post("/submissions/{w.submission}/regrade"), 303),
    ("POST", "/runs/{run_id}/adjustments"): Rule(STAFF, post("/runs/{w.run}/adjustments", points="many", reason="x"),
                                                 400, "are not a number"),
    ("GET", "/assignments/{slug}/students/{username}"): Rule(STAFF, get(A + "/students/{w.logins[student]}")),
    ("POST", "/assignments/{slug}/students/{username}/counted"): Rule(
        STAFF, post(A + "/students/{w.logins[student]}/counted", run_id="{w.run}"), 303),
    ("POST", "/assignments/{slug}/students/{username}/counted/remove"): Rule(
        STAFF, post(A + "/students/{w.logins[student]}/counted/remove"), 303),
    ("POST", "/assignments/{slug}/students/{username}/grade"): Rule(
        STAFF, post(A + "/students/{w.logins[student]}/grade", kind="adjust", points="many", reason="x"), 400,
        "are not a number"),
    ("GET", "/assignments/{slug}/regrade-requests"): Rule(STAFF, get(A + "/regrade-requests")),
    ("POST", "/assignments/{slug}/regrade-requests/{request_id}"): Rule(
        STAFF, post(A + "/regrade-requests/{w.request}", action="neither"), 400, "Choose re-grade, adjust or reject"),
    ("GET", "/assignments/{slug}/similarity"): Rule(STAFF, get(A + "/similarity")),
    ("GET", "/assignments/{slug}/similarity/job.json"): Rule(STAFF, get(A + "/similarity/job.json")),
    ("GET", "/assignments/{slug}/similarity.json"): Rule(STAFF, get(A + "/similarity.json"), 404,
                                                         "No similarity report"),
    ("GET", "/assignments/{slug}/similarity/pair"): Rule(STAFF, get(A + "/similarity/pair?a=x&b=y"), 404, "No pair"),
    ("POST", "/assignments/{slug}/similarity"): Rule(STAFF, post(A + "/similarity"), 404, "has no rubric"),
    ("GET", "/courses/{course}"): Rule(STAFF, get(C)),
    # the course's policies, roster and members, pauses and removals: instructors only
    ("POST", "/assignments/{slug}/similarity/base"): Rule(INSTRUCTOR, post(A + "/similarity/base", action="default"),
                                                          303),
    ("POST", "/assignments/{slug}/similarity/sources"): Rule(INSTRUCTOR, post(A + "/similarity/sources"), 400,
                                                             "or give a git ref first"),
    ("POST", "/assignments/{slug}/similarity/sources/remove"): Rule(
        INSTRUCTOR, post(A + "/similarity/sources/remove", key="none"), 303),
    ("GET", "/assignments/{slug}/settings"): Rule(INSTRUCTOR, get(A + "/settings")),
    ("POST", "/assignments/{slug}/settings"): Rule(INSTRUCTOR, post(A + "/settings", due="not a date"), 400,
                                                   "The schedule was not saved"),
    ("POST", "/assignments/{slug}/settings/undo"): Rule(INSTRUCTOR, post(A + "/settings/undo", change="0"), 404,
                                                        "no saved change"),
    ("GET", "/assignments/{slug}/rescore"): Rule(INSTRUCTOR, get(A + "/rescore"), 200, "cannot be scored again"),
    ("POST", "/assignments/{slug}/rescore"): Rule(INSTRUCTOR, post(A + "/rescore", confirm="0"), 200,
                                                  "cannot be scored again"),
    ("POST", "/assignments/{slug}/storage"): Rule(INSTRUCTOR, post(A + "/storage", quota_mib="lots"), 400,
                                                  "is not a size in MiB"),
    ("POST", "/assignments/{slug}/quota"): Rule(INSTRUCTOR, post(A + "/quota", quota_runs="lots"), 400,
                                                "is not a number of runs"),
    ("POST", "/courses/{course}/quota"): Rule(INSTRUCTOR, post(C + "/quota", quota_runs="lots"), 400,
                                              "is not a number of runs"),
    ("POST", "/courses/{course}/ta-powers"): Rule(INSTRUCTOR, post(C + "/ta-powers"), 303),
    ("POST", "/assignments/{slug}/extensions"): Rule(INSTRUCTOR, post(A + "/extensions",
                                                                      student="{w.logins[student]}", extra="0"), 303),
    ("GET", "/assignments/{slug}/extensions/{username}/remove"): Rule(
        INSTRUCTOR, get(A + "/extensions/{w.logins[student]}/remove")),
    ("POST", "/assignments/{slug}/extensions/{username}/remove"): Rule(
        INSTRUCTOR, post(A + "/extensions/{w.logins[student]}/remove"), 303),
    ("GET", "/assignments/{slug}/grading"): Rule(INSTRUCTOR, get(A + "/grading")),
    ("GET", "/assignments/{slug}/grading/pause"): Rule(INSTRUCTOR, get(A + "/grading/pause")),
    ("POST", "/assignments/{slug}/grading"): Rule(INSTRUCTOR, post(A + "/grading", action=""), 303),
    ("POST", "/courses"): Rule(INSTRUCTOR, post("/courses", slug="Not A Slug", title="x"), 400,
                               "is not a course name"),
    ("POST", "/courses/{course}/assignments"): Rule(INSTRUCTOR, post(C + "/assignments", assignment="no-such"), 400,
                                                    "There is no assignment no-such"),
    ("GET", "/courses/{course}/members"): Rule(INSTRUCTOR, get(C + "/members")),
    ("GET", "/courses/{course}/lms"): Rule(STAFF, get(C + "/lms")),
    # no such LMS link or course here: the instructor's request reaches the lookup (404), nothing is queued
    ("POST", "/courses/{course}/lms/grades"): Rule(INSTRUCTOR, post(C + "/lms/grades", link="999999"), 404),
    ("POST", "/courses/{course}/lms/roster"): Rule(INSTRUCTOR, post(C + "/lms/roster", context="999999"), 404),
    ("POST", "/courses/{course}/members"): Rule(INSTRUCTOR, post(C + "/members", username="{w.logins[student]}",
                                                                 part="student"), 303),
    ("GET", "/courses/{course}/members/{username}/remove"): Rule(INSTRUCTOR,
                                                                 get(C + "/members/{w.logins[student]}/remove")),
    ("POST", "/courses/{course}/members/{username}/remove"): Rule(
        INSTRUCTOR, post(C + "/members/{w.logins[student]}/remove"), 303),
    ("GET", "/roster"): Rule(INSTRUCTOR, get("/roster?course={w.course}")),
    ("GET", "/roster/job.json"): Rule(INSTRUCTOR, get("/roster/job.json")),
    ("POST", "/roster"): Rule(INSTRUCTOR, post("/roster", course="{w.course}", text=""), 400,
                              "Choose a CSV file or paste the roster"),
    # the student has logged in: their account is theirs, so the instructor's link is refused in words
    ("POST", "/roster/reset-link"): Rule(INSTRUCTOR, post("/roster/reset-link", username="{w.logins[student]}"), 403,
                                         "has logged in before"),
    ("POST", "/courses/{course}/members/{username}/email"): Rule(
        INSTRUCTOR, post(C + "/members/{w.logins[student]}/email", email="x@example.edu"), 403, "has logged in before"),
    ("POST", "/courses/{course}/members/{username}/first-login-link"): Rule(
        INSTRUCTOR, post(C + "/members/{w.logins[student]}/first-login-link"), 403, "has logged in before"),
    ("POST", "/courses/{course}/first-logins"): Rule(INSTRUCTOR, post(C + "/first-logins"), 200, "login,link,note"),
    # the API: staff's tokens (every scope) read and grade; a student's token is refused
    ("GET", "/api/v1/assignments/{slug}/gradebook"): Rule(STAFF, api("GET", "/api/v1" + A + "/gradebook")),
    ("GET", "/api/v1/assignments/{slug}/gradebook.csv"): Rule(STAFF, api("GET", "/api/v1" + A + "/gradebook.csv")),
    ("GET", "/api/v1/assignments/{slug}/gradebook-detailed.csv"): Rule(
        STAFF, api("GET", "/api/v1" + A + "/gradebook-detailed.csv")),
    ("GET", "/api/v1/courses/{slug}/gradebook.csv"): Rule(STAFF, api("GET", "/api/v1" + C + "/gradebook.csv"), 200,
                                                          "Points Possible"),
    ("POST", "/api/v1/assignments/{slug}/students/{login}/grade"): Rule(
        STAFF, api("POST", "/api/v1" + A + "/students/{w.logins[student]}/grade",
                   {"kind": "manual", "points": 1000, "reason": "too much"}), 409, "A manual grade is from 0"),
    ("GET", "/api/v1/assignments/{slug}/regrade-requests"): Rule(STAFF, api("GET", "/api/v1" + A + "/regrade-requests")),
    ("GET", "/api/v1/assignments/{slug}/submissions.zip"): Rule(
        STAFF, api("GET", "/api/v1" + A + "/submissions.zip?which=latest"), 200, "manifest.csv"),
    ("POST", "/api/v1/assignments/{slug}/grade-entries"): Rule(
        STAFF, api("POST", "/api/v1" + A + "/grade-entries", lambda w: {
            "csv": f"login,kind,points,reason\n{w.logins['student']},manual,1000,too much\n", "dry_run": True}),
        200, "A manual grade is from 0"),
    ("POST", "/api/v1/assignments/{slug}/regrade"): Rule(
        STAFF, api("POST", "/api/v1" + A + "/regrade", lambda w: {"submissions": [w.submission]}), 201),
    ("POST", "/api/v1/submissions/{submission_id}/regrade"): Rule(
        STAFF, api("POST", "/api/v1/submissions/{w.submission}/regrade"), 201),
    ("POST", "/api/v1/regrade-requests/{request_id}/decision"): Rule(
        STAFF, api("POST", "/api/v1/regrade-requests/{w.request}/decision",
                   {"action": "adjust", "points": 1000, "reply": "too much"}), 409, "at most"),
    ("PUT", "/api/v1/assignments/{slug}/students/{login}/counted-run"): Rule(
        STAFF, api("PUT", "/api/v1" + A + "/students/{w.logins[student]}/counted-run", lambda w: {"run_id": w.run})),
    ("DELETE", "/api/v1/assignments/{slug}/students/{login}/counted-run"): Rule(
        STAFF, api("DELETE", "/api/v1" + A + "/students/{w.logins[student]}/counted-run")),
    ("GET", "/api/v1/metrics"): Rule(STAFF, api("GET", "/api/v1/metrics")),
    # a course's TA powers and run quotas: its staff read them, its instructors change them (each
    # change sent here is one the use case refuses, so the world's course keeps its settings)
    ("GET", "/api/v1/courses/{slug}/ta-powers"): Rule(STAFF, api("GET", "/api/v1" + C + "/ta-powers"), 200, "grantable"),
    ("PUT", "/api/v1/courses/{slug}/ta-powers"): Rule(
        INSTRUCTOR, api("PUT", "/api/v1" + C + "/ta-powers", {"granted": ["manage"]}), 400, "is not a power"),
    ("GET", "/api/v1/courses/{slug}/quota"): Rule(STAFF, api("GET", "/api/v1" + C + "/quota"), 200, "in_force"),
    ("PUT", "/api/v1/courses/{slug}/quota"): Rule(
        INSTRUCTOR, api("PUT", "/api/v1" + C + "/quota", {"runs": -1}), 400, "is not a number of runs"),
    ("GET", "/api/v1/assignments/{slug}/quota"): Rule(STAFF, api("GET", "/api/v1" + A + "/quota"), 200, "in_force"),
    ("PUT", "/api/v1/assignments/{slug}/quota"): Rule(
        INSTRUCTOR, api("PUT", "/api/v1" + A + "/quota", {"runs": -1}), 400, "is not a number of runs"),
}


def served(settings: Settings) -> set[tuple[str, str]]:
    return set(app_routes(create_app(settings).routes))


def test_every_route_has_a_rule(settings: Settings) -> None:
    assert not set(NOT_STAFF) & set(STAFF_ROUTES)
    missing = sorted(served(settings) - set(NOT_STAFF) - set(STAFF_ROUTES))
    assert not missing, f"routes without a rule of who may use them in {__file__}: {missing}"
    assert not set(STAFF_ROUTES) - served(settings), "rules of routes the app no longer serves"


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("route", sorted(STAFF_ROUTES), ids=" ".join)
def test_each_role_on_each_staff_route(route: tuple[str, str], role: str, world: World) -> None:
    rule = STAFF_ROUTES[route]
    response = rule.send(world, role)
    if role in rule.allowed:
        assert response.status_code == rule.ok, (response.status_code, response.text[:400])
        assert rule.says in response.text, response.text[:400]
        return
    assert response.status_code == 403, (response.status_code, response.text[:400])
    if route[1].startswith("/api/"):
        assert response.json()["error"]["code"] == "forbidden"
    else:
        assert "<h1>Not allowed</h1>" in response.text and "Only " in response.text, response.text[:600]


@pytest.mark.parametrize("route", sorted(r for r in STAFF_ROUTES if r[1].startswith("/api/")), ids=" ".join)
def test_a_staff_token_without_the_staff_scopes_is_refused(route: tuple[str, str], world: World) -> None:
    """The instructor's own token, made with a student's scopes (submit, read), is refused every
    staff API route: the token's scopes limit its owner's role. A route about one student's
    work (another's, to this token, which does not read all) answers as for anything it may not
    read: 404, as if absent."""
    response = STAFF_ROUTES[route].send(world, "narrow")
    if "{login}" in route[1] or "{request_id}" in route[1]:
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found", response.text
    else:
        assert response.status_code == 403 and "lacks the" in response.json()["error"]["message"], response.text


def test_staff_of_a_course_without_assignments_land_on_the_course_list(settings: Settings,
                                                                      sessions: sessionmaker[Session]) -> None:
    """A course just made holds no assignment: its TA's start page (the gradebook) sends them to
    the course list, not to a missing assignment's 404."""
    tag = uuid.uuid4().hex[:6]
    with session_scope(sessions) as session:
        course = create_course(session, f"empty-{tag}", "Empty")
        ta = get_or_create_user(session, f"empty-ta-{tag}", Role.student, [])
        enroll(session, ta, course, CourseRole.ta)
        set_password(ta, PASSWORD, SUITE_ARGON2)
    browser = Browser(settings, f"empty-ta-{tag}")
    landed = browser.client.get("/", follow_redirects=True)
    assert landed.url.path == "/courses" and f'href="/courses/empty-{tag}"' in landed.text


def test_a_ta_is_refused_until_the_instructor_grants_the_power(world: World) -> None:
    """By default a TA may not use the grading controls, the schedule or extensions (403, saying
    that an instructor may grant it); once the course's instructor ticks those powers on the
    course page, the TA uses them (the settings page showing only their forms), and unticked
    they are refused again."""
    ta, slug = "ta", world.slug
    for path in (f"/assignments/{slug}/grading", f"/assignments/{slug}/settings"):
        refused = world.web(ta).get(path)
        assert refused.status_code == 403, refused.text[:300]
        assert "An instructor of the course may grant its TAs this on the course&#39;s page." in refused.text
    refused = world.post(ta, f"/assignments/{slug}/extensions", student=world.logins["student"], extra="1d")
    assert refused.status_code == 403 and "grant or remove extensions" in refused.text

    granted = world.post("instructor", f"/courses/{world.course}/ta-powers", extend="on", queue="on", schedule="on")
    assert granted.status_code == 303
    course_page = world.web("instructor").get(granted.headers["location"]).text
    assert "TA powers saved." in course_page and 'id="ta-queue" name="queue" checked' in course_page
    assert 'aria-label="Grading controls of ' + slug in world.web(ta).get(f"/courses/{world.course}").text
    assert world.web(ta).get(f"/assignments/{slug}/grading").status_code == 200
    settings_page = world.web(ta).get(f"/assignments/{slug}/settings").text
    assert 'id="schedule-form"' in settings_page and 'id="extension-form"' in settings_page
    assert 'id="storage-form"' not in settings_page and 'id="runs-form"' not in settings_page  # still instructors'
    extended = world.post(ta, f"/assignments/{slug}/extensions", student=world.logins["student"], extra="1d")
    assert extended.status_code == 303
    assert world.logins["student"] in world.web(ta).get(f"/assignments/{slug}/settings").text
    removed = world.post(ta, f"/assignments/{slug}/extensions/{world.logins['student']}/remove", confirm="remove")
    assert removed.status_code == 303
    assert world.post(ta, f"/assignments/{slug}/quota", quota_runs="3").status_code == 403  # never a TA's

    assert world.post("instructor", f"/courses/{world.course}/ta-powers").status_code == 303  # none ticked
    assert world.web(ta).get(f"/assignments/{slug}/grading").status_code == 403
