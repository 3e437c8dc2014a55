"""The gradebook applies the assignment's late policy and its own score policy (real
PostgreSQL): a late submission keeps the policy's share of its score, an extension moves the
student's due date, "best" compares scores after the penalty, and the JSON/CSV exports carry
the adjusted total with the reason."""
from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from grader.course.deadlines import Extension, LatePolicy
from grader.course.policies import grant_extension, set_schedule
from grader.db import session_scope
from grader.models import Role, User, utcnow
from grader.reads.gradebook_reads import gradebook
from grader.service import get_assignment
from tests.service.conftest import auth
from tests.service.test_api_v1 import World, api, v1_settings, world  # noqa: F401  (fixtures)


def _schedule(world: World, sessions: sessionmaker[Session], score_policy: str) -> None:
    """Due 10 days ago; then a day of grace, and 20% off per started day up to 5 days late."""
    with session_scope(sessions) as session:
        set_schedule(session, world.slug, LatePolicy(due_at=utcnow() - timedelta(days=10), grace=timedelta(days=1),
                                                     late_window=timedelta(days=5), penalty_per_day=0.2), score_policy)


def test_late_penalty_extension_and_best_after_penalty(world: World, sessions: sessionmaker[Session],  # noqa: F811
                                                        api: TestClient) -> None:  # noqa: F811
    world.user("ontime"), world.user("late"), world.user("ext"), world.user("staff", Role.instructor)
    world.submission("ontime", [{"score": 80.0}], age_s=11 * 86400)  # a day before the due date
    world.submission("late", [{"score": 90.0}], age_s=(10 - 1.5) * 86400)  # 1.5 days after due: 1 started day past grace
    late_better = world.submission("late", [{"score": 100.0}], age_s=(10 - 4.5) * 86400)  # 4 days past grace: 20%
    world.submission("ext", [{"score": 70.0}], age_s=(10 - 3) * 86400)  # 3 days late, but a 3-day extension
    _schedule(world, sessions, "best")
    with session_scope(sessions) as session:
        ext = session.query(User).filter_by(username=f"ext-{world.tag}").one()
        grant_extension(session, world.slug, ext, Extension(timedelta(days=3), "medical"))

    with session_scope(sessions) as session:
        book = gradebook(session, get_assignment(session, world.slug))  # no policy given: the assignment's
    rows = {r.username.split("-")[0]: r for r in book.rows}
    assert book.policy == "best"
    assert rows["ontime"].total == 80.0 and rows["ontime"].graded.late is None
    # best after the penalty: 90 x 0.8 = 72 beats 100 x 0.2 = 20
    assert rows["late"].total == 72.0 and rows["late"].graded.raw_score == 90.0
    assert "20% off" in (rows["late"].graded.late or "")
    assert rows["late"].graded.submission_id != late_better
    assert rows["ext"].total == 70.0 and rows["ext"].graded.raw_score is None

    body = api.get(f"/api/v1/assignments/{world.slug}/gradebook", headers=auth(world.tokens["staff"])).json()
    late_row = next(r for r in body["rows"] if r["user"].startswith("late-"))
    assert body["policy"] == "best" and late_row["total"] == 72.0 and late_row["best"]["raw_score"] == 90.0
    latest = api.get(f"/api/v1/assignments/{world.slug}/gradebook", params={"policy": "latest"},
                     headers=auth(world.tokens["staff"])).json()
    assert next(r for r in latest["rows"] if r["user"].startswith("late-"))["total"] == 20.0  # newest: 100 x 0.2
    csv_text = api.get(f"/api/v1/assignments/{world.slug}/gradebook.csv", headers=auth(world.tokens["staff"])).text
    assert any(f"late-{world.tag}" in line and "72" in line for line in csv_text.splitlines()), csv_text
