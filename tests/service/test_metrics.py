"""GET /api/v1/metrics on real PostgreSQL and Redis, read back with prometheus_client's own
parser: runs by state, unsent runs, the oldest queued run's age, runs whose worker stopped
beating, the last hour's outcomes and durations, for the assignments the token's owner teaches
only; the broker's real queue lengths; staff's `read:all` scope needed. The runs made here are
ended afterwards, so no later reconciler pass sends them to a worker."""
from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.db import session_scope
from grader.models import FINAL_STATES, Role, Run, RunState, Submission, User, utcnow
from grader.passwords import set_password
from grader.settings import Settings
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.conftest import REDIS_URL, auth, drop_queues
from tests.service.test_api_v1 import World
from tests.service.test_web_settings import PASSWORD, Browser


@pytest.fixture(scope="module")
def queue() -> Iterator[str]:
    name = f"kg-test-metrics-{uuid.uuid4().hex[:8]}"
    yield name
    drop_queues(name)


@pytest.fixture(scope="module")
def api(settings: Settings, queue: str) -> Iterator[TestClient]:
    with TestClient(create_app(settings.model_copy(update={"task_queue": queue}))) as client:
        yield client


@pytest.fixture
def worlds(sessions: sessionmaker[Session]) -> Iterator[list[World]]:
    """Worlds of one test; their runs end `failed` after it."""
    made: list[World] = []
    yield made
    with session_scope(sessions) as session:
        mine = select(Submission.id).where(Submission.assignment_id.in_([w.assignment_id for w in made]))
        session.execute(update(Run).where(Run.submission_id.in_(mine), Run.state.not_in(FINAL_STATES))
                        .values(state=RunState.failed, finished_at=utcnow()))


def _run(world: World, login: str, state: RunState, made_ago_s: float, done_ago_s: float | None = None,
         sent: bool = True, beat_ago_s: float | None = None) -> None:
    now = utcnow()
    with session_scope(world.sessions) as session:
        user = session.query(User).filter_by(username=f"{login}-{world.tag}").one()
        sub = Submission(user=user, assignment_id=world.assignment_id, original_filename="x.zip", size_bytes=1,
                         sha256=uuid.uuid4().hex * 2)
        session.add(Run(submission=sub, state=state, created_at=now - timedelta(seconds=made_ago_s),
                        enqueued_at=now if sent else None,
                        heartbeat_at=None if beat_ago_s is None else now - timedelta(seconds=beat_ago_s),
                        finished_at=None if done_ago_s is None else now - timedelta(seconds=done_ago_s)))


def _scrape(api: TestClient, token: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = api.get("/api/v1/metrics", headers=auth(token))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(response.text) for s in family.samples}


def test_metrics_count_what_the_database_and_broker_hold(api: TestClient, sessions: sessionmaker[Session],
                                                          queue: str, worlds: list[World]) -> None:
    world = World(sessions)
    world.user("stu"), world.user("prof", Role.instructor)
    _run(world, "stu", RunState.queued, 300, sent=False)  # held back (fair share)
    _run(world, "stu", RunState.queued, 100)
    _run(world, "stu", RunState.running, 60, beat_ago_s=2)
    _run(world, "stu", RunState.building, 900, beat_ago_s=600)  # its worker died (timeout: 60 s)
    for took in (30, 60, 240):
        _run(world, "stu", RunState.scored, took + 10, done_ago_s=10)
    _run(world, "stu", RunState.failed, 7300, done_ago_s=7200)  # ended before the last hour
    other = World(sessions)  # an assignment the prof does not teach
    worlds += [world, other]
    other.user("stu2")
    _run(other, "stu2", RunState.queued, 50)
    redis.Redis.from_url(REDIS_URL).rpush(queue, "m1", "m2", "m3")

    got = _scrape(api, world.tokens["prof"])
    a = ("assignment", world.slug)

    def value(name: str, *labels: tuple[str, str]) -> float:
        return got[(name, frozenset(labels))]

    # RunState's order: queued, building, running, checked, timing, built, scored, failed
    assert [value("kg_runs", a, ("state", s.value)) for s in RunState] == [2, 1, 1, 0, 0, 0, 3, 1]
    assert value("kg_runs_stale_heartbeat", a) == 1
    assert value("kg_runs_unsent", a) == 1
    assert 295 <= value("kg_oldest_queued_seconds", a) <= 330
    assert value("kg_assignment_paused", a) == 0
    assert (value("kg_runs_finished_last_hour", a, ("state", "scored")),
            value("kg_runs_finished_last_hour", a, ("state", "failed"))) == (3, 0)
    assert value("kg_run_seconds_last_hour", a, ("quantile", "0.5")) == pytest.approx(60, abs=1)
    assert value("kg_run_seconds_last_hour_count", a) == 3
    assert value("kg_run_seconds_last_hour_sum", a) == pytest.approx(330, abs=1)
    assert not [key for key in got if ("assignment", other.slug) in key[1]]  # not taught: not shown
    assert value("kg_broker_up") == 1 and value("kg_broker_queue_length", ("queue", queue)) == 3


def test_metrics_need_staffs_read_all_scope(api: TestClient, sessions: sessionmaker[Session]) -> None:
    world = World(sessions)
    world.user("stu")
    assert api.get("/api/v1/metrics", headers=auth(world.tokens["stu"])).status_code == 403
    assert api.get("/api/v1/metrics").status_code == 401


def test_the_grading_controls_page_shows_the_same_figures(settings: Settings, sessions: sessionmaker[Session],
                                                          worlds: list[World]) -> None:
    world = World(sessions)
    worlds.append(world)
    world.user("stu"), world.user("prof", Role.instructor)
    with session_scope(sessions) as session:
        set_password(session.query(User).filter_by(username=f"prof-{world.tag}").one(), PASSWORD, SUITE_ARGON2)
    prof = Browser(settings, f"prof-{world.tag}")
    page = prof.client.get(f"/assignments/{world.slug}/grading").text
    assert 'id="health-oldest">Nothing of this assignment is queued.' in page and 'id="health-stale"' not in page
    assert "In the last hour: 0 built, 0 scored, 0 failed." in page

    _run(world, "stu", RunState.queued, 300, sent=False)
    _run(world, "stu", RunState.building, 900, beat_ago_s=settings.heartbeat_timeout_s + 60)
    for took in (30, 60, 240):
        _run(world, "stu", RunState.scored, took + 10, done_ago_s=10)
    _run(world, "stu", RunState.failed, 7300, done_ago_s=7200)
    page = prof.client.get(f"/assignments/{world.slug}/grading").text
    assert "The oldest queued run has waited 5 min." in page
    assert re.search(r'id="health-stale">1 run\s+in flight whose worker stopped reporting', page)
    assert re.search(r"In the last hour: 0 built, 3 scored, 0 failed; upload to result: median 60 s, 90% within"
                     r"\s+3 min\.", page), page[page.find("health-hour"):][:300]
