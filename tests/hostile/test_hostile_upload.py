"""Hostile uploads refused at the door: the real app (embedded profile: SQLite database and
broker in a temp folder) must answer each with its status and error code, and keep nothing:
no submission row, no blob, no temp file."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hostile_report import Row, record
from sqlalchemy import func, select

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.context import AppContext
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role, Submission
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.uploads import remove_unless_recorded
from tests.fixtures.zips import small_zip
from tests.service.conftest import init_with_course

MAX_UPLOAD = 256 * 1024


@dataclass(frozen=True)
class UploadCase:
    id: str
    threat: str
    request: dict[str, object]  # keyword arguments of TestClient.post, less the headers
    status: int
    code: str


def _multipart(body: bytes, boundary: str = "kgboundary") -> dict[str, object]:
    return {"content": body, "headers": {"Content-Type": f"multipart/form-data; boundary={boundary}"}}


def _part(name: str, data: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
    return f"--kgboundary\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + data + b"\r\n"


END = b"--kgboundary--\r\n"
CASES = [
    UploadCase("oversized", "an oversized upload", {"files": {"file": ("a.zip", b"P" * (MAX_UPLOAD + 1))}},
               413, "payload_too_large"),
    UploadCase("oversized-chunked", "an oversized upload (no Content-Length)",
               {**_multipart(b""), "content": iter([_part("file", b"P" * (MAX_UPLOAD + 10), "a.zip"), END])},
               413, "payload_too_large"),
    UploadCase("not-multipart", "upload content type", {"content": b"PK\x03\x04raw",
                                                        "headers": {"Content-Type": "application/zip"}},
               415, "unsupported_media_type"),
    UploadCase("no-boundary", "upload content type", {"content": b"x", "headers": {"Content-Type": "multipart/form-data"}},
               415, "unsupported_media_type"),
    UploadCase("empty-file", "empty zip", {"files": {"file": ("a.zip", b"")}}, 422, "validation_error"),
    UploadCase("no-file", "wrong layout", _multipart(_part("assignment", b"hw4") + END), 422, "validation_error"),
    UploadCase("two-files", "wrong layout", _multipart(_part("file", b"PK1", "a.zip") + _part("file", b"PK2", "b.zip") + END),
               400, "bad_request"),
    UploadCase("wrong-file-field", "wrong layout", _multipart(_part("evil", b"PK", "a.zip") + END), 400, "bad_request"),
    UploadCase("field-flood", "oversized form field", _multipart(_part("assignment", b"a" * 10_000) + END),
               400, "bad_request"),
    UploadCase("unknown-assignment", "refused once stored",
               {"files": {"file": ("a.zip", small_zip(b"nowhere"))}, "data": {"assignment": "nope"}},
               404, "not_found"),
    UploadCase("malformed-multipart", "not an archive at all", _multipart(b"--kgboundary\r\nno headers end"),
               400, "bad_request"),
]


@dataclass(frozen=True)
class App:
    client: TestClient
    settings: Settings
    token: str


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    settings = Settings(_env_file=None, data_dir=tmp_path_factory.mktemp("kg-upload"),  # type: ignore[call-arg]
                        max_upload_bytes=MAX_UPLOAD)
    init_with_course(settings)
    with TestClient(create_app(settings)) as client:
        with session_scope(client.app.state.context.sessions) as session:  # type: ignore[attr-defined]
            token = issue_token(session, get_or_create_user(session, "mallory", Role.student), "hostile")
        yield App(client, settings, token)


def _kept(app: App) -> tuple[int, list[str]]:
    with session_scope(app.client.app.state.context.sessions) as session:  # type: ignore[attr-defined]
        rows = session.scalar(select(func.count(Submission.id))) or 0
    files = [str(p.relative_to(app.settings.blob_dir)) for p in Path(app.settings.blob_dir).rglob("*") if p.is_file()]
    return rows, files


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_hostile_upload_is_refused_and_nothing_kept(case: UploadCase, app: App) -> None:
    (rows_before, blobs_before) = _kept(app)
    request = dict(case.request)
    headers = {"Authorization": f"Bearer {app.token}", **dict(request.pop("headers", {}))}  # type: ignore[arg-type]
    response = app.client.post("/api/v1/submissions", headers=headers, **request)  # type: ignore[arg-type]
    got = f"{response.status_code} {response.json().get('error', {}).get('code')}"
    rows, blobs = _kept(app)
    escapes = ("recorded a refused upload",) if rows != rows_before else ()
    orphans = sorted(set(blobs) - set(blobs_before))
    record(Row("upload", case.id, case.threat, f"{case.status} {case.code}",
               got + (" +orphan blob" if orphans else ""), escapes))
    assert got == f"{case.status} {case.code}", response.text
    assert response.json()["error"]["message"]
    assert not escapes
    assert not orphans, orphans


def test_a_good_upload_still_goes_through(app: App) -> None:
    response = app.client.post("/api/v1/submissions", headers={"Authorization": f"Bearer {app.token}"},
                               files={"file": ("ok.zip", small_zip())})
    assert response.status_code == 201, response.text


def test_refusing_bytes_a_submission_holds_keeps_its_blob(app: App) -> None:
    """Content addressing: a refused upload of bytes already recorded must not remove them."""
    headers = {"Authorization": f"Bearer {app.token}"}
    zip_bytes = small_zip(b"recorded")
    kept = app.client.post("/api/v1/submissions", headers=headers, files={"file": ("ok.zip", zip_bytes)})
    refused = app.client.post("/api/v1/submissions", headers=headers, data={"assignment": "nope"},
                              files={"file": ("again.zip", zip_bytes)})
    assert kept.status_code == 201 and refused.status_code == 404, refused.text
    assert _context(app).blobs.exists(kept.json()["sha256"])


def test_removal_waits_for_an_upload_of_the_same_bytes_still_recording(app: App) -> None:
    """The race: a refused upload's removal and a concurrent upload of the same bytes that has
    stored the blob (holding the shared lock) but not yet committed its submission."""
    ctx = _context(app)
    blob = ctx.blobs.put_bytes(small_zip(b"raced"))
    removal = threading.Thread(target=remove_unless_recorded, args=(ctx, blob.sha256))
    with ctx.blobs.lock(blob.sha256):
        removal.start()
        removal.join(0.5)
        assert removal.is_alive(), "the removal did not wait for the upload still recording"
        with session_scope(ctx.sessions) as session:
            user = get_or_create_user(session, "mallory", Role.student)
            record_submission(session, user, get_assignment(session, "hw4"), "raced.zip", blob)
    removal.join(10)
    assert not removal.is_alive() and ctx.blobs.exists(blob.sha256), "a recorded blob was removed"


def test_removal_of_an_unrecorded_blob(app: App) -> None:
    ctx = _context(app)
    blob = ctx.blobs.put_bytes(small_zip(b"never recorded"))
    remove_unless_recorded(ctx, blob.sha256)
    assert not ctx.blobs.exists(blob.sha256)


def _context(app: App) -> AppContext:
    return app.client.app.state.context  # type: ignore[attr-defined,no-any-return]
