"""REST v1 listing, runs, gradebook (JSON + CSV), bulk re-grade, error bodies, and the `grader`
client commands against a real server (uvicorn on a loopback port), all on real PostgreSQL.

This module's app sends tasks to its own Redis queue that no worker consumes, so the runs
it creates are never graded behind its back; tests finish runs by writing them directly."""
from __future__ import annotations

import csv
import io
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.cli.main import app as cli_app
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, Course, ErrorClass, ProblemResult, Role, Run, RunState, Submission, User, utcnow
from grader.settings import Settings
from tests.fixtures.zips import small_zip
from tests.service.conftest import auth, drop_queues, served
from worker.rubric import load_rubric

PROBLEMS = ("1.1", "1.2", "2.1")


# ---- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def v1_settings(settings: Settings) -> Iterator[Settings]:
    own = settings.model_copy(update={"task_queue": f"kg-test-v1-{uuid.uuid4().hex[:8]}"})
    yield own
    drop_queues(own.task_queue)


@pytest.fixture(scope="module")
def api(v1_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(v1_settings)) as c:
        yield c


@pytest.fixture(scope="module")
def server_url(v1_settings: Settings) -> Iterator[str]:
    with served(v1_settings) as url:
        yield url


class World:
    """Users, tokens and an assignment of this test only (unique names)."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self.tag = uuid.uuid4().hex[:8]
        self.tokens: dict[str, str] = {}
        with session_scope(sessions) as session:
            row = Assignment(slug=f"a-{self.tag}", title=f"Test {self.tag}", course=Course(slug=f"a-{self.tag}", title=f"Test {self.tag}"), total_points=60.0)
            session.add(row)
            session.flush()
            self.slug, self.assignment_id = row.slug, row.id

    def user(self, name: str, role: Role = Role.student) -> str:
        login = f"{name}-{self.tag}"
        with session_scope(self.sessions) as session:
            self.tokens[name] = issue_token(session, get_or_create_user(session, login, role), "test")
        return login

    def submission(self, name: str, runs: list[dict[str, Any]], age_s: float = 0) -> int:
        """A submission of `name` with finished runs: dicts of state, score, error, points."""
        with session_scope(self.sessions) as session:
            user = session.scalar(select(User).where(User.username == f"{name}-{self.tag}"))
            sub = Submission(user=user, assignment_id=self.assignment_id, original_filename=f"{name}.zip",
                             size_bytes=10, sha256=uuid.uuid4().hex * 2,
                             uploaded_at=utcnow() - timedelta(seconds=age_s))
            session.add(sub)
            for i, spec in enumerate(runs):
                run = Run(submission=sub, reason="upload" if i == 0 else "regrade")
                finish(run, **spec)
                session.add(run)
            session.flush()
            return sub.id


def finish(run: Run, state: str = "scored", score: float | None = None, error: str | None = None,
           points: tuple[float, ...] | None = None) -> None:
    """Make `run` final the way the worker records it (results for a scored run)."""
    run.state = RunState(state)
    run.error_class = ErrorClass(error) if error else None
    run.finished_at = utcnow()
    run.enqueued_at = run.enqueued_at or utcnow()
    if state == "scored":
        pts = points if points is not None else (float(score or 0), 0.0, 0.0)
        run.score = sum(pts) if score is None else score
        run.results = [ProblemResult(problem_id=pid, title=f"Problem {pid}", status="passed" if p == 20 else "failed",
                                     points=p, max_points=20.0, message=None if p == 20 else f"lost {20 - p:g}")
                       for pid, p in zip(PROBLEMS, pts)]


@pytest.fixture
def world(sessions: sessionmaker[Session]) -> World:
    return World(sessions)


def _runs_of(sessions: sessionmaker[Session], submission_ids: list[int]) -> list[Run]:
    with session_scope(sessions) as session:
        rows = list(session.scalars(select(Run).where(Run.submission_id.in_(submission_ids)).order_by(Run.id)))
        session.expunge_all()
        return rows


def _assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == code and isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


# ---- listing ------------------------------------------------------------------------------


def test_listing_is_paginated_newest_first_and_isolated(api: TestClient, world: World) -> None:
    a_login, b_login = world.user("a"), world.user("b")
    world.user("staff", Role.instructor)
    a_ids = [world.submission("a", [{"score": 10.0 * i}], age_s=100 - i) for i in range(5)]  # a_ids[-1] newest
    b_ids = [world.submission("b", [{"state": "failed", "error": "build_error"}]) for _ in range(2)]

    seen, url, pages = [], f"/api/v1/submissions?page_size=2&assignment={world.slug}", 0
    while url:
        body = api.get(url, headers=auth(world.tokens["a"])).json()
        assert body["total"] == 5 and body["page_size"] == 2 and len(body["items"]) <= 2
        assert all(item["user"] == a_login for item in body["items"])
        seen += [item["id"] for item in body["items"]]
        url, pages = body["next"], pages + 1
        if url:
            assert "page_size=2" in url and f"assignment={world.slug}" in url
    assert pages == 3 and seen == a_ids[::-1]

    first = api.get("/api/v1/submissions", headers=auth(world.tokens["a"]), params={"page_size": 1}).json()["items"][0]
    assert first["latest_run"]["state"] == "scored" and first["latest_run"]["score"] == 40.0
    assert first["run_count"] == 1 and first["url"] == f"/api/v1/submissions/{a_ids[-1]}"

    # A student never sees another's submissions, even by asking for them.
    b_view = api.get("/api/v1/submissions", headers=auth(world.tokens["b"])).json()
    assert b_view["total"] == 2 and sorted(i["id"] for i in b_view["items"]) == sorted(b_ids)
    _assert_error(api.get("/api/v1/submissions", headers=auth(world.tokens["b"]), params={"user": a_login}),
                  403, "forbidden")
    own = api.get("/api/v1/submissions", headers=auth(world.tokens["b"]), params={"user": b_login})
    assert own.status_code == 200 and own.json()["total"] == 2

    staff = auth(world.tokens["staff"])
    assert api.get("/api/v1/submissions", headers=staff, params={"assignment": world.slug}).json()["total"] == 7
    only_a = api.get("/api/v1/submissions", headers=staff, params={"user": a_login, "page_size": 100}).json()
    assert only_a["total"] == 5 and only_a["next"] is None
    _assert_error(api.get("/api/v1/submissions", headers=staff, params={"user": "nobody-" + world.tag}), 404,
                  "not_found")
    last = api.get("/api/v1/submissions", headers=staff, params={"user": a_login, "page": 3, "page_size": 2}).json()
    assert [i["id"] for i in last["items"]] == [a_ids[0]] and last["next"] is None
    beyond = api.get("/api/v1/submissions", headers=staff, params={"user": a_login, "page": 9}).json()
    assert beyond["items"] == [] and beyond["total"] == 5


def test_page_bounds_are_validated(api: TestClient, tokens: dict[str, str]) -> None:
    for params in ({"page_size": 101}, {"page_size": 0}, {"page": 0}, {"page": "x"}):
        error = _assert_error(api.get("/api/v1/submissions", headers=auth(tokens["alice"]), params=params),
                              422, "validation_error")
        assert error["details"] and error["details"][0]["loc"][0] == "query"


def test_runs_of_a_submission(api: TestClient, world: World) -> None:
    world.user("a"), world.user("b"), world.user("staff", Role.instructor)
    sid = world.submission("a", [{"points": (20.0, 15.0, 5.0)}, {"state": "failed", "error": "infra_error"}])
    runs = api.get(f"/api/v1/submissions/{sid}/runs", headers=auth(world.tokens["a"]))
    assert runs.status_code == 200
    items = runs.json()["items"]
    assert [i["state"] for i in items] == ["scored", "failed"]
    assert items[0]["problems"] == {"1.1": 20.0, "1.2": 15.0, "2.1": 5.0} and items[0]["score"] == 40.0
    assert items[1]["error_class"] == "infra_error" and items[1]["problems"] == {}
    assert items[0]["url"] == f"/api/v1/runs/{items[0]['id']}"
    # Someone else's submission reads as absent, on every route that names it.
    _assert_error(api.get(f"/api/v1/submissions/{sid}/runs", headers=auth(world.tokens["b"])), 404, "not_found")
    _assert_error(api.get(f"/api/v1/submissions/{sid}", headers=auth(world.tokens["b"])), 404, "not_found")
    _assert_error(api.get(f"/api/v1/runs/{items[0]['id']}", headers=auth(world.tokens["b"])), 404, "not_found")
    _assert_error(api.get("/api/v1/submissions/999999999/runs", headers=auth(world.tokens["a"])), 404, "not_found")
    assert api.get(f"/api/v1/submissions/{sid}/runs", headers=auth(world.tokens["staff"])).status_code == 200


# ---- gradebook ----------------------------------------------------------------------------


def _seed_gradebook(world: World) -> dict[str, Any]:
    logins = {n: world.user(n) for n in ("s1", "s2", "s3", "s4")}
    world.user("staff", Role.instructor)
    ids = {
        # s1: an older 55, a newer 40, then an infrastructure failure of the newer upload.
        "s1_old": world.submission("s1", [{"points": (20.0, 20.0, 15.0)}], age_s=50),
        "s1_new": world.submission("s1", [{"points": (20.0, 10.0, 10.0)},
                                          {"state": "failed", "error": "infra_error"}], age_s=10),
        # s2: only a build error: no scored run.
        "s2": world.submission("s2", [{"state": "failed", "error": "build_error"}]),
        # s3: one upload, scored 30 then re-graded to 45 (the re-grade is its grade).
        "s3": world.submission("s3", [{"points": (10.0, 10.0, 10.0)}, {"points": (20.0, 20.0, 5.0)}]),
    }
    return {"logins": logins, "ids": ids}


def test_gradebook_json_latest_and_best(api: TestClient, world: World) -> None:
    seeded = _seed_gradebook(world)
    logins = seeded["logins"]
    latest = api.get(f"/api/v1/assignments/{world.slug}/gradebook", headers=auth(world.tokens["staff"]))
    assert latest.status_code == 200, latest.text
    book = latest.json()
    assert book["policy"] == "latest" and book["assignment"] == world.slug
    assert [p["problem_id"] for p in book["problems"]] == list(PROBLEMS)
    rows = {r["user"]: r for r in book["rows"]}
    s1, s2, s3, s4 = (rows[logins[n]] for n in ("s1", "s2", "s3", "s4"))
    assert s1["total"] == 40.0 and s1["problems"] == {"1.1": 20.0, "1.2": 10.0, "2.1": 10.0}
    assert s1["submissions"] == 2 and s1["latest"]["submission_id"] == seeded["ids"]["s1_new"]
    assert s1["best"]["score"] == 55.0 and s1["best"]["submission_id"] == seeded["ids"]["s1_old"]
    assert s2["total"] is None and s2["submissions"] == 1 and s2["problems"] == {} and s2["run_id"] is None
    assert s3["total"] == 45.0 and s3["best"]["run_id"] == s3["latest"]["run_id"] == s3["run_id"]
    assert s4["total"] is None and s4["submissions"] == 0  # on the roster, never submitted
    staff_login = f"staff-{world.tag}"
    assert staff_login not in rows  # instructors are not graded

    best = api.get(f"/api/v1/assignments/{world.slug}/gradebook", headers=auth(world.tokens["staff"]),
                   params={"policy": "best"}).json()
    rows = {r["user"]: r for r in best["rows"]}
    assert rows[logins["s1"]]["total"] == 55.0 and rows[logins["s1"]]["problems"]["2.1"] == 15.0
    assert rows[logins["s3"]]["total"] == 45.0

    _assert_error(api.get(f"/api/v1/assignments/{world.slug}/gradebook", headers=auth(world.tokens["staff"]),
                          params={"policy": "worst"}), 422, "validation_error")
    _assert_error(api.get("/api/v1/assignments/no-such-hw/gradebook", headers=auth(world.tokens["staff"])),
                  404, "not_found")


def test_gradebook_is_staff_only(api: TestClient, world: World) -> None:
    _seed_gradebook(world)
    for path in ("gradebook", "gradebook.csv", "gradebook-detailed.csv"):
        error = _assert_error(api.get(f"/api/v1/assignments/{world.slug}/{path}", headers=auth(world.tokens["s1"])),
                              403, "forbidden")
        assert "read:all" in error["message"]
        _assert_error(api.get(f"/api/v1/assignments/{world.slug}/{path}"), 401, "unauthorized")


def test_gradebook_csv_is_canvas_import_format(api: TestClient, world: World) -> None:
    logins = _seed_gradebook(world)["logins"]
    response = api.get(f"/api/v1/assignments/{world.slug}/gradebook.csv", headers=auth(world.tokens["staff"]),
                       params={"policy": "best"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert f'filename="{world.slug}-gradebook-best.csv"' in response.headers["content-disposition"]
    table = list(csv.reader(io.StringIO(response.text)))
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", f"Test {world.tag}"]
    assert table[1] == ["    Points Possible", "", "", "", "", "60"]
    rows = {r[3]: r for r in table[2:]}
    assert rows[logins["s1"]] == [logins["s1"], "", "", logins["s1"], "", "55"]
    assert rows[logins["s2"]] == [logins["s2"], "", "", logins["s2"], "", ""]  # blank: Canvas keeps its value
    assert rows[logins["s3"]][5] == "45"
    assert [r[3] for r in table[2:]] == sorted(r[3] for r in table[2:])  # by login


def test_gradebook_detailed_csv(api: TestClient, world: World) -> None:
    logins = _seed_gradebook(world)["logins"]
    response = api.get(f"/api/v1/assignments/{world.slug}/gradebook-detailed.csv",
                       headers=auth(world.tokens["staff"]), params={"policy": "best"})
    assert response.status_code == 200
    assert f'filename="{world.slug}-gradebook-detailed-best.csv"' in response.headers["content-disposition"]
    table = list(csv.reader(io.StringIO(response.text)))
    assert table[0] == ["Student", "SIS Login ID", f"Test {world.tag} final (60)", "Raw score before late penalty (60)",
                        "Late penalty (points)", "Lateness", "Late days charged", "Adjustment (points)",
                        "Adjustment reasons", "Grade reason",
                        "1.1 Problem 1.1 raw (20)", "1.2 Problem 1.2 raw (20)", "2.1 Problem 2.1 raw (20)"]
    rows = {r[1]: r for r in table[1:]}
    assert rows[logins["s1"]] == [logins["s1"], logins["s1"], "55", "55", "0", "on_time", "0", "0", "",
                                  "No due date.", "20", "20", "15"]
    assert rows[logins["s2"]] == [logins["s2"], logins["s2"]] + [""] * 11  # blank: Canvas keeps its value
    assert rows[logins["s3"]][2:5] == ["45", "45", "0"] and rows[logins["s3"]][10:] == ["20", "20", "5"]
    assert all(len(r) == 13 for r in table)


def test_gradebook_columns_follow_the_rubric(api: TestClient, tokens: dict[str, str]) -> None:
    book = api.get("/api/v1/assignments/hw4/gradebook", headers=auth(tokens["staff"])).json()
    assert [p["problem_id"] for p in book["problems"]] == [p.id for p in load_rubric("hw4").problems]
    assert book["total_points"] == load_rubric("hw4").total_points


# ---- bulk re-grade ------------------------------------------------------------------------


def test_regrade_by_ids_all_and_latest(api: TestClient, world: World, sessions: sessionmaker[Session]) -> None:
    world.user("a"), world.user("b"), world.user("staff", Role.instructor)
    a_old = world.submission("a", [{"score": 10.0}], age_s=30)
    a_new = world.submission("a", [{"score": 20.0}], age_s=20)
    b_one = world.submission("b", [{"state": "failed", "error": "infra_error"}], age_s=10)
    path, staff = f"/api/v1/assignments/{world.slug}/regrade", auth(world.tokens["staff"])

    _assert_error(api.post(path, headers=auth(world.tokens["a"]), json={"submissions": [a_old]}), 403, "forbidden")
    _assert_error(api.post(path, headers=staff, json={"submissions": "everything"}), 422, "validation_error")
    _assert_error(api.post(path, headers=staff, json={}), 422, "validation_error")
    before = len(_runs_of(sessions, [a_old, a_new, b_one]))
    error = _assert_error(api.post(path, headers=staff, json={"submissions": [a_old, 999999999]}), 404, "not_found")
    assert "999999999" in error["message"]
    assert len(_runs_of(sessions, [a_old, a_new, b_one])) == before  # all or nothing

    by_ids = api.post(path, headers=staff, json={"submissions": [b_one, a_old]})
    assert by_ids.status_code == 201, by_ids.text
    assert by_ids.json()["submission_ids"] == [b_one, a_old] and by_ids.json()["queued"] == 2

    everything = api.post(path, headers=staff, json={"submissions": "all"}).json()
    # Fair order: every student's newest first, then the older ones.
    assert everything["submission_ids"] in ([a_new, b_one, a_old], [b_one, a_new, a_old])
    latest = api.post(path, headers=staff, json={"submissions": "latest"}).json()
    assert sorted(latest["submission_ids"]) == sorted([a_new, b_one])

    new_ids = by_ids.json()["run_ids"] + everything["run_ids"] + latest["run_ids"]
    runs = {r.id: r for r in _runs_of(sessions, [a_old, a_new, b_one])}
    assert len(runs) == before + 7 and set(new_ids) <= set(runs)
    assert all(runs[i].state == RunState.queued and runs[i].reason == "regrade" for i in new_ids)
    # Fair share: one run per student in the broker, the student's others wait to follow it.
    owner = {a_old: "a", a_new: "a", b_one: "b"}
    sent = [owner[runs[i].submission_id] for i in new_ids if runs[i].enqueued_at is not None]
    assert sorted(sent) == ["a", "b"], sent
    # A submission of another assignment is not re-graded through this one.
    with session_scope(sessions) as session:
        other = session.scalar(select(Submission.id).where(Submission.assignment_id != world.assignment_id).limit(1))
    if other is not None:
        _assert_error(api.post(path, headers=staff, json={"submissions": [other]}), 404, "not_found")


# ---- errors and OpenAPI -------------------------------------------------------------------


def test_error_bodies_are_consistent(api: TestClient, tokens: dict[str, str]) -> None:
    no_token = api.get("/api/v1/submissions")
    _assert_error(no_token, 401, "unauthorized")
    assert no_token.headers["www-authenticate"] == "Bearer"
    _assert_error(api.get("/api/v1/runs/1", headers=auth("kg_wrong")), 401, "unauthorized")
    _assert_error(api.get("/api/v1/no-such-route", headers=auth(tokens["alice"])), 404, "not_found")
    _assert_error(api.delete("/api/v1/submissions", headers=auth(tokens["alice"])), 405, "method_not_allowed")
    _assert_error(api.get("/api/v1/runs/not-a-number", headers=auth(tokens["alice"])), 422, "validation_error")
    _assert_error(api.post("/api/v1/submissions/1/regrade", headers=auth(tokens["alice"])), 403, "forbidden")
    # Outside /api/ FastAPI's own answers are kept.
    page = api.get("/definitely-not-a-page-" + uuid.uuid4().hex)
    assert page.status_code == 404
    if page.headers.get("content-type", "").startswith("application/json"):
        assert "error" not in page.json()


def test_openapi_documents_every_v1_route(api: TestClient) -> None:
    spec = api.get("/openapi.json").json()
    expected = {
        ("/api/v1/submissions", "get"), ("/api/v1/submissions", "post"),
        ("/api/v1/submissions/{submission_id}", "get"), ("/api/v1/submissions/{submission_id}/runs", "get"),
        ("/api/v1/submissions/{submission_id}/regrade", "post"), ("/api/v1/runs/{run_id}", "get"),
        ("/api/v1/assignments/{slug}/gradebook", "get"), ("/api/v1/assignments/{slug}/gradebook.csv", "get"),
        ("/api/v1/assignments/{slug}/regrade", "post"),
        ("/api/v1/courses/{slug}/ta-powers", "get"), ("/api/v1/courses/{slug}/ta-powers", "put"),
        ("/api/v1/courses/{slug}/quota", "get"), ("/api/v1/courses/{slug}/quota", "put"),
        ("/api/v1/assignments/{slug}/quota", "get"), ("/api/v1/assignments/{slug}/quota", "put"),
    }
    for path, method in expected:
        op = spec["paths"][path][method]
        assert op.get("summary"), (path, method)
        ok = next(code for code in op["responses"] if code.startswith("2"))
        assert op["responses"][ok].get("content"), (path, method)
        for code in ("401", "403", "404"):
            schema = op["responses"][code]["content"]["application/json"]["schema"]
            assert schema["$ref"].endswith("/ErrorBody"), (path, method, code)
    assert "ErrorBody" in spec["components"]["schemas"]
    page_params = {p["name"] for p in spec["paths"]["/api/v1/submissions"]["get"]["parameters"]}
    assert {"page", "page_size", "user", "assignment"} <= page_params


# ---- the CLI client -----------------------------------------------------------------------

runner = CliRunner()


def _cli(args: list[str], url: str, token: str | None) -> Any:
    env = {"KG_URL": url, **({"KG_TOKEN": token} if token is not None else {})}
    return runner.invoke(cli_app, args, env=env, catch_exceptions=False)


def _finish_when_uploaded(sessions: sessionmaker[Session], filename: str, **spec: Any) -> threading.Thread:
    """Play the worker: when the upload named `filename` has a run, record it final."""

    def mark() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with session_scope(sessions) as session:
                run = session.scalar(select(Run).join(Submission).where(Submission.original_filename == filename))
                if run is not None:
                    time.sleep(0.3)  # let the client see it queued first
                    finish(run, **spec)
                    return
            time.sleep(0.1)

    thread = threading.Thread(target=mark, daemon=True)
    thread.start()
    return thread


def _zip(tmp_path: Path) -> Path:
    path = tmp_path / f"hw-{uuid.uuid4().hex[:8]}.zip"
    # A small zip (content does not matter here) with a tag of its own: the same bytes again
    # within the re-send window would be answered with the earlier submission
    path.write_bytes(small_zip(path.stem))
    return path


def test_cli_submit_wait_prints_the_table_and_checks_the_threshold(
    server_url: str, tokens: dict[str, str], sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    archive = _zip(tmp_path)
    marker = _finish_when_uploaded(sessions, archive.name, points=(20.0, 17.5, 5.0))
    result = _cli(["submit", str(archive), "--wait", "--min-score", "40", "--poll", "0.2"], server_url,
                  tokens["alice"])
    marker.join()
    assert result.exit_code == 0, result.output
    assert "scored" in result.stdout and "score 42.5" in result.stdout
    assert "1.2 Problem 1.2" in result.stdout and "17.5 / 20" in result.stdout and "lost 2.5" in result.stdout
    assert "42.5 / 60" in result.stdout  # total line
    assert "OK: score 42.5 >= 40" in result.stderr

    archive = _zip(tmp_path)
    marker = _finish_when_uploaded(sessions, archive.name, points=(20.0, 0.0, 0.0))
    low = _cli(["submit", str(archive), "--wait", "--min-score", "40", "--poll", "0.2"], server_url,
               tokens["alice"])
    marker.join()
    assert low.exit_code == 1 and "below --min-score 40" in low.stderr and "score 20" in low.stdout


def test_cli_submit_exit_codes(
    server_url: str, tokens: dict[str, str], sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    archive = _zip(tmp_path)
    marker = _finish_when_uploaded(sessions, archive.name, state="failed", error="build_error")
    failed = _cli(["submit", str(archive), "--wait", "--poll", "0.2"], server_url, tokens["bob"])
    marker.join()
    assert failed.exit_code == 1 and "build_error" in failed.stdout and "FAIL" in failed.stderr

    timed_out = _cli(["submit", str(_zip(tmp_path)), "--wait", "--timeout", "1", "--poll", "0.2"], server_url,
                     tokens["bob"])
    assert timed_out.exit_code == 4 and "timed out" in timed_out.stderr

    no_wait = _cli(["submit", str(_zip(tmp_path))], server_url, tokens["bob"])
    assert no_wait.exit_code == 0 and "Upload stored" in no_wait.stdout

    refused = _cli(["submit", str(_zip(tmp_path))], server_url, "kg_wrong")
    assert refused.exit_code == 3 and "HTTP 401" in refused.stderr and "unauthorized" in refused.stderr
    unknown = _cli(["submit", str(_zip(tmp_path)), "--assignment", "nope"], server_url, tokens["bob"])
    assert unknown.exit_code == 3 and "no assignment 'nope'" in unknown.stderr
    no_token = _cli(["status", "1"], server_url, None)
    assert no_token.exit_code == 2 and "KG_TOKEN" in no_token.stderr
    unreachable = _cli(["status", "1", "--url", "http://127.0.0.1:9"], server_url, tokens["bob"])
    assert unreachable.exit_code == 3 and "cannot reach" in unreachable.stderr


def test_cli_status_regrade_and_export(
    server_url: str, world: World, sessions: sessionmaker[Session], tmp_path: Path
) -> None:
    logins = _seed_gradebook(world)["logins"]
    sid = world.submission("s4", [{"points": (20.0, 20.0, 20.0)}])
    run_id = _runs_of(sessions, [sid])[0].id

    shown = _cli(["status", str(run_id), "--token", world.tokens["s4"]], server_url, None)
    assert shown.exit_code == 0 and f"run {run_id}: scored" in shown.stdout and "60 / 60" in shown.stdout
    other = _cli(["status", str(run_id)], server_url, world.tokens["s1"])
    assert other.exit_code == 3 and "HTTP 404" in other.stderr
    as_json = _cli(["status", str(run_id), "--json"], server_url, world.tokens["staff"])
    assert as_json.exit_code == 0 and '"score": 60.0' in as_json.stdout

    denied = _cli(["regrade", str(sid)], server_url, world.tokens["s4"])
    assert denied.exit_code == 3 and "HTTP 403" in denied.stderr
    regraded = _cli(["regrade", str(sid)], server_url, world.tokens["staff"])
    assert regraded.exit_code == 0 and "new run" in regraded.stdout
    assert len(_runs_of(sessions, [sid])) == 2

    out = tmp_path / "grades.csv"
    exported = _cli(["export", "--assignment", world.slug, "--out", str(out)], server_url, world.tokens["staff"])
    assert exported.exit_code == 0, exported.output
    table = {r[3]: r for r in csv.reader(io.StringIO(out.read_text()))}
    assert table[logins["s1"]][5] == "40" and table[logins["s4"]][5] == "60"
    detailed = _cli(["export", "--assignment", world.slug, "--format", "detailed-csv"], server_url,
                    world.tokens["staff"])
    assert detailed.exit_code == 0 and detailed.stdout.startswith("Student,SIS Login ID,"), detailed.output
    best = _cli(["export", "--assignment", world.slug, "--format", "json", "--policy", "best"], server_url,
                world.tokens["staff"])
    assert best.exit_code == 0 and '"policy": "best"' in best.stdout
    student = _cli(["export", "--assignment", world.slug], server_url, world.tokens["s1"])
    assert student.exit_code == 3 and "forbidden" in student.stderr
    bad = _cli(["export", "--format", "xml"], server_url, world.tokens["staff"])
    assert bad.exit_code == 2


def test_cli_counted_shows_chooses_and_clears(server_url: str, world: World, sessions: sessionmaker[Session]) -> None:
    login = world.user("c1")
    world.user("staff", Role.instructor)
    older = _runs_of(sessions, [world.submission("c1", [{"score": 50.0}], age_s=60)])[0].id
    newer = _runs_of(sessions, [world.submission("c1", [{"score": 20.0}])])[0].id
    ask = ["counted", login, "--assignment", world.slug]

    shown = _cli(ask, server_url, world.tokens["staff"])
    assert shown.exit_code == 0 and f"run {newer} counts (the latest policy's pick)" in shown.stdout
    chosen = _cli([*ask, "--run", str(older), "--reason", "the later run hit a node fault"], server_url,
                  world.tokens["staff"])
    assert chosen.exit_code == 0, chosen.output
    assert f"run {older} counts (chosen by staff-{world.tag}): the later run hit a node fault" in chosen.stdout
    refused = _cli([*ask, "--run", str(older)], server_url, world.tokens["c1"])
    assert refused.exit_code == 3 and "HTTP 403" in refused.stderr
    cleared = _cli([*ask, "--clear"], server_url, world.tokens["staff"])
    assert cleared.exit_code == 0 and f"run {newer} counts" in cleared.stdout
    assert _cli([*ask, "--run", "1", "--clear"], server_url, world.tokens["staff"]).exit_code == 2


def test_gradebook_query_count_does_not_grow_with_students(
    world: World, sessions: sessionmaker[Session]
) -> None:
    """No N+1: the same number of statements for 3 and for 30 students."""
    from sqlalchemy import event

    from grader.reads.gradebook_reads import gradebook
    from grader.reads.submission_reads import list_submissions

    def count_statements(n_students: int) -> int:
        for i in range(n_students):
            world.user(f"n{n_students}-{i}")
            world.submission(f"n{n_students}-{i}", [{"score": 5.0}, {"score": 6.0}])
        statements = []
        with session_scope(sessions) as session:
            engine = session.get_bind()
            listener = lambda *args: statements.append(args[2])  # noqa: E731
            event.listen(engine, "before_cursor_execute", listener)
            try:
                assignment = session.get(Assignment, world.assignment_id)
                book = gradebook(session, assignment, "best")
                page = list_submissions(session, assignment_id=world.assignment_id, page_size=100)
                _ = [(s.user.username, s.assignment.slug, len(s.runs)) for s in page.items]
                _ = [(r.username, r.graded and r.graded.problems) for r in book.rows]
            finally:
                event.remove(engine, "before_cursor_execute", listener)
        return len(statements)

    assert count_statements(3) == count_statements(30)
    with session_scope(sessions) as session:
        total = session.scalar(select(func.count()).select_from(Submission)
                               .where(Submission.assignment_id == world.assignment_id))
    assert total == 33
