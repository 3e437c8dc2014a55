"""REST v1 regrade requests and comments (grader/api/workflow.py) on real PostgreSQL: the run's
student asks, staff of its assignment answer (reject, adjust, re-grade), both comment; another
student reads nothing of it (404), a student who tries the staff's part and staff who try the
student's are refused (403); every answer in the API's error envelope.

This module's app sends runs to a Redis queue of its own that no worker reads (the re-grade an
accepted request queues is never graded behind the test's back)."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.db import session_scope
from grader.models import RegradeRequest, Role, Run, RunComment, RunState
from grader.settings import Settings
from tests.service.conftest import auth, drop_queues
from tests.service.test_api_v1 import World


@pytest.fixture(scope="module")
def api(settings: Settings) -> Iterator[TestClient]:
    own = settings.model_copy(update={"task_queue": f"kg-test-flow-api-{uuid.uuid4().hex[:8]}"})
    with TestClient(create_app(own)) as client:
        yield client
    drop_queues(own.task_queue)


@pytest.fixture
def world(sessions: sessionmaker[Session]) -> World:
    world = World(sessions)
    world.user("stu"), world.user("other"), world.user("prof", Role.instructor)
    return world


def error_of(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    return str(body["error"]["message"])


def as_(world: World, who: str) -> dict[str, str]:
    return auth(world.tokens[who])


def test_a_request_is_asked_by_its_student_and_answered_by_staff(api: TestClient, world: World,
                                                                  sessions: sessionmaker[Session]) -> None:
    submission = world.submission("stu", [{"points": (20.0, 10.0, 10.0)}])
    with session_scope(sessions) as session:
        run_id = session.scalars(select(Run.id).where(Run.submission_id == submission)).one()
    asks = f"/api/v1/runs/{run_id}/regrade-requests"

    made = api.post(asks, headers=as_(world, "stu"), json={"reason": "  Problem 1.2 passes on my GPU  "})
    assert made.status_code == 201, made.text
    asked = made.json()
    assert (asked["run_id"], asked["student"], asked["state"]) == (run_id, f"stu-{world.tag}", "open")
    assert asked["reason"] == "Problem 1.2 passes on my GPU" and asked["decided_by"] is None
    assert "already has an open regrade request" in error_of(
        api.post(asks, headers=as_(world, "stu"), json={"reason": "again"}), 409, "conflict")
    error_of(api.post(asks, headers=as_(world, "stu"), json={"reason": "   "}), 422, "validation_error")

    # Another student: the run is absent; staff may read it but not ask in the student's name.
    error_of(api.get(asks, headers=as_(world, "other")), 404, "not_found")
    error_of(api.post(asks, headers=as_(world, "other"), json={"reason": "me too"}), 404, "not_found")
    error_of(api.post(asks, headers=as_(world, "prof"), json={"reason": "for them"}), 403, "forbidden")

    decision = f"/api/v1/regrade-requests/{asked['id']}/decision"
    error_of(api.post(decision, headers=as_(world, "stu"), json={"action": "reject", "reply": "no"}),
             403, "forbidden")
    error_of(api.post(decision, headers=as_(world, "other"), json={"action": "reject", "reply": "no"}),
             404, "not_found")
    queue = f"/api/v1/assignments/{world.slug}/regrade-requests"
    error_of(api.get(queue, headers=as_(world, "stu")), 403, "forbidden")
    listed = api.get(queue, headers=as_(world, "prof")).json()["items"]
    assert [(r["id"], r["state"]) for r in listed] == [(asked["id"], "open")]

    # A decision must be complete; then it is taken once.
    error_of(api.post(decision, headers=as_(world, "prof"), json={"action": "reject"}), 422, "validation_error")
    error_of(api.post(decision, headers=as_(world, "prof"), json={"action": "adjust", "reply": "ok"}),
             422, "validation_error")
    adjusted = api.post(decision, headers=as_(world, "prof"),
                        json={"action": "adjust", "points": 5, "reply": "Checked by hand: 1.2 is right"})
    assert adjusted.status_code == 200, adjusted.text
    answer = adjusted.json()
    assert (answer["state"], answer["decided_by"], answer["reply"]) == (
        "accepted", f"prof-{world.tag}", "Checked by hand: 1.2 is right")
    assert (answer["adjustment"]["points"], answer["adjustment"]["by"]) == (5.0, f"prof-{world.tag}")
    grade = api.get(f"/api/v1/runs/{run_id}", headers=as_(world, "stu")).json()["grade"]
    assert (grade["raw_score"], grade["adjustment"], grade["final_score"]) == (40.0, 5.0, 45.0)
    assert "already accepted" in error_of(
        api.post(decision, headers=as_(world, "prof"), json={"action": "reject", "reply": "changed my mind"}),
        409, "conflict")

    # A second request, accepted by a re-grade: a new run of the same submission is queued.
    second = api.post(asks, headers=as_(world, "stu"), json={"reason": "Please run it again"}).json()
    regraded = api.post(f"/api/v1/regrade-requests/{second['id']}/decision", headers=as_(world, "prof"),
                        json={"action": "regrade"}).json()
    assert regraded["state"] == "accepted" and regraded["adjustment"] is None
    with session_scope(sessions) as session:
        new_run = session.get(Run, regraded["regrade_run_id"])
        assert new_run is not None and new_run.submission_id == submission and new_run.state is RunState.queued
    history = api.get(asks, headers=as_(world, "stu")).json()["items"]
    assert [(r["id"], r["state"]) for r in history] == [(asked["id"], "accepted"), (second["id"], "accepted")]
    queue_after = api.get(queue, headers=as_(world, "prof")).json()["items"]
    assert [r["id"] for r in queue_after] == [second["id"], asked["id"]]  # answered ones, newest first


def test_comments_are_the_runs_student_and_staff_only(api: TestClient, world: World,
                                                      sessions: sessionmaker[Session]) -> None:
    submission = world.submission("stu", [{"state": "failed", "error": "build_error"}])
    with session_scope(sessions) as session:
        run_id = session.scalars(select(Run.id).where(Run.submission_id == submission)).one()
    path = f"/api/v1/runs/{run_id}/comments"
    first = api.post(path, headers=as_(world, "stu"), json={"body": "nvcc says the header is missing"})
    assert first.status_code == 201, first.text
    reply = api.post(path, headers=as_(world, "prof"), json={"body": "Add src/kernels.h to the zip."})
    assert reply.status_code == 201, reply.text
    error_of(api.post(path, headers=as_(world, "stu"), json={"body": ""}), 422, "validation_error")
    error_of(api.post(path, headers=as_(world, "other"), json={"body": "hi"}), 404, "not_found")
    error_of(api.get(path, headers=as_(world, "other")), 404, "not_found")

    items = api.get(path, headers=as_(world, "stu")).json()["items"]
    assert [(c["author"], c["body"]) for c in items] == [
        (f"stu-{world.tag}", "nvcc says the header is missing"), (f"prof-{world.tag}", "Add src/kernels.h to the zip.")]
    assert items[0]["id"] == first.json()["id"] and all(c["run_id"] == run_id for c in items)
    with session_scope(sessions) as session:
        stored = session.scalars(select(RunComment.body).where(RunComment.run_id == run_id)
                                 .order_by(RunComment.id)).all()
        assert stored == [c["body"] for c in items]
        assert not session.scalars(select(RegradeRequest).where(RegradeRequest.run_id == run_id)).all()


def test_the_endpoints_are_in_the_openapi_spec(api: TestClient) -> None:
    spec = api.get("/openapi.json").json()
    paths = spec["paths"]
    run_asks = paths["/api/v1/runs/{run_id}/regrade-requests"]
    assert {"get", "post"} <= set(run_asks) and {"get", "post"} <= set(paths["/api/v1/runs/{run_id}/comments"])
    assert "get" in paths["/api/v1/assignments/{slug}/regrade-requests"]
    decide = paths["/api/v1/regrade-requests/{request_id}/decision"]["post"]
    assert {"200", "403", "404", "409", "422"} <= set(decide["responses"])
    assert decide["responses"]["409"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
    # One body per action: what each needs is in the schema (so a schema-valid body is accepted).
    body = decide["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["discriminator"]["mapping"]) == {"regrade", "adjust", "reject"}
    schemas = spec["components"]["schemas"]
    assert set(schemas["RegradeByAdjusting"]["required"]) == {"action", "reply", "points"}
    assert set(schemas["RegradeRejected"]["required"]) == {"action", "reply"}
    assert schemas["RegradeByRegrading"]["required"] == ["action"]
    assert set(spec["components"]["schemas"]["RegradeRequestOut"]["properties"]) >= {
        "state", "reply", "regrade_run_id", "adjustment", "decided_by"}
