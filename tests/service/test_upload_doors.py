"""Every upload door runs the same use case (grader.accepting.accept_upload): the REST API, the
token form and the logged-in form refuse a file that is not a zip with the same 415 and the
same words, before anything is recorded, and keep none of its bytes."""
from __future__ import annotations

import gzip
import hashlib
import html
import uuid

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.credentials import issue_token, set_password
from grader.db import session_scope
from grader.models import Role, Submission, User
from grader.service import get_or_create_user
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from tests.service.conftest import auth
from tests.service.test_security import PASSWORD, csrf_of, login

NOT_A_ZIP_WORDS = ("“hw.tar.gz” is a gzip file (a .tar.gz, say), not a zip file. Zip your assignment folder "
                   "(for example: zip -r llmsys_hw4.zip llmsys_hw4) and upload the .zip file.")


def test_a_non_zip_is_refused_alike_through_every_door(settings: Settings, sessions: sessionmaker[Session]) -> None:
    name = f"doors-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        user = get_or_create_user(session, name, Role.student)
        set_password(user, PASSWORD)
        token = issue_token(session, user, "doors")
    data = gzip.compress(f"a tarball by mistake {name}".encode())
    upload = {"file": ("hw.tar.gz", data, "application/gzip")}
    with TestClient(create_app(settings)) as api, TestClient(create_app(settings)) as web:
        login(settings, name, web)
        answers = {
            "api": api.post("/api/v1/submissions", headers=auth(token), files=upload),
            "token form": api.post("/upload", data={"token": token}, files=upload),
            "logged-in form": web.post("/submit", data={"csrf_token": csrf_of(web.get("/").text)}, files=upload,
                                       follow_redirects=False),
        }
    assert {door: a.status_code for door, a in answers.items()} == dict.fromkeys(answers, 415)
    assert answers["api"].json()["error"] == {"code": "not_a_zip", "message": NOT_A_ZIP_WORDS}
    for door in ("token form", "logged-in form"):
        assert NOT_A_ZIP_WORDS in html.unescape(answers[door].text), (door, answers[door].text[:2000])
    with session_scope(sessions) as session:
        stored = session.scalar(select(func.count(Submission.id)).join(User, Submission.user_id == User.id)
                                .where(User.username == name))
    assert stored == 0
    assert not BlobStore(settings.blob_dir).exists(hashlib.sha256(data).hexdigest())
