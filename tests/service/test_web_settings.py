"""Session-authenticated web routes on PostgreSQL: the instructor's gradebook exports and the
API-token settings page (list, create once, revoke; CSRF; another user's token reads as absent)."""
from __future__ import annotations

import csv
import io
import re
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import ProblemResult, Role, RunState, utcnow
from grader.passwords import set_password
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth
from worker.rubric import load_rubric

PASSWORD = "correct horse battery"
CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')


class Browser:
    """A TestClient with its own cookie jar, logged in through the login form."""

    def __init__(self, settings: Settings, username: str) -> None:
        self.client = TestClient(create_app(settings))
        page = self.client.get("/login")
        response = self.client.post("/login", data={"csrf_token": self.csrf(page.text), "username": username,
                                                     "password": PASSWORD}, follow_redirects=False)
        assert response.status_code == 303, response.text

    @staticmethod
    def csrf(html: str) -> str:
        found = CSRF_INPUT.search(html)
        assert found, "no CSRF field on the page"
        return found.group(1)

    def page_csrf(self, path: str = "/") -> str:
        return self.csrf(self.client.get(path).text)


@pytest.fixture(scope="module")
def people(sessions: sessionmaker[Session]) -> dict[str, str]:
    tag = uuid.uuid4().hex[:6]
    names = {"student": f"wstu-{tag}", "other": f"woth-{tag}", "prof": f"wprof-{tag}"}
    roles = {"student": Role.student, "other": Role.student, "prof": Role.instructor}
    with session_scope(sessions) as session:
        for key, name in names.items():
            set_password(get_or_create_user(session, name, roles[key]), PASSWORD, SUITE_ARGON2)
        # One scored run for the student, so the export has a filled row.
        student = get_or_create_user(session, names["student"], Role.student)
        blob = StoredBlob(sha256="ab" * 32, size=10)
        _sub, run = record_submission(session, student, get_assignment(session, "hw4"), "hw.zip", blob)
        run.state, run.score, run.finished_at = RunState.scored, 42.0, utcnow()
        run.results.append(ProblemResult(problem_id="1.1", title="Softmax forward", status="passed",
                                         points=12.0, max_points=12.0))
    return names


@pytest.fixture(scope="module")
def prof(settings: Settings, people: dict[str, str]) -> Iterator[Browser]:
    yield Browser(settings, people["prof"])


@pytest.fixture(scope="module")
def student(settings: Settings, people: dict[str, str]) -> Iterator[Browser]:
    yield Browser(settings, people["student"])


@pytest.fixture(scope="module")
def other(settings: Settings, people: dict[str, str]) -> Iterator[Browser]:
    yield Browser(settings, people["other"])


# ---- gradebook exports --------------------------------------------------------------------


def test_gradebook_page_links_to_exports(prof: Browser) -> None:
    html = prof.client.get("/gradebook").text
    assert 'href="/gradebook.csv?assignment=hw4&amp;policy=latest"' in html
    assert 'href="/gradebook-detailed.csv?assignment=hw4&amp;policy=latest"' in html
    assert 'href="/gradebook.json?assignment=hw4&amp;policy=latest"' in html


