"""Every upload door runs the same use case (grader.accepting.accept_upload): the REST API, the
token form and the logged-in form refuse a file that is not a zip (415), a zip cut short (422,
"damaged or incomplete", never "not a zip") or a zip that holds no file (422) with the same
status and the same words, before anything is recorded, and keep none of its bytes."""
from __future__ import annotations

import gzip
import hashlib
import html
import io
import uuid
import zipfile

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role, Submission, User
from grader.passwords import set_password
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import auth
from tests.service.test_security import PASSWORD, csrf_of, login
from worker.rubric import load_rubric

HINT = "Zip your assignment folder (for example: zip -r llmsys_hw4.zip llmsys_hw4) and upload the .zip file."
NOT_A_ZIP_WORDS = f"“hw.tar.gz” is a gzip file (a .tar.gz, say), not a zip file. {HINT}"
KIT = load_rubric("hw4").starter_dir
EMPTY_WORDS = f"“hw.zip” is an empty zip: it holds no files, so nothing was stored. {HINT}"
DAMAGED_WORDS = ("“hw.zip”: the zip is damaged or incomplete: upload it again (it starts like a zip file, but "
                 "the list of its files, kept at its end, is missing or unreadable: the file was cut short, by an "
                 "interrupted upload, copy or download or before zipping finished). If it happens again, zip the "
                 "folder anew (`zip -r`).")


def _folders_only(tag: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("llmsys_hw4/", "")
        zf.writestr(f"llmsys_hw4/src-{tag}/", "")
    return buf.getvalue()


def _half_of_a_real_zip(tag: str) -> bytes:
    """The first half of the bytes of a real submission's zip (the reference kit, zipped as a
    student would): an upload cut short."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(KIT.rglob("*")):
            if path.is_file() and path.suffix != ".so" and "__pycache__" not in path.parts:
                zf.write(path, f"llmsys_hw4/{path.relative_to(KIT).as_posix()}")
        zf.writestr("llmsys_hw4/NOTES.txt", tag)
    whole = buf.getvalue()
    return whole[:len(whole) // 2]


REFUSED = {  # what is sent (made from a tag of its own), its name, the status, code and words
    "not a zip": (lambda tag: gzip.compress(f"a tarball by mistake {tag}".encode()), "hw.tar.gz", 415, "not_a_zip",
                  NOT_A_ZIP_WORDS),
    "an empty zip": (lambda tag: b"PK\x05\x06" + bytes(16) + len(tag).to_bytes(2, "little") + tag.encode(),
                     "hw.zip", 422, "empty_zip", EMPTY_WORDS),
    "a zip of folders": (_folders_only, "hw.zip", 422, "empty_zip", EMPTY_WORDS),
    "a zip cut short": (_half_of_a_real_zip, "hw.zip", 422, "damaged_zip", DAMAGED_WORDS),
}


@pytest.mark.parametrize("case", REFUSED)
def test_bad_input_is_refused_alike_through_every_door(settings: Settings, sessions: sessionmaker[Session],
                                                       case: str) -> None:
    make, filename, status, code, words = REFUSED[case]
    name = f"doors-{uuid.uuid4().hex[:8]}"
    with session_scope(sessions) as session:
        user = get_or_create_user(session, name, Role.student)
        set_password(user, PASSWORD, SUITE_ARGON2)
        token = issue_token(session, user, "doors")
    data = make(name)
    assert zipfile.is_zipfile(io.BytesIO(data)) == (code == "empty_zip")
    upload = {"file": (filename, data, "application/octet-stream")}
    with TestClient(create_app(settings)) as api, TestClient(create_app(settings)) as web:
        login(settings, name, web)
        answers = {
            "api": api.post("/api/v1/submissions", headers=auth(token), files=upload),
            "token form": api.post("/upload", data={"token": token}, files=upload),
            "logged-in form": web.post("/submit", data={"csrf_token": csrf_of(web.get("/").text)}, files=upload,
                                       follow_redirects=False),
        }
    assert {door: a.status_code for door, a in answers.items()} == dict.fromkeys(answers, status)
    assert answers["api"].json()["error"] == {"code": code, "message": words}
    for door in ("token form", "logged-in form"):
        assert words in html.unescape(answers[door].text), (door, answers[door].text[:2000])
    with session_scope(sessions) as session:
        stored = session.scalar(select(func.count(Submission.id)).join(User, Submission.user_id == User.id)
                                .where(User.username == name))
    assert stored == 0
    assert not BlobStore(settings.blob_dir).exists(hashlib.sha256(data).hexdigest())
