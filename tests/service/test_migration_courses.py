"""The courses migration (0019) on today's data: a database built at the revision before it, with
the schema and rows of a running semester (two assignments, their staff and students enrolled
per assignment, an extension, uploads with scored, failed, queued and re-graded runs and their
per-problem points, staff adjustments, a run staff chose to count, regrade requests, a roster
import, API tokens, one of them revoked) is upgraded to head. Then every assignment is a course
of its own with the same members (staff as instructors), every student's gradebook total is the
one the code before the migration computed on the same rows, and every token works as before.
On PostgreSQL and on SQLite (the embedded default). Downgrading gives the enrollments back."""
from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient

from grader.app import create_app
from grader.cli.main import _alembic_config
from grader.settings import Settings
from tests.service.conftest import PG_ADMIN_URL, REDIS_URL, auth

HEAD = "0019"
DUE = datetime(2026, 3, 19, 23, 59, 59, tzinfo=UTC)
TOKENS = {"prof": "kg_mig-prof", "ta": "kg_mig-ta", "s1": "kg_mig-s1", "s2": "kg_mig-s2-revoked"}

# The gradebook totals main computed on these rows before the migration (at 929868d; checked
# once by running that code on the seeded database): hw4 counts each student's newest scored
# upload, hwb the best final grade.
EXPECTED = {
    "hw4": {
        "mig-s1": 97.0,  # newest upload's re-grade (94) + 3 adjusted; the older upload's 80 does not count
        "mig-s2": 65.0,  # staff chose the older run (70) over the newest (88), which was then adjusted -5
        "mig-s3": 81.0,  # 90, uploaded 4 h after the extended due time and its 2 h grace: one day late, -10%
        "mig-s4": None,  # only an infrastructure failure and a queued run: no grade
        "mig-s5": None,  # enrolled, never uploaded
    },
    "hwb": {
        "mig-s1": 45.0,  # best of 30, 45 and 40+2
        "mig-out": 20.0,
        "mig-ta": 38.0,  # the TA is a student of hwb
    },
}


@dataclass
class Seeded:
    url: str
    runs: dict[str, int]  # name -> run id
    counts: dict[str, int]  # table -> rows before the upgrade


def _revision_before_courses(config: Any) -> str:
    down = ScriptDirectory.from_config(config).get_revision(HEAD).down_revision
    assert isinstance(down, str)
    return down


def _add(conn: sa.Connection, table: sa.Table, **values: Any) -> int:
    return int(conn.execute(table.insert().values(**values)).inserted_primary_key[0])


