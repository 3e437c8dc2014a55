"""Ids out of range and control characters, on every route (issue 54: ids past 2^63 were a 500 on
the embedded default, SQLite refusing to bind them; a NUL in a regrade request's text reached
PostgreSQL, which cannot store one). The API's routes are also fuzzed from their OpenAPI
description (test_security_schema.py); these tests reach the HTML form routes it does not
describe, and every integer path parameter the app declares, found by walking its routes (a
route added later is covered without a line here)."""
from __future__ import annotations

import hashlib
import re
import uuid
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.db import make_engine, make_session_factory, session_scope
from grader.models import RegradeRequest, Role, RunState, Submission, utcnow
from grader.passwords import set_password
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth, init_with_course
from tests.service.test_web_settings import PASSWORD, Browser

OUT_OF_RANGE = ["9223372036854775808", "18446744073709551616", "9" * 40, "0", "-1"]
HTML = {"accept": "text/html"}


class Site:
    """An app on its own database, with a student's scored run and an instructor of its course."""

    def __init__(self, settings: Settings) -> None:
        init_with_course(settings)
        self.settings, tag = settings, uuid.uuid4().hex[:6]
        self.sessions = make_session_factory(make_engine(settings))
        self.student, self.prof = f"bstu-{tag}", f"bprof-{tag}"
        with session_scope(self.sessions) as session:
            student = get_or_create_user(session, self.student, Role.student)
            prof = get_or_create_user(session, self.prof, Role.instructor)
            for user in (student, prof):
                set_password(user, PASSWORD, SUITE_ARGON2)
            blob = BlobStore(settings.blob_dir).put_bytes(b"PK\x05\x06" + bytes(18))
            _submission, run = record_submission(session, student, get_assignment(session, "hw4"), "hw4.zip", blob)
            run.state, run.score, run.finished_at = RunState.scored, 50.0, utcnow()
            session.flush()
            self.run_id = run.id
            self.student_token = issue_token(session, student, "bounds")
            self.prof_token = issue_token(session, prof, "bounds")


@pytest.fixture(scope="module")
def sqlite_site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    """The embedded default's database (SQLite), where an id past 2^63 was a 500."""
    return Site(Settings(_env_file=None, data_dir=tmp_path_factory.mktemp("bounds")))  # type: ignore[call-arg]


@pytest.fixture(scope="module")
def pg_site(settings: Settings) -> Site:
    """The suite's PostgreSQL database, which refuses a NUL in text."""
    return Site(settings)


def integer_path_routes(app: FastAPI) -> list[tuple[str, str, list[str]]]:
    """(method, path, the integer path parameters) of every route with one."""
    found = []
    for context in iter_route_contexts(app.routes):
        route = context.original_route
        if not isinstance(route, APIRoute):
            continue
        params = [p for dep in (route.dependant, *route.dependant.dependencies) for p in dep.path_params
                  if p.field_info.annotation is int]
        if params:
            found += [(method, context.path_format, sorted({p.name for p in params})) for method in route.methods]
    return found


def test_every_integer_path_id_out_of_range_is_not_found(sqlite_site: Site) -> None:
    browser = Browser(sqlite_site.settings, sqlite_site.prof)
    routes = integer_path_routes(browser.client.app)
    assert len(routes) >= 20, routes  # the walk found the app's routes (API and pages)
    token = browser.page_csrf("/")
    names = {"slug": "hw4", "course": "llmsys", "username": sqlite_site.student, "login": sqlite_site.student}
    for method, path, ints in routes:
        for value in OUT_OF_RANGE:
            url = re.sub(r"\{(\w+)\}", lambda m, v=value, i=ints: v if m.group(1) in i else names.get(m.group(1), "x"),
                         path)
            for headers in [auth(sqlite_site.prof_token)] if url.startswith("/api/") else [{}, HTML]:
                answer = browser.client.request(method, url, headers=headers,
                                                data={"csrf_token": token} if method == "POST" else None)
                assert answer.status_code == 404, (method, url, answer.status_code, answer.text[:300])


def test_api_ids_out_of_range_are_not_found(sqlite_site: Site) -> None:
    """The API's answer says why; a JSON body's id and a list of ids are ids too."""
    with TestClient(create_app(sqlite_site.settings)) as client:
        headers = {**auth(sqlite_site.prof_token), "content-type": "application/json"}
        for value in OUT_OF_RANGE:
            for path in (f"/api/v1/runs/{value}", f"/api/v1/submissions/{value}", f"/api/v1/submissions/{value}/runs",
                         f"/api/v1/runs/{value}/comments", f"/api/v1/runs/{value}/regrade-requests"):
                answer = client.get(path, headers=headers)
                assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found", (path, answer.text)
            counted = client.put(f"/api/v1/assignments/hw4/students/{sqlite_site.student}/counted-run",
                                 headers=headers, content=f'{{"run_id": {value}}}')
            assert counted.status_code == 404, counted.text
            bulk = client.post("/api/v1/assignments/hw4/regrade", headers=headers,
                               content=f'{{"submissions": [{sqlite_site.run_id}, {value}]}}')
            assert bulk.status_code == 404, bulk.text
        assert "ids run from 1 to 2^63-1" in client.get("/api/v1/runs/9223372036854775808", headers=headers).text


