"""`grader capacity` on PostgreSQL: the grade times it reads (recent scored single-attempt runs of
one GPU model, claim to result), what it says when the model is ambiguous or unknown, and that
its table is the capacity model's answer for those times."""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.capacity import Course, Planner, Shape
from grader.capacity_cli import span
from grader.cli import app
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, ProblemResult, Role, RunState, utcnow
from grader.models import Course as CourseRow
from grader.reads.grade_times import grade_seconds, graded_gpu_models
from grader.service import record_submission
from grader.settings import Settings, get_settings
from grader.storage.blobstore import StoredBlob

H200, A100 = "NVIDIA H200", "NVIDIA A100-SXM4-80GB"


@pytest.fixture
def graded(sessions: sessionmaker[Session]) -> str:
    """A fresh assignment whose runs are exactly these: on the H200 three scored runs of 150, 210
    and 180 s (newest last), one retried (its span holds the wait between attempts), one failed
    early; on an A100 one scored run of 400 s; one built run without a GPU."""
    slug = f"cap-{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        assignment = Assignment(slug=slug, title="capacity", course=CourseRow(slug=slug, title="capacity"),
                                total_points=100)
        session.add(assignment)
        user = get_or_create_user(session, f"cap-{uuid.uuid4().hex[:6]}", Role.student, [assignment.course])
        now = utcnow()
        rows = ((150, RunState.scored, H200, 1), (9000, RunState.scored, H200, 2), (5, RunState.failed, H200, 1),
                (400, RunState.scored, A100, 1), (60, RunState.built, None, 1),
                (210, RunState.scored, H200, 1), (180, RunState.scored, H200, 1))
        for age, (seconds, state, model, attempts) in enumerate(rows):
            _sub, run = record_submission(session, user, assignment, "a.zip", StoredBlob(sha256="ab" * 32, size=1))
            finished = now - timedelta(minutes=len(rows) - age)  # later rows are more recent
            run.state, run.attempts = state, attempts
            run.started_at, run.finished_at = finished - timedelta(seconds=seconds), finished
            run.stages = {"build": {"status": "ok", "seconds": 1.0, "log": ""},
                          "run": {"status": "ok", "seconds": seconds - 5.0, "log": ""}}
            if model:
                run.results.append(ProblemResult(problem_id="1", title="one", status="passed", points=1, max_points=1,
                                                 details={"measurement": {"telemetry": {"before": {"name": model}}}}))
    return slug


@pytest.fixture
def cli(settings_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    for key, value in settings_env.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    yield CliRunner()
    get_settings.cache_clear()


def test_grade_times_are_recent_scored_single_attempt_runs_of_the_model(
    sessions: sessionmaker[Session], graded: str,
) -> None:
    with session_scope(sessions) as session:
        assignment_id = session.query(Assignment).filter_by(slug=graded).one().id
        assert graded_gpu_models(session, 100, assignment_id) == {H200: 3, A100: 1}
        assert grade_seconds(session, 100, assignment_id, H200, (RunState.scored,)) == [180, 210, 150]
        assert grade_seconds(session, 2, assignment_id, H200, (RunState.scored,)) == [180, 210]  # the newest
        # The run page's reading: every graded run of the assignment, GPU or not
        assert grade_seconds(session, 100, assignment_id) == [180, 210, 60, 400, 150]


def test_capacity_prints_the_models_answer_for_the_measured_times(
    cli: CliRunner, graded: str, settings: Settings,
) -> None:
    result = cli.invoke(app, ["capacity", "--students", "40", "--per-student", "2", "--window", "2h",
                              "--assignment", graded, "--gpu-model", "h200", "--workers", "1", "--target", "5m",
                              "--replications", "4"])
    assert result.exit_code == 0, result.output
    assert f"{H200}, the 3 most recent scored runs of {graded}" in result.output
    assert "stages, median: build 1.0 s, run 175.0 s" in result.output
    planner = Planner(Course(40, 2, Shape.default(7200)), [180.0, 210.0, 150.0], seed=0, replications=4)
    today, needed = planner.waits(1), planner.workers_for(300)
    assert needed is not None and needed.workers > 1
    assert f"| 1 (today) | {span(today.wait_p50)} | {span(today.wait_p95)} |" in result.output
    assert f"| {needed.workers} (fewest for a p95 wait of {span(300)}) | {span(needed.wait_p50)} | " in result.output
    assert f"For a p95 wait of at most {span(300)}: {needed.workers} GPU worker(s); today 1." in result.output


def test_capacity_says_which_model_to_choose_or_what_to_give(cli: CliRunner, graded: str) -> None:
    several = cli.invoke(app, ["capacity", "--students", "10", "--assignment", graded])
    assert several.exit_code == 2 and f"several GPU models ({A100}, {H200}): choose one with --gpu-model" in several.output
    unknown = cli.invoke(app, ["capacity", "--students", "10", "--assignment", graded, "--gpu-model", "L40S"])
    assert unknown.exit_code == 2 and "give --grade-seconds" in unknown.output
    given = cli.invoke(app, ["capacity", "--students", "10", "--assignment", graded, "--grade-seconds", "60",
                             "--replications", "2"])
    assert given.exit_code == 0 and "given on the command line" in given.output
    bad = cli.invoke(app, ["capacity", "--students", "10", "--grade-seconds", "60", "--shape", "1,x"])
    assert bad.exit_code == 2 and "is not a deadline shape" in bad.output