def _seed(conn: sa.Connection) -> dict[str, int]:
    """A semester at today's schema, written through the tables as they are at that revision."""
    md = sa.MetaData()
    md.reflect(conn)
    t = md.tables
    at = DUE - timedelta(days=20)
    users = {name: _add(conn, t["users"], username=name, login_key=name, role=role, created_at=at)
             for name, role in (("mig-prof", "instructor"), ("mig-ta", "student"), ("mig-s1", "student"),
                                ("mig-s2", "student"), ("mig-s3", "student"), ("mig-s4", "student"),
                                ("mig-s5", "student"), ("mig-out", "student"))}
    hw4 = _add(conn, t["assignments"], slug="hw4", title="Fused kernels", total_points=100, created_at=at,
               release_at=at, due_at=DUE, grace_s=2 * 3600, late_window_s=5 * 86400, late_penalty_per_day=0.1,
               score_policy="latest")
    hwb = _add(conn, t["assignments"], slug="hwb", title="Second", total_points=50, created_at=at,
               score_policy="best")
    for assignment, members in ((hw4, {"mig-prof": "staff", "mig-ta": "staff", "mig-s1": "student",
                                       "mig-s2": "student", "mig-s3": "student", "mig-s4": "student",
                                       "mig-s5": "student"}),
                                (hwb, {"mig-prof": "staff", "mig-ta": "student", "mig-s1": "student",
                                       "mig-out": "student"})):
        for name, role in members.items():
            _add(conn, t["enrollments"], user_id=users[name], assignment_id=assignment, role=role, created_at=at)
    _add(conn, t["extensions"], assignment_id=hw4, user_id=users["mig-s3"], extra_s=86400, reason="flu",
         granted_at=at)
    runs: dict[str, int] = {}

    def upload(name: str, assignment: int, when: datetime, *scores: float | str | None) -> None:
        """A submission and its runs: a score (scored), "infra" (failed), None (queued)."""
        sub = _add(conn, t["submissions"], user_id=users[name], assignment_id=assignment, original_filename="s.zip",
                   size_bytes=10, sha256=hashlib.sha256(f"{name}{when}".encode()).hexdigest(), uploaded_at=when)
        for i, score in enumerate(scores):
            state = "failed" if score == "infra" else "queued" if score is None else "scored"
            run = _add(conn, t["runs"], submission_id=sub, state=state, reason="upload" if i == 0 else "regrade",
                       score=score if isinstance(score, float) else None, created_at=when + timedelta(minutes=i),
                       finished_at=None if score is None else when + timedelta(minutes=i, seconds=50),
                       error_class="infra_error" if score == "infra" else None, attempts=1)
            runs[f"{name}-{assignment}-{when:%d%H}-{i}"] = run
            if isinstance(score, float):
                _add(conn, t["problem_results"], run_id=run, problem_id="1.1", title="Softmax forward",
                     status="passed", points=score, max_points=100)

    upload("mig-s1", hw4, DUE - timedelta(days=3), 80.0)
    upload("mig-s1", hw4, DUE - timedelta(days=1), 92.0, 94.0)
    upload("mig-s2", hw4, DUE - timedelta(days=4), 70.0)
    upload("mig-s2", hw4, DUE - timedelta(days=2), 88.0)
    upload("mig-s3", hw4, DUE + timedelta(hours=30), 90.0)
    upload("mig-s4", hw4, DUE - timedelta(days=1), "infra")
    upload("mig-s4", hw4, DUE - timedelta(hours=1), None)
    for when, score in ((1, 30.0), (2, 45.0), (3, 40.0)):
        upload("mig-s1", hwb, at + timedelta(days=when), score)
    upload("mig-out", hwb, at + timedelta(days=1), 20.0)
    upload("mig-ta", hwb, at + timedelta(days=1), 38.0)
    s1_regrade = runs[f"mig-s1-{hw4}-{DUE - timedelta(days=1):%d%H}-1"]
    s2_old = runs[f"mig-s2-{hw4}-{DUE - timedelta(days=4):%d%H}-0"]
    s1_hwb_last = runs[f"mig-s1-{hwb}-{at + timedelta(days=3):%d%H}-0"]
    prof = users["mig-prof"]
    adjusted = {run: _add(conn, t["grade_adjustments"], run_id=run, points=points, reason="checked by hand",
                          by_id=prof, created_at=DUE)
                for run, points in ((s1_regrade, 3.0), (s2_old, -5.0), (s1_hwb_last, 2.0))}
    _add(conn, t["counted_runs"], assignment_id=hw4, user_id=users["mig-s2"], run_id=s2_old, reason="the later one "
         "was copied", by_id=prof, created_at=DUE)
    _add(conn, t["regrade_requests"], run_id=s1_hwb_last, student_id=users["mig-s1"], reason="2.1 passes for me",
         state="accepted", created_at=DUE, decided_by_id=prof, decided_at=DUE, reply="yes",
         adjustment_id=adjusted[s1_hwb_last])
    _add(conn, t["regrade_requests"], run_id=s1_regrade, student_id=users["mig-s1"], reason="please", state="open",
         created_at=DUE)
    _add(conn, t["roster_jobs"], assignment_id=hwb, requested_by=prof, state="done", created_at=at, lines_done=1,
         lines_total=1, key_digest="0" * 64)
    for owner, scopes in (("prof", "submit read read:all regrade"), ("ta", "submit read"), ("s1", "submit read"),
                          ("s2", "submit read")):
        _add(conn, t["api_tokens"], user_id=users[f"mig-{owner}"], name="old", scopes=scopes, created_at=at,
             token_hash=hashlib.sha256(TOKENS[owner].encode()).hexdigest(),
             revoked_at=DUE if owner == "s2" else None)
    return {"s1_regrade": s1_regrade, "s2_old": s2_old, "hw4": hw4, "hwb": hwb}


COUNTED = ("users", "submissions", "runs", "problem_results", "grade_adjustments", "counted_runs", "regrade_requests",
           "api_tokens", "extensions", "roster_jobs", "enrollments")


def _counts(conn: sa.Connection) -> dict[str, int]:
    return {table: int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()) for table in COUNTED}


@pytest.fixture(scope="module", params=["postgresql", "sqlite"])
def migrated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, Seeded]]:
    data = tmp_path_factory.mktemp(f"migration-{request.param}")
    name = f"kg_mig_{uuid.uuid4().hex[:10]}"
    if request.param == "postgresql":
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1) + f"/{name}"
    else:
        url = f"sqlite:///{Path(data) / 'grader.db'}"
    settings = Settings.from_variables({"KG_DATABASE_URL": url, "KG_DATA_DIR": str(data), "KG_BROKER_URL": REDIS_URL,
                                        "KG_TASK_QUEUE": f"kg-mig-{uuid.uuid4().hex[:8]}"})
    config = _alembic_config(settings)
    command.upgrade(config, _revision_before_courses(config))
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        ids = _seed(conn)
        before = _counts(conn)
    command.upgrade(config, "head")
    yield settings, Seeded(url, ids, before)
    engine.dispose()
    if request.param == "postgresql":
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _rows(url: str, query: str) -> list[tuple[Any, ...]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(sa.text(query))]
    finally:
        engine.dispose()