def test_form_ids_out_of_range_name_nothing(sqlite_site: Site) -> None:
    """Ids a form sends in its fields: the student's choice of the run that counts, staff's
    choice for a student, the gradebook's ticked submissions."""
    student = Browser(sqlite_site.settings, sqlite_site.student)
    prof = Browser(sqlite_site.settings, sqlite_site.prof)
    for value in OUT_OF_RANGE + ["²"]:
        chosen = student.client.post("/submissions/counted", headers=HTML,
                                     data={"csrf_token": student.page_csrf("/submissions"), "run_id": value})
        assert chosen.status_code == 404, chosen.text[:300]
        staff = prof.client.post(f"/assignments/hw4/students/{sqlite_site.student}/counted", follow_redirects=False,
                                 data={"csrf_token": prof.page_csrf("/"), "run_id": value})
        assert staff.status_code == 303 and "error=unscored" in staff.headers["location"]
        bulk = prof.client.get("/gradebook/regrade", headers=HTML,
                               params={"assignment": "hw4", "which": "selected", "submission": value})
        assert bulk.status_code == 400 and "Tick" in bulk.text, bulk.text[:300]


def _requests(sessions: sessionmaker[Session]) -> int:
    with session_scope(sessions) as session:
        return session.scalar(select(func.count()).select_from(RegradeRequest)) or 0


def test_control_characters_in_forms_are_refused_and_change_nothing(pg_site: Site) -> None:
    student = Browser(pg_site.settings, pg_site.student)
    before = _requests(pg_site.sessions)
    for bad in ("\x00", "\x07", "\x0b", "\x1b[2J", "\x7f", "\x85"):
        asked = student.client.post(f"/runs/{pg_site.run_id}/regrade-request", headers=HTML,
                                    data={"csrf_token": student.page_csrf(f"/runs/{pg_site.run_id}"),
                                          "reason": f"please look at case 3{bad}"})
        assert asked.status_code == 422, asked.text[:300]
        code = f"U+{ord(bad[0]):04X}"
        assert f"The field “reason” holds the control character {code}" in asked.text and "Nothing was changed" in asked.text
    assert _requests(pg_site.sessions) == before
    # tabs and line breaks (a text area sends CR LF) are text
    fine = student.client.post(f"/runs/{pg_site.run_id}/regrade-request", follow_redirects=False,
                               data={"csrf_token": student.page_csrf(f"/runs/{pg_site.run_id}"),
                                     "reason": "case 3:\r\n\tits max error is 1e-3"})
    assert fine.status_code == 303 and _requests(pg_site.sessions) == before + 1
    login = TestClient(create_app(pg_site.settings)).post("/login", headers=HTML,
                                                          data={"username": "a\x00b", "password": PASSWORD})
    assert login.status_code == 422 and "The field “username” holds the control character U+0000" in login.text
    prof = Browser(pg_site.settings, pg_site.prof)
    base = prof.client.post("/assignments/hw4/similarity/base", headers=HTML,  # a multipart form
                            data={"csrf_token": prof.page_csrf("/assignments/hw4/settings"), "git": "git:x\x00@main"},
                            files={"starter": ("", b"", "application/octet-stream")})
    assert base.status_code == 422 and "“git” holds the control character U+0000" in base.text


def test_control_characters_in_the_address_and_the_api_are_refused(pg_site: Site) -> None:
    with TestClient(create_app(pg_site.settings)) as client:
        query = client.get("/api/v1/submissions", params={"user": "a\tb"}, headers=auth(pg_site.student_token))
        assert query.status_code == 422 and query.json()["error"] == {
            "code": "control_character",
            "message": "The address's query field “user” holds the control character U+0009 (none is accepted there): "
                       "remove it and send again."}
        assert client.get("/login?back=%00", headers=HTML).status_code == 422
        assert client.get("/runs/1%00", headers=HTML).status_code == 422
        asked = client.post(f"/api/v1/runs/{pg_site.run_id}/regrade-requests", headers=auth(pg_site.student_token),
                            json={"reason": "look\u0000again"})
        assert asked.status_code == 422 and asked.json()["error"]["code"] == "control_character"
        assert "“reason”" in asked.json()["error"]["message"]
        listed = client.post("/api/v1/assignments/hw4/regrade", headers=auth(pg_site.prof_token),
                             json={"submissions": ["a\u0001"]})
        assert listed.status_code == 422 and "“submissions[0]”" in listed.json()["error"]["message"]


def test_an_upload_with_a_control_character_in_a_field_stores_nothing(pg_site: Site, tmp_path: Path) -> None:
    blobs = BlobStore(pg_site.settings.blob_dir)
    archive = b"PK\x03\x04" + uuid.uuid4().bytes + b"PK\x05\x06" + bytes(18)
    with session_scope(pg_site.sessions) as session:
        before = session.scalar(select(func.count()).select_from(Submission))
    with TestClient(create_app(pg_site.settings)) as client:
        api = client.post("/api/v1/submissions", headers=auth(pg_site.student_token), data={"assignment": "hw4\x00"},
                          files={"file": ("hw4.zip", archive, "application/zip")})
        assert api.status_code == 422 and api.json()["error"]["code"] == "control_character", api.text
        form = client.post("/upload", data={"token": pg_site.student_token, "assignment": "hw4\x1b"},
                           files={"file": ("hw4.zip", archive, "application/zip")})
        assert form.status_code == 422 and "U+001B" in form.text
    with session_scope(pg_site.sessions) as session:
        assert session.scalar(select(func.count()).select_from(Submission)) == before
    assert not blobs.exists(hashlib.sha256(archive).hexdigest())
