"""A student can never see or act on another student's submission or run, through any page or
any API route (the owner and an instructor can: the same requests are the control)."""
from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role, Run, RunState, utcnow
from grader.passwords import set_password
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth
from tests.service.test_web_settings import PASSWORD, Browser


@dataclass
class World:
    sub_id: int
    run_id: int
    tokens: dict[str, str]
    logins: dict[str, str]


@pytest.fixture(scope="module")
def world(sessions: sessionmaker[Session]) -> World:
    tag = uuid.uuid4().hex[:6]
    logins = {"owner": f"iso-own-{tag}", "other": f"iso-oth-{tag}", "prof": f"iso-prof-{tag}"}
    roles = {"owner": Role.student, "other": Role.student, "prof": Role.instructor}
    tokens = {}
    with session_scope(sessions) as session:
        for key, login in logins.items():
            user = get_or_create_user(session, login, roles[key])
            set_password(user, PASSWORD, SUITE_ARGON2)
            tokens[key] = issue_token(session, user, "iso")
        owner = get_or_create_user(session, logins["owner"], Role.student)
        sub, run = record_submission(session, owner, get_assignment(session, "hw4"), "mine.zip",
                                     StoredBlob(sha256="9" * 64, size=5))
        run.state, run.score, run.finished_at, run.message = RunState.scored, 77.0, utcnow(), "owner's secret result"
        session.flush()
        return World(sub.id, run.id, tokens, logins)


def _run_count(sessions: sessionmaker[Session], sub_id: int) -> int:
    with session_scope(sessions) as session:
        return int(session.scalar(select(func.count(Run.id)).where(Run.submission_id == sub_id)) or 0)


def test_pages(settings: Settings, sessions: sessionmaker[Session], world: World) -> None:
    owner, other, prof = (Browser(settings, world.logins[k]) for k in ("owner", "other", "prof"))
    reads = [f"/runs/{world.run_id}", f"/runs/{world.run_id}/status"]
    for path in reads:
        assert owner.client.get(path).status_code == 200 and prof.client.get(path).status_code == 200
        response = other.client.get(path)
        assert response.status_code == 404 and "owner's secret result" not in response.text
    assert "mine.zip" in owner.client.get("/submissions").text
    assert "mine.zip" not in other.client.get("/submissions").text
    for path in ("/gradebook", "/gradebook.csv", "/gradebook-detailed.csv", "/gradebook.json",
                 "/roster"):  # a student of the course
        assert other.client.get(path).status_code == 403, path
        assert prof.client.get(path).status_code == 200, path
    before = _run_count(sessions, world.sub_id)
    csrf = other.page_csrf("/")
    assert other.client.post(f"/submissions/{world.sub_id}/regrade", data={"csrf_token": csrf}).status_code == 404
    assert other.client.post("/gradebook/regrade", data={"csrf_token": csrf, "which": "selected",
                                                          "submission": str(world.sub_id)}).status_code == 403
    assert owner.client.post(f"/submissions/{world.sub_id}/regrade",  # not even one's own: staff only
                             data={"csrf_token": owner.page_csrf("/")}).status_code == 403
    assert _run_count(sessions, world.sub_id) == before


def test_api(client: TestClient, sessions: sessionmaker[Session], world: World) -> None:
    http = client
    reads = [f"/api/v1/runs/{world.run_id}", f"/api/v1/submissions/{world.sub_id}",
             f"/api/v1/submissions/{world.sub_id}/runs"]
    for path in reads:
        assert http.get(path, headers=auth(world.tokens["owner"])).status_code == 200
        assert http.get(path, headers=auth(world.tokens["prof"])).status_code == 200
        response = http.get(path, headers=auth(world.tokens["other"]))
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found", path
        assert "owner's secret result" not in response.text
    listing = http.get("/api/v1/submissions", headers=auth(world.tokens["other"]), params={"page_size": 100}).json()
    assert world.sub_id not in [item["id"] for item in listing["items"]]
    assert http.get("/api/v1/submissions", headers=auth(world.tokens["other"]),
                    params={"user": world.logins["owner"]}).status_code == 403
    before = _run_count(sessions, world.sub_id)
    assert http.post(f"/api/v1/submissions/{world.sub_id}/regrade",
                     headers=auth(world.tokens["other"])).status_code == 403
    assert http.post("/api/v1/assignments/hw4/regrade", headers=auth(world.tokens["other"]),
                     json={"submissions": [world.sub_id]}).status_code == 403
    for path in ("/api/v1/assignments/hw4/gradebook", "/api/v1/assignments/hw4/gradebook.csv",
                 "/api/v1/assignments/hw4/gradebook-detailed.csv"):
        assert http.get(path, headers=auth(world.tokens["other"])).status_code == 403
    assert _run_count(sessions, world.sub_id) == before