def test_each_assignment_becomes_a_course_with_its_members(migrated: tuple[Settings, Seeded]) -> None:
    settings, seeded = migrated
    assert _rows(seeded.url, "SELECT slug, title FROM courses ORDER BY slug") == [("hw4", "Fused kernels"),
                                                                               ("hwb", "Second")]
    assert _rows(seeded.url, "SELECT a.slug, c.slug FROM assignments a JOIN courses c ON c.id = a.course_id "
                             "ORDER BY a.slug") == [("hw4", "hw4"), ("hwb", "hwb")]
    members = _rows(seeded.url, "SELECT c.slug, u.username, e.role FROM enrollments e JOIN courses c ON "
                                "c.id = e.course_id JOIN users u ON u.id = e.user_id ORDER BY 1, 2")
    assert members == [("hw4", "mig-prof", "instructor"), ("hw4", "mig-s1", "student"), ("hw4", "mig-s2", "student"),
                       ("hw4", "mig-s3", "student"), ("hw4", "mig-s4", "student"), ("hw4", "mig-s5", "student"),
                       ("hw4", "mig-ta", "instructor"),
                       ("hwb", "mig-out", "student"), ("hwb", "mig-prof", "instructor"), ("hwb", "mig-s1", "student"),
                       ("hwb", "mig-ta", "student")]
    assert _rows(seeded.url, "SELECT c.slug FROM roster_jobs r JOIN courses c ON c.id = r.course_id") == [("hwb",)]
    engine = sa.create_engine(seeded.url)
    with engine.connect() as conn:
        assert _counts(conn) == seeded.counts  # nothing lost: every row of every table is still there
    engine.dispose()


def test_every_gradebook_total_is_unchanged(migrated: tuple[Settings, Seeded]) -> None:
    settings, _ = migrated
    with TestClient(create_app(settings)) as client:
        for slug, expected in EXPECTED.items():
            book = client.get(f"/api/v1/assignments/{slug}/gradebook", headers=auth(TOKENS["prof"]))
            assert book.status_code == 200, book.text
            assert {row["user"]: row["total"] for row in book.json()["rows"]} == expected, slug
        csv = client.get("/api/v1/assignments/hw4/gradebook.csv", headers=auth(TOKENS["prof"]))
        assert csv.status_code == 200 and "mig-s2" in csv.text and "65" in csv.text


def test_every_token_works_as_before(migrated: tuple[Settings, Seeded]) -> None:
    """The instructor's token reads and re-grades everything of both courses; the TA's
    student-scoped token reads its own work but no gradebook (as before: it lacks read:all);
    a student's reads their runs, not another's; the revoked one stays refused."""
    settings, seeded = migrated
    with TestClient(create_app(settings)) as client:
        s1_run = f"/api/v1/runs/{seeded.runs['s1_regrade']}"
        assert client.get(s1_run, headers=auth(TOKENS["s1"])).json()["grade"]["final_score"] == 97.0
        assert client.get(f"/api/v1/runs/{seeded.runs['s2_old']}", headers=auth(TOKENS["s1"])).status_code == 404
        assert client.get(s1_run, headers=auth(TOKENS["prof"])).status_code == 200
        mine = client.get("/api/v1/submissions", headers=auth(TOKENS["ta"]))
        assert mine.status_code == 200 and {item["assignment"] for item in mine.json()["items"]} == {"hwb"}
        refused = client.get("/api/v1/assignments/hw4/gradebook", headers=auth(TOKENS["ta"]))
        assert refused.status_code == 403 and refused.json()["error"]["message"] == "this token lacks the 'read:all' scope"
        assert client.get("/api/v1/submissions", headers=auth(TOKENS["s2"])).status_code == 401
        requests = client.get("/api/v1/assignments/hw4/regrade-requests", headers=auth(TOKENS["prof"])).json()
        assert [r["state"] for r in requests["items"]] == ["open"]
        counted = client.get("/api/v1/assignments/hw4/students/mig-s2/counted-run", headers=auth(TOKENS["prof"]))
        assert counted.json()["run_id"] == seeded.runs["s2_old"] and counted.json()["chosen_by"] == "mig-prof"


def test_downgrade_gives_each_assignment_its_members_back(migrated: tuple[Settings, Seeded]) -> None:
    settings, seeded = migrated
    config = _alembic_config(settings)
    command.downgrade(config, _revision_before_courses(config))
    try:
        assert _rows(seeded.url, "SELECT a.slug, u.username, e.role FROM enrollments e JOIN assignments a ON "
                                 "a.id = e.assignment_id JOIN users u ON u.id = e.user_id WHERE u.username IN "
                                 "('mig-ta', 'mig-prof') ORDER BY 1, 2") == [
            ("hw4", "mig-prof", "staff"), ("hw4", "mig-ta", "staff"), ("hwb", "mig-prof", "staff"),
            ("hwb", "mig-ta", "student")]
        engine = sa.create_engine(seeded.url)
        with engine.connect() as conn:
            assert _counts(conn) == seeded.counts
        engine.dispose()
    finally:
        command.upgrade(config, "head")