def test_instructor_gets_csv_and_json(prof: Browser, people: dict[str, str]) -> None:
    response = prof.client.get("/gradebook.csv", params={"policy": "best"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert "hw4-gradebook-best.csv" in response.headers["content-disposition"]
    rows = list(csv.reader(io.StringIO(response.text)))
    title = load_rubric("hw4").title
    assert rows[:2] == [["Student", "ID", "SIS User ID", "SIS Login ID", "Section", title],
                        ["    Points Possible", "", "", "", "", "100"]] and len(rows) > 3
    by_login = {r[3]: r for r in rows[2:]}
    assert by_login[people["student"]] == [people["student"], "", "", people["student"], "", "42"]
    assert by_login[people["other"]][5] == ""  # no scored run: blank leaves Canvas unchanged
    detailed = prof.client.get("/gradebook-detailed.csv", params={"policy": "best"})
    assert "hw4-gradebook-detailed-best.csv" in detailed.headers["content-disposition"]
    assert next(csv.reader(io.StringIO(detailed.text)))[:3] == ["Student", "SIS Login ID", f"{title} final (100)"]
    body = prof.client.get("/gradebook.json").json()
    row = next(r for r in body["rows"] if r["user"] == people["student"])
    assert body["policy"] == "latest" and row["total"] == 42.0 and row["problems"]["1.1"] == 12.0


def test_student_and_stranger_get_no_export(settings: Settings, student: Browser) -> None:
    for path in ("/gradebook.csv", "/gradebook-detailed.csv", "/gradebook.json"):
        assert student.client.get(path).status_code == 403
        anonymous = TestClient(create_app(settings)).get(path, follow_redirects=False)
        assert anonymous.status_code == 303 and anonymous.headers["location"] == f"/login?next=%2F{path[1:]}"


# ---- API token settings -------------------------------------------------------------------

NEW_TOKEN = re.compile(r'id="token-value" type="text" readonly size="56" value="(kg_[^"]+)"')


def _create(browser: Browser, name: str, **extra: object) -> tuple[int, str | None, str]:
    data = {"csrf_token": browser.page_csrf("/settings/tokens"), "name": name, **extra}
    response = browser.client.post("/settings/tokens", data=data)
    found = NEW_TOKEN.search(response.text)
    return response.status_code, found.group(1) if found else None, response.text


def _token_id(browser: Browser, name: str) -> int:
    html = browser.client.get("/settings/tokens").text
    found = re.search(rf'<form method="post" action="/settings/tokens/(\d+)/revoke">\s*'
                      rf'<input type="hidden" name="csrf_token" value="[^"]+">\s*'
                      rf'<button type="submit" aria-label="Revoke token {re.escape(name)}">', html)
    assert found, f"no revoke form for {name}"
    return int(found.group(1))


def test_created_token_is_shown_once_and_works(student: Browser, people: dict[str, str]) -> None:
    code, token, html = _create(student, "laptop", scope=["read:all", "regrade"])  # ignored for students
    assert code == 201 and token is not None
    me = student.client.get("/api/v1/submissions", headers=auth(token))
    assert me.status_code == 200 and {i["user"] for i in me.json()["items"]} == {people["student"]}
    assert student.client.get("/api/v1/assignments/hw4/gradebook", headers=auth(token)).status_code == 403
    listing = student.client.get("/settings/tokens").text
    assert token not in listing and "laptop" in listing and "submit read" in listing
    assert re.search(r"laptop</th>\s*<td>submit read</td>\s*<td>[^<]+</td>\s*<td>20", listing)  # last used


def test_instructor_chooses_scopes(prof: Browser) -> None:
    code, token, _ = _create(prof, "ci-readonly", scope=["read", "read:all"])
    assert code == 201 and token is not None
    assert prof.client.get("/api/v1/assignments/hw4/gradebook", headers=auth(token)).status_code == 200
    regrade = prof.client.post("/api/v1/assignments/hw4/regrade", headers=auth(token), json={"submissions": []})
    assert regrade.status_code == 403
    assert _create(prof, "none-chosen")[0] == 400
    assert _create(prof, "too-much", scope=["read", "root"])[0] == 400


def test_revoke_makes_the_api_answer_401(student: Browser) -> None:
    code, token, _ = _create(student, "to-revoke")
    assert code == 201 and token is not None
    assert student.client.get("/api/v1/submissions", headers=auth(token)).status_code == 200
    token_id = _token_id(student, "to-revoke")
    response = student.client.post(f"/settings/tokens/{token_id}/revoke",
                                   data={"csrf_token": student.page_csrf("/settings/tokens")}, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/settings/tokens"
    assert student.client.get("/api/v1/submissions", headers=auth(token)).status_code == 401
    listing = student.client.get("/settings/tokens").text
    assert 'aria-label="Revoke token to-revoke"' not in listing


def test_cannot_revoke_another_users_token(student: Browser, other: Browser, prof: Browser) -> None:
    code, token, _ = _create(student, "mine-only")
    assert code == 201 and token is not None
    token_id = _token_id(student, "mine-only")
    for intruder in (other, prof):  # not even an instructor
        response = intruder.client.post(f"/settings/tokens/{token_id}/revoke",
                                        data={"csrf_token": intruder.page_csrf("/settings/tokens")})
        assert response.status_code == 404
    assert student.client.get("/api/v1/submissions", headers=auth(token)).status_code == 200
    assert "mine-only" not in other.client.get("/settings/tokens").text


def test_posts_without_csrf_are_refused(student: Browser) -> None:
    before = student.client.get("/settings/tokens").text.count("<tr>")
    for data in ({"name": "no-csrf"}, {"name": "bad-csrf", "csrf_token": "forged"}):
        assert student.client.post("/settings/tokens", data=data).status_code == 403
    assert student.client.get("/settings/tokens").text.count("<tr>") == before
    code, token, _ = _create(student, "keep")
    token_id = _token_id(student, "keep")
    assert student.client.post(f"/settings/tokens/{token_id}/revoke", data={}).status_code == 403
    assert student.client.get("/api/v1/submissions", headers=auth(token or "")).status_code == 200


def test_token_page_needs_login(settings: Settings) -> None:
    anonymous = TestClient(create_app(settings))
    assert anonymous.get("/settings/tokens", follow_redirects=False).headers["location"] == "/login?next=%2Fsettings%2Ftokens"
    assert anonymous.post("/settings/tokens", data={"name": "x"}, follow_redirects=False).status_code == 303
