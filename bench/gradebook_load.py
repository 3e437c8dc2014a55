"""Load time of the instructor's gradebook page and its exports with a seeded class.

    .venv/bin/python bench/gradebook_load.py [--students 500] [--runs 3] [--requests 20]
        [--database-url postgresql+psycopg://USER@HOST:PORT/EMPTY_DB] [--record]

Seeds a fresh database (a temp SQLite file by default; with --database-url an existing,
empty PostgreSQL database, migrated here) with N students x R scored runs each, every run with
its five per-problem results as the worker stores them (points, status, message, details with
the score and measurement); students have roster names and sections. Serves the app
in-process (Starlette's TestClient), logs in as an instructor through the login form, then times
GET /gradebook (its first page of KG_GRADEBOOK_PAGE_SIZE students, default 100, with the SVG
charts of every student), a later page, a sorted and filtered view, and the exports (CSV, JSON:
every student): warm-up requests first, then --requests timed requests each, as median, p90,
min and max in ms. Last, a Prometheus scrape of GET /api/v1/metrics with the instructor's API
token, once every seeded run is made to have ended in the last hour (the deadline's worst case:
the scrape reads each recent run's duration).
Prints a table; --record files it in docs/benchmarks/gradebook.md with the machine, date, commit
and command.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT))

from benchmarks_md import add_smoke_flag, publish, smoke  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import select, update  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from grader.app import create_app  # noqa: E402
from grader.auth.credentials import SCOPE_READ_ALL, issue_token  # noqa: E402
from grader.cli.main import init_database  # noqa: E402
from grader.course.courses import course_of_free_assignments  # noqa: E402
from grader.course.membership import enroll  # noqa: E402
from grader.db import make_engine, make_session_factory, session_scope  # noqa: E402
from grader.models import (  # noqa: E402
    CourseRole,
    Enrollment,
    ProblemResult,
    Role,
    Run,
    RunState,
    Submission,
    User,
    utcnow,
)
from grader.passwords import set_password  # noqa: E402
from grader.service import get_assignment  # noqa: E402
from grader.settings import Settings  # noqa: E402
from worker.rubric import load_rubric  # noqa: E402

PASSWORD = "bench password 1"
PAGES = (
    ("gradebook page 1 (HTML, charts)", "/gradebook"),
    ("gradebook page 3", "/gradebook?page=3"),
    ("gradebook sorted by score, filtered", "/gradebook?sort=score&dir=desc&min_score=40&section=B"),
    ("CSV export", "/gradebook.csv"),
    ("JSON export", "/gradebook.json"),
)
ASSIGNMENT = "hw4"
WARMUP = 3


def _problem_result(problem_id: str, title: str, max_points: float, fraction: float, seed: int) -> ProblemResult:
    points = round(max_points * fraction, 2)
    passed = fraction >= 0.999
    speedup = 1.0 + (seed % 97) / 10
    return ProblemResult(
        problem_id=problem_id, title=title, status="passed" if passed else "failed", points=points,
        max_points=max_points,
        message=None if passed else f"speedup {speedup:.3g}x below target",
        details={
            "score": {"points": points, "max_points": max_points, "figure": "student", "target": 6.5,
                      "speedup": {"speedup": speedup, "low": speedup * 0.95, "high": speedup * 1.05, "trials": 30},
                      "reasons": [] if passed else [f"speedup {speedup:.3g}x below target 6.5x"], "notes": []},
            "measurement": {
                "abi_cases": [{"case_id": f"abi-{k}", "ok": True, "shape": [16, 8, 64, 64]} for k in range(4)],
                "binding_cases": [{"case_id": f"bind-{k}", "ok": True, "shape": [8, 8, 128, 128]} for k in range(3)],
                "first_failure": None,
            },
        },
    )


def seed(settings: Settings, students: int, runs_per_student: int) -> None:
    problems = load_rubric(ASSIGNMENT).problems
    sessions = make_session_factory(make_engine(settings))
    start = utcnow() - timedelta(days=7)
    with session_scope(sessions) as session:
        prof = User(username="bench-prof", role=Role.instructor)
        set_password(prof, PASSWORD, settings.argon2)
        session.add(prof)
        course = course_of_free_assignments(session, "bench", "Gradebook bench")  # holds hw4 from here on
        assignment = get_assignment(session, ASSIGNMENT)
        session.flush()
        enroll(session, prof, course, CourseRole.instructor)  # the gradebook is its staff's
        for s in range(students):
            user = User(username=f"student{s:04d}@uni.edu", role=Role.student)
            session.add(user)
            session.flush()
            # the roster's name and section live on the enrollment (grader.course.roster_entries)
            session.add(Enrollment(user_id=user.id, course_id=course.id, role=CourseRole.student,
                                   full_name=f"Student {s:04d}", section="ABCD"[s % 4]))
            for r in range(runs_per_student):
                when = start + timedelta(minutes=s * runs_per_student + r)
                sub = Submission(user=user, assignment=assignment, original_filename="llmsys_hw4.zip",
                                 size_bytes=180_000 + s, sha256=f"{s:032x}{r:032x}", uploaded_at=when)
                fractions = [((s * 7 + r * 13 + i * 5) % 11) / 10 for i in range(len(problems))]
                run = Run(submission=sub, state=RunState.scored, reason="upload", attempts=1, created_at=when,
                          enqueued_at=when, started_at=when, finished_at=when + timedelta(minutes=3),
                          worker_host="bench", stages={"build": {"status": "ok", "seconds": 41.0, "log": "nvcc ok\n"}},
                          results=[_problem_result(p.id, p.title, p.points, min(f, 1.0), s + r + i)
                                   for i, (p, f) in enumerate(zip(problems, fractions))])
                run.score = round(sum(pr.points for pr in run.results), 2)
                session.add(run)
            if s % 100 == 99:
                session.flush()


def log_in(client: TestClient) -> None:
    page = client.get("/login").text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert csrf, "no CSRF field on the login page"
    response = client.post("/login", data={"csrf_token": csrf.group(1), "username": "bench-prof",
                                           "password": PASSWORD}, follow_redirects=False)
    assert response.status_code == 303, response.text


def measure(client: TestClient, path: str, requests: int,
            headers: dict[str, str] | None = None) -> tuple[list[float], int]:
    size = 0
    for _ in range(WARMUP):
        response = client.get(path, headers=headers)
        assert response.status_code == 200, (path, response.status_code)
        size = len(response.content)
    samples = []
    for _ in range(requests):
        started = time.perf_counter()
        response = client.get(path, headers=headers)
        samples.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
    return samples, size


def _recent_runs_token(settings: Settings) -> str:
    """Every seeded run made to have ended half an hour ago; an API token of the instructor."""
    with session_scope(make_session_factory(make_engine(settings))) as session:
        session.execute(update(Run).values(finished_at=utcnow() - timedelta(minutes=30)))
        prof = session.scalars(select(User).where(User.username == "bench-prof")).one()
        return issue_token(session, prof, "bench metrics", (SCOPE_READ_ALL,))


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else values[0]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=PROJECT_ROOT).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3, help="scored runs per student")
    parser.add_argument("--requests", type=int, default=20, help="timed requests per page, after warm-up")
    parser.add_argument("--database-url", default="", help="an empty database (default: a temp SQLite file)")
    parser.add_argument("--record", action="store_true", help="file the table in docs/benchmarks/gradebook.md")
    add_smoke_flag(parser)
    args = parser.parse_args()
    if smoke(args, parser):
        args.students, args.runs, args.requests = 3, 1, 1

    with tempfile.TemporaryDirectory(prefix="kg-bench-gradebook-") as tmp:
        settings = Settings(data_dir=Path(tmp) / "data", database_url=args.database_url, broker_url="memory://",
                            secret_key="bench-secret")
        backend = make_url(settings.resolved_database_url).get_backend_name()
        init_database(settings)
        started = time.perf_counter()
        seed(settings, args.students, args.runs)
        seed_s = time.perf_counter() - started
        results = {}
        with TestClient(create_app(settings)) as client:
            log_in(client)
            for label, path in PAGES:
                results[label] = measure(client, path, args.requests)
            results[f"metrics scrape ({args.students * args.runs} runs ended in the last hour)"] = measure(
                client, "/api/v1/metrics", args.requests, {"Authorization": f"Bearer {_recent_runs_token(settings)}"})

    command = "bench/gradebook_load.py" + (" --database-url postgresql+psycopg://postgres@127.0.0.1:5432/<empty db>"
                                           if backend == "postgresql" else "") + " --record"
    if (args.students, args.runs, args.requests) != (500, 3, 20):
        command += f" --students {args.students} --runs {args.runs} --requests {args.requests}"
    lines = [
        f"### Gradebook load, {args.students} students x {args.runs} scored runs, {backend} ({date.today().isoformat()})",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}; "
        f"commit {_git('rev-parse', '--short', 'HEAD')}. App in-process (TestClient, no network), logged in as an "
        f"instructor; {args.students * args.runs} runs with {args.students * args.runs * 5} problem results seeded "
        f"in {seed_s:.1f} s; {settings.gradebook_page_size} students per gradebook page. {WARMUP} warm-up requests, "
        f"then {args.requests} timed requests per page, ms.",
        f"Command: `.venv/bin/python {command}`",
        "",
        "| page | median ms | p90 ms | min ms | max ms | body |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for label, (samples, size) in results.items():
        lines.append(f"| {label} | {statistics.median(samples):.1f} | {_p90(samples):.1f} | {min(samples):.1f} | "
                     f"{max(samples):.1f} | {size / 1024:.0f} KiB |")
    publish(lines, args.record, "gradebook")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
