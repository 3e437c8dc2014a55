"""REST API and upload form against real PostgreSQL and Redis (no worker needed here)."""
from __future__ import annotations

import hashlib
import re
import uuid

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role, Run, Submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from tests.fixtures.zips import small_zip
from tests.service.conftest import auth, new_student, run_row


def _post(client: TestClient, token: str | None, data: bytes, name: str = "hw.zip"):  # type: ignore[no-untyped-def]
    headers = auth(token) if token else {}
    return client.post("/api/v1/submissions", headers=headers, files={"file": (name, data)})


def _count(sessions: sessionmaker[Session], model: type) -> int:
    with session_scope(sessions) as session:
        return session.scalar(select(func.count()).select_from(model)) or 0


def test_openapi_and_docs_are_served(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert "/api/v1/submissions" in spec["paths"]
    assert "/api/v1/runs/{run_id}" in spec["paths"]
    assert "/api/v1/submissions/{submission_id}/regrade" in spec["paths"]
    assert client.get("/docs").status_code == 200


def test_api_requires_a_valid_token(client: TestClient) -> None:
    assert _post(client, None, small_zip()).status_code == 401
    assert _post(client, "kg_not-a-real-token", small_zip()).status_code == 401
    assert client.get("/api/v1/runs/1").status_code == 401


def test_upload_is_stored_and_recorded_before_201(
    client: TestClient, settings: Settings, sessions: sessionmaker[Session]
) -> None:
    data = small_zip(b"x" * 5000)
    response = _post(client, new_student(sessions), data)  # sent at once: nothing of theirs in flight
    assert response.status_code == 201, response.text
    body = response.json()
    digest = hashlib.sha256(data).hexdigest()
    assert body["sha256"] == digest and body["size_bytes"] == len(data)
    assert body["queued"] is True
    # By the time the client hears 201 the blob and both rows are durable.
    assert BlobStore(settings.blob_dir).path(digest).read_bytes() == data
    run = run_row(sessions, body["run_id"])
    assert run.submission_id == body["submission_id"]
    assert run.enqueued_at is not None


def test_student_sees_only_own_submissions(client: TestClient, tokens: dict[str, str]) -> None:
    created = _post(client, tokens["alice"], small_zip()).json()
    sid, rid = created["submission_id"], created["run_id"]
    assert client.get(f"/api/v1/submissions/{sid}", headers=auth(tokens["alice"])).status_code == 200
    assert client.get(f"/api/v1/submissions/{sid}", headers=auth(tokens["bob"])).status_code == 404
    assert client.get(f"/api/v1/runs/{rid}", headers=auth(tokens["bob"])).status_code == 404
    staff_view = client.get(f"/api/v1/submissions/{sid}", headers=auth(tokens["staff"]))
    assert staff_view.status_code == 200 and staff_view.json()["user"] == "alice"


def test_regrade_is_staff_only_and_keeps_history(client: TestClient, tokens: dict[str, str]) -> None:
    created = _post(client, tokens["alice"], small_zip()).json()
    sid = created["submission_id"]
    assert client.post(f"/api/v1/submissions/{sid}/regrade", headers=auth(tokens["alice"])).status_code == 403
    regrade = client.post(f"/api/v1/submissions/{sid}/regrade", headers=auth(tokens["staff"]))
    assert regrade.status_code == 201
    assert regrade.json()["run_id"] != created["run_id"]
    runs = client.get(f"/api/v1/submissions/{sid}", headers=auth(tokens["staff"])).json()["runs"]
    assert [r["id"] for r in runs] == [created["run_id"], regrade.json()["run_id"]]
    assert [r["reason"] for r in runs] == ["upload", "regrade"]


def test_oversized_upload_is_refused_and_nothing_kept(
    client: TestClient, tokens: dict[str, str], settings: Settings, sessions: sessionmaker[Session]
) -> None:
    before = _count(sessions, Submission)
    response = _post(client, tokens["alice"], b"z" * (settings.max_upload_bytes + 1))
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert "MiB limit" in response.json()["error"]["message"]
    assert _count(sessions, Submission) == before
    assert list(BlobStore(settings.blob_dir).tmp_dir.iterdir()) == []


def test_malformed_requests_get_clear_errors(client: TestClient, tokens: dict[str, str]) -> None:
    not_multipart = client.post("/api/v1/submissions", headers=auth(tokens["alice"]), content=b"raw")
    assert not_multipart.status_code == 415
    no_file = client.post("/api/v1/submissions", headers=auth(tokens["alice"]), data={"assignment": "hw4"})
    assert no_file.status_code in (415, 422)
    unknown = client.post(
        "/api/v1/submissions", headers=auth(tokens["alice"]),
        files={"file": ("a.zip", small_zip())}, data={"assignment": "nope"},
    )
    assert unknown.status_code == 404 and "nope" in unknown.json()["error"]["message"]
    assert unknown.json()["error"]["code"] == "not_found"


def test_upload_form_posts_the_same_way(
    client: TestClient, tokens: dict[str, str], sessions: sessionmaker[Session]
) -> None:
    page = client.get("/")
    assert page.status_code == 200 and 'name="file"' in page.text and 'name="token"' in page.text
    ok = client.post("/upload", data={"token": tokens["bob"], "assignment": "hw4"},
                     files={"file": ("mine.zip", small_zip(b"form"))})
    assert ok.status_code == 201
    run_id = int(re.search(r"Run <strong>(\d+)</strong>", ok.text).group(1))  # type: ignore[union-attr]
    assert run_row(sessions, run_id).submission_id > 0
    before = _count(sessions, Submission)
    refused = client.post("/upload", data={"token": "kg_wrong"}, files={"file": ("x.zip", small_zip())})
    assert refused.status_code == 401 and "not valid" in refused.text
    assert _count(sessions, Submission) == before


def test_broker_down_at_upload_loses_nothing(
    settings: Settings, tokens: dict[str, str], sessions: sessionmaker[Session]
) -> None:
    broken = settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"})
    with session_scope(sessions) as session:  # a student with nothing in flight: the upload goes straight to the queue
        token = issue_token(session, get_or_create_user(session, f"offline-{uuid.uuid4().hex[:6]}", Role.student), "t")
    with TestClient(create_app(broken)) as offline:
        response = _post(offline, token, small_zip(b"offline"))
    assert response.status_code == 201
    body = response.json()
    assert body["queued"] is False
    assert "picked up automatically" in body["message"]
    run = run_row(sessions, body["run_id"])
    assert run.state.value == "queued" and run.enqueued_at is None
    assert _count(sessions, Run) >= 1
