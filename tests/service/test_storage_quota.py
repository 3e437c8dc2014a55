"""Storage bounded per student (issue 54: one student could keep 30 uploads of 50 MiB every 5
minutes, forever): an upload that would take what a student keeps in an assignment past the
quota is refused with 413 through every door (API, the logged-in form, the token form) and
keeps nothing, no blob and no submission; the same bytes again count once; staff are exempt;
the upload page says how much is used; an instructor sets an assignment's own quota on its
settings page."""
from __future__ import annotations

import hashlib
import uuid

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role, Submission
from grader.passwords import set_password
from grader.service import get_assignment
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from tests.fixtures.passwords import SUITE_ARGON2
from tests.fixtures.zips import random_zip
from tests.service.conftest import auth
from tests.service.test_web_settings import PASSWORD, Browser

KiB = 1024
QUOTA = 1024 * KiB


@pytest.fixture
def quota_settings(settings: Settings) -> Settings:
    """1 MiB per student, no rate limit and no re-send window (each upload is counted alone)."""
    return settings.model_copy(update={"storage_quota_bytes": QUOTA, "upload_rate_limit": 0,
                                       "upload_dedup_window_s": 0})


@pytest.fixture
def student(sessions: sessionmaker[Session]) -> tuple[str, str]:
    """A new student of hw4's course: (login, API token)."""
    name = f"quota-{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        user = get_or_create_user(session, name, Role.student)
        set_password(user, PASSWORD, SUITE_ARGON2)
        return name, issue_token(session, user, "quota")


def _count(sessions: sessionmaker[Session], name: str) -> int:
    with session_scope(sessions) as session:
        return session.scalar(select(func.count()).select_from(Submission).join(Submission.user)
                              .where(Submission.user.has(username=name))) or 0


def _upload(client: TestClient, token: str, archive: bytes) -> tuple[int, dict[str, str]]:
    answer = client.post("/api/v1/submissions", headers=auth(token), files={"file": ("hw4.zip", archive)})
    return answer.status_code, answer.json().get("error", {})


def test_the_quota_refuses_with_413_and_keeps_nothing(quota_settings: Settings, sessions: sessionmaker[Session],
                                                      student: tuple[str, str]) -> None:
    name, token = student
    blobs = BlobStore(quota_settings.blob_dir)
    first, second = random_zip(600 * KiB), random_zip(600 * KiB)
    with TestClient(create_app(quota_settings)) as client:
        assert _upload(client, token, first)[0] == 201
        status, error = _upload(client, token, second)
        assert status == 413 and error["code"] == "storage_quota_exceeded", error
        assert error["message"].startswith("This upload (0.6 MiB) would bring what you keep in this assignment to "
                                           "1.2 MiB, over the 1 MiB each student may keep (0.6 MiB of 1 MiB used now), "
                                           "so nothing was stored.")
        assert not blobs.exists(hashlib.sha256(second).hexdigest()) and _count(sessions, name) == 1
        # the same bytes again are stored once, so they count once: taken, the use unchanged
        assert _upload(client, token, first)[0] == 201 and _count(sessions, name) == 2
        page = Browser(quota_settings, name).client.get("/").text
        assert 'id="storage-hw4">Storage: 0.6 MiB of 1 MiB used.' in page


def test_both_web_forms_refuse_past_the_quota(quota_settings: Settings, sessions: sessionmaker[Session],
                                              student: tuple[str, str]) -> None:
    name, token = student
    browser = Browser(quota_settings, name)
    assert _upload(browser.client, token, random_zip(900 * KiB))[0] == 201
    over = random_zip(200 * KiB)
    form = browser.client.post("/submit", data={"csrf_token": browser.page_csrf("/")},
                               files={"file": ("hw4.zip", over)})
    assert form.status_code == 413 and "over the 1 MiB each student may keep" in form.text
    with TestClient(create_app(quota_settings)) as client:
        tokened = client.post("/upload", data={"token": token}, files={"file": ("hw4.zip", over)})
    assert tokened.status_code == 413 and "so nothing was stored" in tokened.text
    assert _count(sessions, name) == 1
    assert not BlobStore(quota_settings.blob_dir).exists(hashlib.sha256(over).hexdigest())


def test_staff_are_exempt(quota_settings: Settings, sessions: sessionmaker[Session]) -> None:
    with session_scope(sessions) as session:
        token = issue_token(session, get_or_create_user(session, f"qprof-{uuid.uuid4().hex[:6]}", Role.instructor), "q")
    with TestClient(create_app(quota_settings)) as client:
        assert [_upload(client, token, random_zip(600 * KiB))[0] for _ in range(2)] == [201, 201]


def test_an_instructor_sets_the_assignments_quota(quota_settings: Settings, sessions: sessionmaker[Session],
                                                  student: tuple[str, str]) -> None:
    name, token = student
    prof_name = f"qprof-{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        set_password(get_or_create_user(session, prof_name, Role.instructor), PASSWORD, SUITE_ARGON2)
    prof = Browser(quota_settings, prof_name)
    page = prof.client.get("/assignments/hw4/settings").text
    assert 'id="storage-current">Now: 1 MiB per student (the service&#39;s default).' in page
    refused = prof.client.post("/assignments/hw4/storage", data={"csrf_token": prof.csrf(page), "quota_mib": "lots"})
    assert refused.status_code == 400 and "“lots” is not a size in MiB" in refused.text
    assert 'value="lots" aria-invalid="true"' in refused.text
    try:
        saved = prof.client.post("/assignments/hw4/storage", data={"csrf_token": prof.csrf(page), "quota_mib": "2"})
        assert 'id="storage-current">Now: 2 MiB per student.' in saved.text
        with TestClient(create_app(quota_settings)) as client:
            assert [_upload(client, token, random_zip(600 * KiB))[0] for _ in range(3)] == [201, 201, 201]
            assert _upload(client, token, random_zip(600 * KiB))[0] == 413
    finally:
        with session_scope(sessions) as session:
            get_assignment(session, "hw4").storage_quota_bytes = None
