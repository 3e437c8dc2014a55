"""Hostile uploads refused at the door: the real app (embedded profile: SQLite database and
broker in a temp folder) must answer each with its status and error code, and keep nothing:
no submission row, no blob, no temp file."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from grader.app import create_app
from grader.auth import issue_token
from grader.cli import init_database
from grader.db import session_scope
from grader.models import Role, Submission
from grader.service import get_or_create_user
from grader.settings import Settings
from hostile_report import Row, record

MAX_UPLOAD = 256 * 1024


@dataclass(frozen=True)
class UploadCase:
    id: str
    threat: str
    request: dict[str, object]  # keyword arguments of TestClient.post, less the headers
    status: int
    code: str
    orphan_blob: bool = False  # known: the blob store keeps the file of this refused upload


ORPHAN = ("grader/uploads.py commits the file part to the blob store before it refuses an empty file or a "
          "second file, so the refused upload's blob stays behind (no row refers to it)")


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
    UploadCase("empty-file", "empty zip", {"files": {"file": ("a.zip", b"")}}, 422, "validation_error", True),
    UploadCase("no-file", "wrong layout", _multipart(_part("assignment", b"hw4") + END), 422, "validation_error"),
    UploadCase("two-files", "wrong layout", _multipart(_part("file", b"PK1", "a.zip") + _part("file", b"PK2", "b.zip") + END),
               400, "bad_request", True),
    UploadCase("wrong-file-field", "wrong layout", _multipart(_part("evil", b"PK", "a.zip") + END), 400, "bad_request"),
    UploadCase("field-flood", "oversized form field", _multipart(_part("assignment", b"a" * 10_000) + END),
               400, "bad_request"),
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
    init_database(settings)
    with TestClient(create_app(settings)) as client:
        with session_scope(client.app.state.context.sessions) as session:  # type: ignore[attr-defined]
            token = issue_token(session, get_or_create_user(session, "mallory", Role.student), "hostile")
        yield App(client, settings, token)


def _kept(app: App) -> tuple[int, list[str]]:
    with session_scope(app.client.app.state.context.sessions) as session:  # type: ignore[attr-defined]
        rows = session.scalar(select(func.count(Submission.id))) or 0
    files = [str(p.relative_to(app.settings.blob_dir)) for p in Path(app.settings.blob_dir).rglob("*") if p.is_file()]
    return rows, files


def _param(case: UploadCase) -> object:
    marks = [pytest.mark.xfail(strict=True, reason=ORPHAN)] if case.orphan_blob else []
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
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
                               files={"file": ("ok.zip", b"PK\x05\x06" + bytes(18))})
    assert response.status_code == 201, response.text
