"""`grader capacity` on PostgreSQL: the grade times it reads (recent scored single-attempt runs of
one GPU model, claim to result) and the timing part of each (from the phases a run recorded,
else a share), what it says when the model is ambiguous or unknown, and that its table is the
capacity model's answer for those times under both schedules."""
from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from grader.capacity.model import Course, Planner, Schedule, Shape
from grader.cli.capacity import span
from grader.cli.main import app
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, ProblemResult, Role, RunState, utcnow
from grader.models import Course as CourseRow
from grader.reads.grade_times import GradeSplit, grade_seconds, grade_splits, graded_gpu_models, with_timing
from grader.service import record_submission
from grader.settings import Settings, get_settings
from grader.storage.blobstore import StoredBlob
from rubrics.hw4 import ASSIGNMENT as HW4

H200, A100 = "NVIDIA H200", "NVIDIA A100-SXM4-80GB"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def graded(sessions: sessionmaker[Session]) -> str:
    """A fresh assignment whose runs are exactly these: on the H200 three scored runs of 150, 210
    and 180 s (newest last; the 210 s one recorded its phases: 40 s of timing), one retried (its
    span holds the wait between attempts), one failed early; on an A100 one scored run of 400 s;
    one built run without a GPU."""
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
                telemetry: dict[str, Any] = {"before": {"name": model}}
                if seconds == 210:
                    telemetry["seconds"] = {"abi_cases": 20.0, "timing_warm": 5.0, "timing": 40.0}
                run.results.append(ProblemResult(problem_id="1", title="one", status="passed", points=1, max_points=1,
                                                 details={"measurement": {"telemetry": telemetry}}))
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
        splits = grade_splits(session, 100, assignment_id, H200, (RunState.scored,), plugin=HW4)
        assert splits == [GradeSplit(180, None), GradeSplit(210, 40.0), GradeSplit(150, None)]
        assert with_timing(splits) == [90, 40, 75] and with_timing(splits, 0.2) == [36, 40, 30]


def test_a_run_timed_in_its_own_piece_splits_by_its_turns_on_the_gpus_lock(sessions: sessionmaker[Session]) -> None:
    """Checks 100 s, then a timing piece of 260 s that waited 150 s for the lock (no one's work),
    held it shared 30 s (its children's start) and alone 75 s: 210 s of work, 105 of it timing."""
    slug = f"cap-{uuid.uuid4().hex[:6]}"
    with session_scope(sessions) as session:
        assignment = Assignment(slug=slug, title="pieces", course=CourseRow(slug=slug, title="pieces"), total_points=100)
        session.add(assignment)
        user = get_or_create_user(session, f"cap-{uuid.uuid4().hex[:6]}", Role.student, [assignment.course])
        _sub, run = record_submission(session, user, assignment, "a.zip", StoredBlob(sha256="cd" * 32, size=1))
        run.state, run.attempts, run.finished_at = RunState.scored, 1, utcnow()
        run.started_at = run.finished_at - timedelta(seconds=900)  # the wait between the pieces is not its time
        run.stages = {"run": {"status": "ok", "seconds": 100.0, "log": ""},
                      "timing_run": {"status": "ok", "seconds": 260.0, "log": ""}}
        turns = {"waited_shared": 40.0, "shared": 30.0, "waited_alone": 110.0, "alone": 75.0}
        for pid in ("1", "2"):
            run.results.append(ProblemResult(problem_id=pid, title=pid, status="passed", points=1, max_points=1,
                                             details={"measurement": {"telemetry": {"gpu_turns": turns}}}))
        session.flush()
        assert grade_splits(session, 10, assignment.id, plugin=None) == [GradeSplit(210.0, 105.0, 30.0)]


def test_capacity_prints_both_schedules_for_the_measured_times(
    cli: CliRunner, graded: str, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The assignment is hw4's under another name: its plug-in reads the phases a whole grade recorded.
    hw4 = (ROOT / "rubrics" / "hw4" / "rubric.yaml").read_text()
    (tmp_path / f"{graded}.yaml").write_text(hw4.replace("slug: hw4", f"slug: {graded}", 1)
                                             .replace("starter: ../../starter/hw4", f"starter: {ROOT / 'starter' / 'hw4'}"))
    monkeypatch.setenv("KG_RUBRIC_DIRS", json.dumps([str(tmp_path)]))
    get_settings.cache_clear()
    result = cli.invoke(app, ["capacity", "--students", "40", "--per-student", "2", "--window", "2h",
                              "--assignment", graded, "--gpu-model", "h200", "--workers", "1", "--target", "5m",
                              "--check-slots", "3", "--replications", "4"])
    assert result.exit_code == 0, result.output
    assert f"{H200}, the 3 most recent scored runs of {graded}" in result.output
    assert "stages, median: build 1.0 s, run 175.0 s" in result.output
    assert "timing from the phases 1 of them recorded, 0.5 of the grade for the other 2" in result.output
    planner = Planner(Course(40, 2, Shape.default(7200)), [180.0, 210.0, 150.0], seed=0, replications=4,
                      timing_seconds=[90.0, 40.0, 75.0], check_slots=3)
    for schedule in Schedule:
        today, needed = planner.figures(schedule, 1), planner.fewest(schedule, 300)
        v, f = today.verdict, today.final
        assert (f"| {schedule.value} | 1 (today) | {span(v.p50)} | {span(v.p95)} | {span(v.max)} | {span(f.p50)} | "
                f"{span(f.p95)} | {span(f.max)} |") in result.output
        assert needed is not None
        if needed.gpus > 1:
            assert (f"| {schedule.value} | {needed.gpus} (fewest for a p95 verdict wait of {span(300)}) | "
                    f"{span(needed.verdict.p50)} | ") in result.output
        assert f"- {schedule.value}: {needed.gpus} GPU(s)." in result.output
    assert planner.fewest(Schedule.today, 300).gpus > 1  # type: ignore[union-attr]
    assert "--target applies to the verdict wait" in result.output


def test_capacity_says_which_model_to_choose_or_what_to_give(cli: CliRunner, graded: str) -> None:
    several = cli.invoke(app, ["capacity", "--students", "10", "--assignment", graded])
    assert several.exit_code == 2 and f"several GPU models ({A100}, {H200}): choose one with --gpu-model" in several.output
    unknown = cli.invoke(app, ["capacity", "--students", "10", "--assignment", graded, "--gpu-model", "L40S"])
    assert unknown.exit_code == 2 and "give --grade-seconds" in unknown.output
    given = cli.invoke(app, ["capacity", "--students", "10", "--assignment", graded, "--grade-seconds", "60",
                             "--replications", "2"])
    assert given.exit_code == 0 and "given on the command line; timing 0.5 of each" in given.output
    shared = cli.invoke(app, ["capacity", "--students", "10", "--grade-seconds", "60", "--timing-share", "0.25",
                              "--replications", "2"])
    assert shared.exit_code == 0 and "mean 60 s, of which timing mean 15 s" in shared.output
    for option, value in (("--timing-share", "1.5"), ("--check-slots", "0")):
        refused = cli.invoke(app, ["capacity", "--students", "10", "--grade-seconds", "60", option, value])
        assert refused.exit_code == 2 and option in refused.output
    bad = cli.invoke(app, ["capacity", "--students", "10", "--grade-seconds", "60", "--shape", "1,x"])
    assert bad.exit_code == 2 and "is not a deadline shape" in bad.output
