"""REST v1 the run that counts (grader/api/counted.py) on real PostgreSQL, under the pages' rules:
staff choose any scored run of a student and the gradebook export counts it; a student chooses
their own only where the assignment lets students choose and staff have not (403 with the
pages' words); another student reads nothing of it (404); a run that is not a scored run of the
student is 409; every answer in the API's error envelope."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.db import session_scope
from grader.models import Assignment, Role, Run
from grader.settings import Settings
from tests.service.test_api_v1 import World
from tests.service.test_api_workflow import as_, error_of


@pytest.fixture(scope="module")
def api(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture
def world(sessions: sessionmaker[Session]) -> World:
    world = World(sessions)
    world.user("stu"), world.user("other"), world.user("prof", Role.instructor)
    return world


def _runs(world: World, submission: int) -> list[int]:
    with session_scope(world.sessions) as session:
        return list(session.scalars(select(Run.id).where(Run.submission_id == submission).order_by(Run.id)))


def _let_students_choose(world: World, allowed: bool) -> None:
    with session_scope(world.sessions) as session:
        session.get_one(Assignment, world.assignment_id).students_choose_counted_run = allowed


def _exported_run(api: TestClient, world: World, login: str) -> tuple[int, float]:
    """The gradebook export's run that counts for `login`, and its total."""
    rows = api.get(f"/api/v1/assignments/{world.slug}/gradebook", headers=as_(world, "prof")).json()["rows"]
    row = next(r for r in rows if r["user"] == login)
    return row["run_id"], row["total"]


def test_staff_choose_the_run_that_counts_and_go_back_to_the_policy(api: TestClient, world: World) -> None:
    login = f"stu-{world.tag}"
    old = world.submission("stu", [{"score": 50.0}], age_s=60)
    new = world.submission("stu", [{"score": 30.0}, {"state": "failed", "error": "build_error"}])
    [best], [latest, failed] = _runs(world, old), _runs(world, new)
    url = f"/api/v1/assignments/{world.slug}/students/{login}/counted-run"

    read = api.get(url, headers=as_(world, "prof")).json()
    assert read == {"student": login, "run_id": latest, "chosen_by": None, "by_student": False, "reason": None,
                    "score_policy": "latest", "students_choose": False}
    assert _exported_run(api, world, login) == (latest, 30.0)

    chosen = api.put(url, headers=as_(world, "prof"), json={"run_id": best, "reason": "  the later one timed out  "})
    assert chosen.status_code == 200, chosen.text
    assert (chosen.json()["run_id"], chosen.json()["chosen_by"], chosen.json()["reason"]) == (
        best, f"prof-{world.tag}", "the later one timed out")
    assert api.get(url, headers=as_(world, "stu")).json()["run_id"] == best  # the student sees it
    assert _exported_run(api, world, login) == (best, 50.0)

    assert "not a scored run" in error_of(api.put(url, headers=as_(world, "prof"), json={"run_id": failed}),
                                          409, "conflict")
    someone_elses = _runs(world, world.submission("other", [{"score": 60.0}]))[0]
    error_of(api.put(url, headers=as_(world, "prof"), json={"run_id": someone_elses}), 409, "conflict")
    assert api.get(url, headers=as_(world, "prof")).json()["run_id"] == best  # a refusal changed nothing

    cleared = api.delete(url, headers=as_(world, "prof"))
    assert cleared.status_code == 200 and (cleared.json()["run_id"], cleared.json()["chosen_by"]) == (latest, None)
    assert _exported_run(api, world, login) == (latest, 30.0)


def test_a_student_chooses_only_where_allowed_and_staff_have_not(api: TestClient, world: World) -> None:
    login = f"stu-{world.tag}"
    [first] = _runs(world, world.submission("stu", [{"score": 45.0}], age_s=60))
    [second] = _runs(world, world.submission("stu", [{"score": 20.0}]))
    url = f"/api/v1/assignments/{world.slug}/students/{login}/counted-run"

    assert "have not let students choose" in error_of(
        api.put(url, headers=as_(world, "stu"), json={"run_id": first}), 403, "forbidden")
    _let_students_choose(world, True)
    mine = api.put(url, headers=as_(world, "stu"), json={"run_id": first, "reason": "ignored for students"})
    assert mine.status_code == 200, mine.text
    assert mine.json() | {"student": login} == {"student": login, "run_id": first, "chosen_by": login,
                                                "by_student": True, "reason": None, "score_policy": "latest",
                                                "students_choose": True}

    # Another student: absent, for reading and for choosing.
    error_of(api.get(url, headers=as_(world, "other")), 404, "not_found")
    error_of(api.put(url, headers=as_(world, "other"), json={"run_id": first}), 404, "not_found")

    # Once staff choose, the student's own choice is theirs no more.
    api.put(url, headers=as_(world, "prof"), json={"run_id": second}).raise_for_status()
    assert "Staff chose" in error_of(api.delete(url, headers=as_(world, "stu")), 403, "forbidden")
    assert api.get(url, headers=as_(world, "stu")).json()["chosen_by"] == f"prof-{world.tag}"

    # With the option turned off again, a student's choice no longer counts (the policy's pick).
    api.delete(url, headers=as_(world, "prof")).raise_for_status()
    api.put(url, headers=as_(world, "stu"), json={"run_id": first}).raise_for_status()
    _let_students_choose(world, False)
    assert api.get(url, headers=as_(world, "prof")).json() | {"student": login} == {
        "student": login, "run_id": second, "chosen_by": None, "by_student": False, "reason": None,
        "score_policy": "latest", "students_choose": False}


def test_unknown_logins_and_assignments_read_as_absent(api: TestClient, world: World) -> None:
    error_of(api.get(f"/api/v1/assignments/{world.slug}/students/nobody-{world.tag}/counted-run",
                     headers=as_(world, "prof")), 404, "not_found")
    error_of(api.get(f"/api/v1/assignments/no-such-{world.tag}/students/stu-{world.tag}/counted-run",
                     headers=as_(world, "stu")), 404, "not_found")
    error_of(api.put(f"/api/v1/assignments/{world.slug}/students/stu-{world.tag}/counted-run",
                     headers=as_(world, "prof"), json={"run_id": "x"}), 422, "validation_error")
